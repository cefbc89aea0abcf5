// SPEC §10 on the CUDA backend (skipped without a GPU): the operations over caller-owned buffers agree
// with the Verifier bitwise in every layout, and a bad entry of a device-resident layer table, which the
// host cannot read, is caught by the kernels: recorded in the error word, its rows treated as padding.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kdagraph/ops.hpp"
#include "kernels/stream.h"
#include "tests/common/caller_storage.h"
#include "tests/common/conv_engines.h"
#include "tests/common/conv_rounds.h"
#include "tests/common/engines.h"
#include "tests/common/gpu.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {
namespace {

VerifierConfig cuda_ops_config(Mode mode, DType state) {
  VerifierConfig c = small_verifier(Backend::cuda, mode, /*layers=*/2, /*tokens=*/3);
  c.model = ModelShape{2, 1, 2, 64, 64};
  c.pool = PoolShape{6, 4, state};
  c.max_rows = 4;
  c.io_dtype = DType::bf16;
  return c;
}

class OpsLayoutsCuda : public ::testing::TestWithParam<CallerLayout> {};

TEST_P(OpsLayoutsCuda, MatchTheVerifierBitwise) {
  KDA_SKIP_WITHOUT_GPU();
  const auto stream = detail::StreamHandle::create(Backend::cuda);
  for (Mode mode : {Mode::fused_accept, Mode::two_phase, Mode::replay})
    for (DType state : {DType::f32, DType::bf16})
      expect_ops_match_verifier(cuda_ops_config(mode, state), GetParam(), stream.get(), fresh_seed(), 12);
}

INSTANTIATE_TEST_SUITE_P(Layouts, OpsLayoutsCuda,
                         ::testing::Values(CallerLayout::compact, CallerLayout::layer_table,
                                           CallerLayout::padded_rows, CallerLayout::sglang),
                         [](const auto& param_info) { return std::string(to_string(param_info.param)); });

// SPEC §9 on the device: with the short convolution (C = 2 * 64 + 64 = 192, not a multiple of the conv
// block), the three modes, each unfused and fused (one kernel per layer, its early loads following the
// batch), agree bitwise over 200 rounds with joins and retirements, in every layout, fused against
// unfused in every byte of the storage.
TEST_P(OpsLayoutsCuda, WithTheConvModesAgreeBitwiseOver200Rounds) {
  KDA_SKIP_WITHOUT_GPU();
  const auto stream = detail::StreamHandle::create(Backend::cuda);
  VerifierConfig c = cuda_ops_config(Mode::fused_accept, DType::f32);
  c.model = ModelShape{2, 1, 1, 64, 64};
  c.pool = PoolShape{8, 4, DType::f32};
  expect_conv_modes_agree(c, ConvShape{conv_channels(c.model), 4, ConvActivation::silu}, GetParam(), stream.get(),
                          fresh_seed(), 200);
}

// The same through the host engine's CUDA graphs with batches crossing buckets: the conv fused into each
// layer's verify against the two launches, bitwise, in every mode.
TEST(ConvVerifyCuda, FusedMatchesUnfusedThroughTheEngine) {
  KDA_SKIP_WITHOUT_GPU();
  const auto stream = detail::StreamHandle::create(Backend::cuda);
  for (Mode mode : {Mode::two_phase, Mode::fused_accept, Mode::replay})
    for (DType io : {DType::f32, DType::bf16}) {
      HostEngineConfig c = small_engine(Backend::cuda, mode, Exec::graph, fresh_seed());
      c.verifier.model = ModelShape{2, 2, 4, 64, 64};
      c.verifier.io_dtype = io;
      expect_fused_engine_matches_unfused(with_conv(c), stream.get(), 200);
    }
}

// A few rounds of the same, every mode, for compute-sanitizer's memcheck and racecheck
// (profiling/gpu_check.sh), which run a kernel hundreds of times slower.
TEST(ConvVerifyCuda, FusedMatchesUnfusedForTheSanitizers) {
  KDA_SKIP_WITHOUT_GPU();
  const auto stream = detail::StreamHandle::create(Backend::cuda);
  for (Mode mode : {Mode::two_phase, Mode::fused_accept, Mode::replay}) {
    HostEngineConfig c = small_engine(Backend::cuda, mode, Exec::graph, fresh_seed());
    c.verifier.model = ModelShape{2, 2, 4, 128, 128};
    c.verifier.io_dtype = DType::bf16;
    expect_fused_engine_matches_unfused(with_conv(c), stream.get(), 3);
  }
}

TEST(OpsCuda, ANullEntryOfADeviceLayerTableIsRecordedAndItsRowsArePadding) {
  KDA_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(fresh_seed());
  const VerifierConfig cfg = cuda_ops_config(Mode::fused_accept, DType::f32);
  CallerStorage c(cfg, CallerLayout::layer_table);
  BackendInputs in(cfg);
  in.randomize(rng);
  for (int32_t slot = 0; slot < cfg.pool.slots; ++slot) c.prefill(slot, random_states(cfg, rng));
  const std::vector<void*> bad_table = {c.pool.per_layer[0].data(), nullptr};
  const auto table = detail::Buffer::copy_of(Backend::cuda, bad_table);
  detail::MappedHostBuffer errors(Backend::cuda, sizeof(DeviceErrorWord));
  *static_cast<DeviceErrorWord*>(errors.host()) = DeviceErrorWord{};
  SlotStorage storage = c.storage;
  storage.pool.layer_table = table.as<void*>();
  storage.errors = static_cast<DeviceErrorWord*>(errors.device());
  const std::vector<int32_t> packed = {2, 4, 1, -1, -1};
  c.batch.upload(packed.data(), packed.size() * sizeof(int32_t));
  const auto stream = detail::StreamHandle::create(Backend::cuda);
  const std::vector<uint8_t> scratch_before = c.scratch.bytes();
  ops::build_indices(stream.get(), c.spec, storage, c.batch_view(cfg.max_rows), c.idx);
  ops::verify_layer(stream.get(), c.spec, storage, c.idx, cfg.max_rows, 1, in.view(1, 1));
  stream.synchronize();
  const DeviceErrorWord word = read_device_errors(static_cast<const DeviceErrorWord*>(errors.host()));
  EXPECT_EQ(DeviceErrorCode(word.code), DeviceErrorCode::layer_base_invalid);
  EXPECT_EQ(word.value, 1) << "the layer";
  EXPECT_EQ(word.count, 2u) << "once per real row";
  const auto out = in.o[1][1].download<uint16_t>();
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], 0u) << "output element " << i << " is not zero";
  EXPECT_EQ(c.scratch.bytes(), scratch_before) << "no post-state is written for a layer with no valid base";
}

}  // namespace
}  // namespace kdagraph::test
