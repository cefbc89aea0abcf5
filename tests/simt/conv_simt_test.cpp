// SPEC §9 with the conv kernel's own source on the SIMT executor (kernels/conv.cu, compiled as C++):
// against fp64 and bitwise against the CPU twin (both multiply then add, so they agree bit for bit here)
// on the CPU tests' cases; over many rounds against each slot's accepted inputs; and, since in this
// build the CPU backend runs the kernels, the three modes through the host engine with the conv.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kdagraph/host_engine.hpp"
#include "kdagraph/ops.hpp"
#include "kernels/conv.h"
#include "tests/common/conv_case.h"
#include "tests/common/engines.h"
#include "tests/simt/executor.h"
#include "tests/simt/simt_case.h"

namespace kdagraph::test {
namespace {

const Stream kCpu{Backend::cpu, nullptr};

const ConvBackend kSimtConv{
    [](ConvCase& c) { ASSERT_EQ(launch_conv(c.params(c.host_pointers()), nullptr), cudaSuccess) << simt::last_error(); },
    [](ConvCase& c, const std::vector<int32_t>& slot_of, const std::vector<int32_t>& accept_of,
       const std::vector<int32_t>& accept_len, bool from_scratch) {
      const ConvWindowParams p = c.window_params(c.host_pointers(), slot_of.data(), int32_t(slot_of.size()),
                                                 from_scratch ? accept_of.data() : nullptr, accept_len.data(),
                                                 from_scratch);
      ASSERT_EQ(launch_conv_window(p, nullptr), cudaSuccess) << simt::last_error();
    }};

class ConvSimtSweep : public ::testing::TestWithParam<ConvCaseShape> {};

// A fresh slot (a = 0) and a full accept (a = T) in row 0, the other rows as in the CPU test.
TEST_P(ConvSimtSweep, MatchesFp64AndTheCpuBitwise) {
  const ConvCaseShape sh = GetParam();
  for (int32_t a : {0, sh.tokens}) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(sh.str() + " a=" + std::to_string(a) + " seed=" + std::to_string(seed));
    const std::vector<int32_t> slots = {3, -1, 0, 4}, accepts = {a, 0, sh.tokens, 1}, parities = {1, 0, 0, 1};
    ConvCase simt(sh, seed, slots, accepts, parities), cpu(sh, seed, slots, accepts, parities);
    const ConvExpectation want = expect_of(simt);
    const uint64_t launches = simt::launches();
    kSimtConv.conv(simt);
    EXPECT_EQ(simt::launches() - launches, 1u) << "the conv ran on the executor";
    expect_conv_results(simt, want, conv_tolerance(sh.io));
    conv_cpu(cpu.params(cpu.host_pointers()));
    for (size_t s = 0; s < simt.y.size(); ++s) EXPECT_TRUE(simt.y[s].bytes == cpu.y[s].bytes) << "output segment " << s;
    EXPECT_TRUE(simt.state.bytes == cpu.state.bytes && simt.scratch.bytes == cpu.scratch.bytes);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvSimtSweep, ::testing::ValuesIn(conv_sweep_shapes()),
                         [](const auto& param_info) { return param_info.param.name(); });

TEST(ConvSimt, RoundsFollowEachSlotsAcceptedInputs) {
  for (const ConvCaseShape& shape : conv_sweep_shapes()) {
    if (shape.channels != 200 || shape.tokens != 4 || shape.width != 4) continue;
    ConvCaseShape sh = shape;
    sh.rows = 5;
    sh.slots = 6;
    expect_rounds_follow_history(sh, fresh_seed(), 20, kSimtConv);
  }
}

// The host engine's rounds with the conv, every operation a kernel on the executor: two-phase eager,
// fused-accept and replay in the CPU graph twin, bitwise in outputs, states and conv windows.
TEST(ConvSimt, ModesAgreeThroughTheEngine) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  const uint64_t launches_before = simt::launches();
  // OS-thread lanes (TSan) start a thread per lane of every block: a fifth of the rounds, with retirements
  // more likely so that requests still join and retire.
  const int rounds = threads_lanes() ? 6 : 30;
  note_subset(rounds, 30);
  std::vector<std::unique_ptr<HostEngine>> engines;
  for (Mode mode : {Mode::two_phase, Mode::fused_accept, Mode::replay}) {
    HostEngineConfig c = with_conv(small_engine(Backend::cpu, mode, mode == Mode::two_phase ? Exec::eager : Exec::graph, seed));
    c.verifier.model = ModelShape{2, 1, 2, 64, 64};
    c.batch = 4;
    c.retire_rate = threads_lanes() ? 0.4 : 0.15;
    engines.push_back(std::make_unique<HostEngine>(c));
  }
  for (auto& e : engines) {
    e->start(kCpu);
    for (int r = 0; r < rounds; ++r) e->run_round(kCpu);
    e->finish(kCpu);
  }
  // Per round and engine at least: inputs, the index build, a conv and a verify per layer, sampler, accept.
  EXPECT_GE(simt::launches() - launches_before, uint64_t(3 * rounds * 8)) << "the rounds did not run on the executor";
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

// SPEC §11: short_conv takes any C, its conv state rows need not fill 16 bytes. Through the ops (in this
// build the CPU backend runs the CUDA launcher), a compact state of C = 33 whose base sits one element
// past a 16-byte boundary gives the fp64 results of the case's 16-byte rows, bitwise in the state.
TEST(ConvSimt, ShortConvTakesRowsThatDoNotFill16Bytes) {
  for (DType io : {DType::f32, DType::bf16}) {
    ConvCaseShape sh;
    sh.io = io;
    sh.layout = ConvLayout::in_place;  // short_conv's own layout (SPEC §11)
    sh.channels = 33;
    sh.tokens = 3;
    sh.scratch_steps = 4;
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(sh.str() + " seed=" + std::to_string(seed));
    ConvCase c(sh, seed, {4, -1, 0, 2}, {3, 0, 0, 1});
    const ConvExpectation want = expect_of(c);
    const size_t es = dtype_size(io), row = size_t(c.columns) * size_t(sh.channels) * es;
    ASSERT_NE(row % 16, 0u) << "the case must have rows that do not fill 16 bytes";
    std::vector<uint8_t> compact(16 + size_t(sh.slots) * row);
    uint8_t* base = compact.data() + (16 - reinterpret_cast<uintptr_t>(compact.data()) % 16) % 16 + es;
    ASSERT_LE(base + size_t(sh.slots) * row, compact.data() + compact.size());
    const size_t padded = size_t(c.state_stride) * es;
    for (int32_t s = 0; s < sh.slots; ++s) std::memcpy(base + size_t(s) * row, c.state.bytes.data() + size_t(s) * padded, row);
    ShortConvCall call;
    call.conv = ConvShape{sh.channels, sh.width, sh.activation};
    call.io_dtype = io;
    call.batch = sh.rows;
    call.tokens = sh.tokens;
    call.scratch_steps = sh.scratch_steps;
    call.x = c.x.bytes.data();
    call.weight = c.weight.data();
    call.bias = c.bias.data();
    call.y = c.y[0].bytes.data();
    call.conv_state = state_view(base, io, 1, 0, sh.slots, int64_t(c.columns) * sh.channels);
    call.state_indices = c.row_slot.data();
    call.num_accepted = c.row_accept.data();
    const uint64_t launches = simt::launches();
    ops::short_conv(kCpu, call);
    EXPECT_EQ(simt::launches() - launches, 1u) << "the conv ran on the executor";
    for (int32_t s = 0; s < sh.slots; ++s) std::memcpy(c.state.bytes.data() + size_t(s) * padded, base + size_t(s) * row, row);
    expect_conv_results(c, want, conv_tolerance(io));
  }
}

}  // namespace
}  // namespace kdagraph::test
