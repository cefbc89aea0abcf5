// docs/conv.md "fused with the verify" on the program's runner (tests/common/runner.h [TAG_RUNNERS]):
// ops::conv_verify_layer (one kernel per layer) against conv_layer followed by verify_layer, bitwise,
// through the host engine's graph runner in every mode, conv width and io dtype (the operations on caller
// storage are compared round by round in tests/graph/conv_ops_test.cpp), over several staging chunks,
// and in a few rounds at K = 128 for compute-sanitizer (profiling/gpu_check.sh); the three modes with the
// conv through the engine; and every bad argument refused by name with nothing changed.
//
// Sized by runner (Matrix): the engine's 200 rounds a mode, width and dtype on the CPU and the GPU; on
// the executor 20 rounds a mode at W = 4 in bf16; none with OS-thread lanes (an engine round takes about
// 20 s there; the ops tests run these kernels under them).
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kdagraph/ops.hpp"
#include "tests/common/caller_storage.h"
#include "tests/common/conv_engines.h"
#include "tests/common/conv_rounds.h"
#include "tests/common/engines.h"
#include "tests/common/runner.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {
namespace {

// The host engine with the conv of `model`'s channels.
HostEngineConfig conv_engine(Mode mode, int32_t width, DType io, const ModelShape& model, Exec exec = Exec::graph) {
  HostEngineConfig c = small_engine(runner().memory(), mode, exec, fresh_seed());
  c.verifier.model = model;
  c.verifier.io_dtype = io;
  return with_conv(c, width);
}

// GVA with H = 2, HV = 4 on the CPU (K = 32) and the GPU (K = 64), H = 1, HV = 2 on the executor.
ModelShape engine_model() {
  const int32_t K = case_head_dim(32);
  return runner().matrix == Matrix::full ? ModelShape{2, 2, 4, K, K} : ModelShape{2, 1, 2, K, K};
}

// Rounds of joins, retirements and batches crossing buckets, per mode, width and io dtype.
TEST(ConvVerify, FusedMatchesUnfusedThroughTheEngine) {
  KDA_SKIP_WITHOUT_RUNNER();
  if (runner().matrix == Matrix::thread_lanes) GTEST_SKIP() << "OS-thread lanes: the ops tests run these kernels";
  for (Mode mode : {Mode::two_phase, Mode::fused_accept, Mode::replay})
    for (int32_t width : {2, 3, 4})
      for (DType io : {DType::f32, DType::bf16}) {
        if (runner().matrix == Matrix::executor && !(width == 4 && io == DType::bf16)) continue;
        expect_fused_engine_matches_unfused(conv_engine(mode, width, io, engine_model()), runner().stream,
                                            by_matrix(200, 20, 0));
        if (::testing::Test::HasFatalFailure()) return;
      }
}

// T = 10 new tokens (and in replay up to 10 replayed ones first) take two or three of the kernels'
// staging chunks of 8: the fused conv's window for a later chunk is the last W - 1 inputs of the one
// before. Through the operations, every byte of the storage after every round.
TEST(ConvVerify, FusedMatchesUnfusedOverSeveralChunks) {
  KDA_SKIP_WITHOUT_RUNNER();
  VerifierConfig c = small_verifier(runner().memory(), Mode::fused_accept, /*layers=*/2, /*tokens=*/10);
  c.model = ModelShape{2, 1, 2, 64, 64};
  c.pool = PoolShape{6, 11, DType::f32};
  c.max_rows = 3;
  c.io_dtype = DType::bf16;
  expect_conv_modes_agree(c, ConvShape{conv_channels(c.model), 4, ConvActivation::silu}, CallerLayout::compact,
                          runner().stream, fresh_seed(), by_matrix(30, 8, 1));
}

// A few rounds at Kimi's head dim, every mode, for compute-sanitizer's memcheck and racecheck
// (profiling/gpu_check.sh), which run a kernel hundreds of times slower.
TEST(ConvVerify, FusedMatchesUnfusedForTheSanitizers) {
  KDA_SKIP_WITHOUT_RUNNER();
  if (runner().on_executor()) GTEST_SKIP() << "the executor runs K = 128 with the conv fused in the family's members";
  for (Mode mode : {Mode::two_phase, Mode::fused_accept, Mode::replay}) {
    expect_fused_engine_matches_unfused(conv_engine(mode, 4, DType::bf16, ModelShape{2, 2, 4, 128, 128}),
                                        runner().stream, 3);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// The host engine's rounds with the conv (fused, as by default): two-phase eager, fused-accept and replay
// in the bucket's graph, bitwise in outputs, states and conv windows of every retired request.
TEST(ConvVerify, TheModesAgreeThroughTheEngine) {
  KDA_SKIP_WITHOUT_RUNNER();
  if (runner().matrix == Matrix::thread_lanes) GTEST_SKIP() << "OS-thread lanes: the ops tests run these kernels";
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  const uint64_t launches_before = runner_launches();
  const int rounds = by_matrix(30, 12, 0);
  std::vector<std::unique_ptr<HostEngine>> engines;
  for (Mode mode : {Mode::two_phase, Mode::fused_accept, Mode::replay}) {
    HostEngineConfig c = conv_engine(mode, 4, DType::f32, ModelShape{2, 1, 2, 64, 64},
                                     mode == Mode::two_phase ? Exec::eager : Exec::graph);
    c.seed = seed;
    c.batch = 4;
    c.retire_rate = 0.15;
    engines.push_back(std::make_unique<HostEngine>(c));
  }
  for (auto& e : engines) {
    e->start(runner().stream);
    for (int r = 0; r < rounds; ++r) e->run_round(runner().stream);
    e->finish(runner().stream);
  }
  if (runner().on_executor()) {  // a round: inputs, the index build, a conv and verify per layer, sampler, accept
    EXPECT_GE(runner_launches() - launches_before, uint64_t(3 * rounds * 6)) << "the rounds did not run on the executor";
  }
  const HostEngine& want = *engines[0];
  EXPECT_GT(want.retired().size(), 4u);
  for (size_t i = 1; i < engines.size(); ++i) {
    const HostEngine& got = *engines[i];
    ASSERT_EQ(got.rounds().size(), want.rounds().size());
    for (size_t r = 0; r < want.rounds().size(); ++r)
      ASSERT_TRUE(got.rounds()[r].outputs == want.rounds()[r].outputs) << "engine " << i << ", round " << r;
    ASSERT_EQ(got.retired().size(), want.retired().size());
    for (size_t k = 0; k < want.retired().size(); ++k) {
      EXPECT_TRUE(got.retired()[k].state == want.retired()[k].state) << "engine " << i << ", request " << k;
      EXPECT_TRUE(got.retired()[k].conv_window == want.retired()[k].conv_window) << "engine " << i << ", request " << k;
    }
  }
}

// A good fused call on caller storage, and the bad variants of its arguments.
struct BadFusedCall {
  std::string argument;
  std::function<void(RoundSpec&, SlotStorage&, ConvLayerInputs&, LayerInputs&, BatchView&)> spoil;
};

TEST(ConvVerify, BadArgumentsAreRefusedByNameAndChangeNothing) {
  KDA_SKIP_WITHOUT_RUNNER();
  for (Mode mode : {Mode::two_phase, Mode::fused_accept, Mode::replay}) {
    SCOPED_TRACE(to_string(mode));
    std::mt19937_64 rng(fresh_seed());
    VerifierConfig cfg = small_verifier(runner().memory(), mode, /*layers=*/2, /*tokens=*/3);
    cfg.model = ModelShape{2, 2, 4, 64, 64};  // a head the kernels have: the good call runs
    cfg.max_rows = 4;
    const ConvShape conv{conv_channels(cfg.model), 4, ConvActivation::silu};
    ConvModeRun run(cfg, CallerLayout::compact, conv, true);
    CallerStorage& c = run.st;
    const size_t N = size_t(cfg.max_rows), T = size_t(cfg.tokens), C = size_t(conv.channels);
    const size_t HV = size_t(cfg.model.value_heads), K = size_t(cfg.model.head_k);
    const detail::Buffer x = detail::Buffer::copy_of(runner().memory(), random_io_bytes(N * T * C, DType::f32, rng, -1, 1));
    const detail::Buffer w = detail::Buffer::copy_of(runner().memory(), random_io_bytes(C * 4, DType::f32, rng, -1, 1));
    const detail::Buffer g = detail::Buffer::copy_of(runner().memory(), random_io_bytes(N * T * HV * K, DType::f32, rng, -1, 1));
    const detail::Buffer beta = detail::Buffer::copy_of(runner().memory(), random_io_bytes(N * T * HV, DType::f32, rng, -1, 1));
    const detail::Buffer gate = detail::Buffer::copy_of(runner().memory(), random_io_bytes(HV + HV * K, DType::f32, rng, -1, 1));
    for (int32_t slot = 0; slot < cfg.pool.slots; ++slot) c.prefill(slot, random_states(cfg, rng));
    const std::vector<int32_t> packed = {2, 4, 1, -1, -1};
    c.batch.upload(packed.data(), packed.size() * sizeof(int32_t));
    ops::build_indices(runner().stream, c.spec, c.storage, c.batch_view(cfg.max_rows), c.idx);
    ConvLayerInputs good_conv;
    good_conv.x = x.data();
    good_conv.weight = w.as<float>();
    LayerInputs good_in;
    good_in.g = g.data();
    good_in.beta = beta.data();
    good_in.o = run.o[1].data();
    good_in.A_log = gate.as<float>();
    good_in.dt_bias = gate.as<float>() + HV;
    auto misaligned = [](const void* p, int bytes) { return static_cast<const char*>(p) + bytes; };
    const std::vector<BadFusedCall> bad = {
        {"spec.conv.width", [](RoundSpec& sp, SlotStorage& s, auto&, auto&, auto&) {  // layers with no conv
           sp.conv = ConvShape{};
           s.conv_state = s.conv_scratch = StateView{};
         }},
        {"storage.conv_state", [](RoundSpec& sp, auto&, auto&, auto&, auto&) { sp.conv = ConvShape{}; }},
        {"conv.channels", [](RoundSpec& sp, auto&, auto&, auto&, auto&) { sp.conv.channels += 1; }},
        {"storage.conv_state", [](auto&, SlotStorage& s, auto&, auto&, auto&) { s.conv_state.base = nullptr; }},
        {"x", [](auto&, auto&, ConvLayerInputs& in, auto&, auto&) { in.x = nullptr; }},
        {"x", [=](auto&, auto&, ConvLayerInputs& in, auto&, auto&) { in.x = misaligned(in.x, 4); }},  // 16-byte copies
        {"weight", [](auto&, auto&, ConvLayerInputs& in, auto&, auto&) { in.weight = nullptr; }},
        {"g", [](auto&, auto&, auto&, LayerInputs& in, auto&) { in.g = nullptr; }},
        {"o", [](auto&, auto&, auto&, LayerInputs& in, auto&) { in.o = nullptr; }},
        {"dt_bias", [](auto&, auto&, auto&, LayerInputs& in, auto&) { in.dt_bias = reinterpret_cast<const float*>(reinterpret_cast<const char*>(in.dt_bias) + 2); }},
        {"gate_heads", [](auto&, auto&, auto&, LayerInputs& in, auto&) { in.gate_heads = 3; }},
        {"batch.n_real", [](auto&, auto&, auto&, auto&, BatchView& b) { b.n_real = nullptr; }},
    };
    auto snapshot = [&] {
      std::vector<std::vector<uint8_t>> all = run.storage();
      for (const auto& o : run.outputs()) all.push_back(o);
      return all;
    };
    const auto before = snapshot();
    for (const BadFusedCall& b : bad) {
      RoundSpec spec = c.spec;
      SlotStorage storage = c.storage;
      ConvLayerInputs conv_in = good_conv;
      LayerInputs in = good_in;
      BatchView batch = c.batch_view(cfg.max_rows);
      b.spoil(spec, storage, conv_in, in, batch);
      SCOPED_TRACE("a bad " + b.argument);
      try {
        ops::conv_verify_layer(runner().stream, spec, storage, c.idx, cfg.max_rows, 1, conv_in, in, &batch);
        ADD_FAILURE() << "was accepted";
      } catch (const InvalidArgument& e) {
        EXPECT_EQ(e.argument(), b.argument) << e.what();
        EXPECT_NE(std::string(e.what()).find("ops::conv_verify_layer"), std::string::npos) << e.what();
      }
      EXPECT_TRUE(snapshot() == before) << "a refused call changed a buffer";
    }
    // The good call runs, and needs neither q, k, v nor output segments.
    const BatchView batch = c.batch_view(cfg.max_rows);
    ops::conv_verify_layer(runner().stream, c.spec, c.storage, c.idx, cfg.max_rows, 1, good_conv, good_in, &batch);
    EXPECT_FALSE(snapshot() == before);
  }
}

}  // namespace
}  // namespace kdagraph::test
