// docs/conv.md on the program's runner (tests/common/runner.h [TAG_RUNNERS]): the short convolution against an
// fp64 reference in every dtype, width, layout and window, and, off the CPU, against the CPU (bitwise on
// the executor, which multiplies then adds as the CPU does; within the kernels' tolerance on the GPU);
// over many rounds against each slot's accepted inputs; hand-worked cases; the window moves of commit and
// materialize; what the device clamps and records; rows that do not fill 16 bytes (short_conv); what the
// launchers refuse.
//
// Sized by runner (Matrix): every shape of the sweep runs on every runner; the CPU and the GPU at every
// accept length of row 0, the executor at the two ends (a fresh slot and a full accept). The rounds run on
// every layout and width on the CPU and the GPU, on one shape on the executor.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kdagraph/error.hpp"
#include "kdagraph/ops.hpp"
#include "kernels/conv.h"
#include "tests/common/conv_case.h"
#include "tests/common/runner.h"

namespace kdagraph::test {
namespace {

bool full_matrix() { return runner().matrix == Matrix::full; }

// The runner's conv and window moves over a case's buffers, the results back in the case.
const ConvBackend kRunnerConv{
    [](ConvCase& c) {
      Placement at(runner().memory());
      run_op<ConvOp>(c.params(c.pointers(at)));
      at.fetch();
    },
    [](ConvCase& c, const std::vector<int32_t>& slot_of, const std::vector<int32_t>& accept_of,
       const std::vector<int32_t>& accept_len, bool from_scratch) {
      Placement at(runner().memory());
      run_op<ConvWindowOp>(c.window_params(c.pointers(at), at.in(slot_of), int32_t(slot_of.size()),
                                           from_scratch ? at.in(accept_of) : nullptr, at.in(accept_len),
                                           from_scratch));
      at.fetch();
    }};

class ConvSweep : public ::testing::TestWithParam<ConvCaseShape> {};

// Row 0 at accept lengths a = 0 (a fresh slot) to T: the window starts where the layout keeps it for a
// (and, in the halves, either parity), so the W - 1 inputs before the round are the previous round's,
// whatever a is. Row 1 is padding; slots 1 and 2 are in no row and must keep every byte.
TEST_P(ConvSweep, MatchesFp64) {
  KDA_SKIP_WITHOUT_RUNNER();
  const ConvCaseShape sh = GetParam();
  for (int32_t a = 0; a <= sh.tokens; ++a) {
    if (!full_matrix() && a != 0 && a != sh.tokens) continue;
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(sh.str() + " a=" + std::to_string(a) + " seed=" + std::to_string(seed));
    const std::vector<int32_t> slots = {3, -1, 0, 4}, accepts = {a, 0, sh.tokens, (a + 1) % (sh.tokens + 1)};
    const std::vector<int32_t> parities = {a % 2, 0, 1, 0};
    ConvCase got(sh, seed, slots, accepts, parities), cpu(sh, seed, slots, accepts, parities);
    const ConvExpectation want = expect_of(got);
    kRunnerConv.conv(got);
    expect_conv_results(got, want, conv_tolerance(sh.io));
    if (HasFatalFailure() || runner().kind == RunnerKind::cpu) continue;
    conv_cpu(cpu.params(cpu.host_pointers()));
    if (runner().on_executor()) {
      for (size_t s = 0; s < got.y.size(); ++s)
        EXPECT_EQ(first_difference(got.y[s].bytes, cpu.y[s].bytes), -1) << "output segment " << s << " against the CPU";
    } else {
      std::vector<double> on_runner, on_cpu;
      for (int32_t n = 0; n < sh.rows; ++n)
        for (int32_t t = 0; t < sh.tokens; ++t)
          for (int32_t ch = 0; ch < sh.channels; ++ch) {
            on_runner.push_back(got.y_at(n, t, ch));
            on_cpu.push_back(cpu.y_at(n, t, ch));
          }
      EXPECT_LE(rel_error(on_runner, on_cpu), conv_tolerance(sh.io)) << "outputs against the CPU";
    }
    EXPECT_TRUE(cpu.state.bytes == got.state.bytes && cpu.scratch.bytes == got.scratch.bytes)
        << "the conv state and scratch hold copies of inputs: equal bitwise";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvSweep, ::testing::ValuesIn(conv_sweep_shapes()),
                         [](const auto& param_info) { return param_info.param.name(); });

class ConvRounds : public ::testing::TestWithParam<ConvCaseShape> {};

TEST_P(ConvRounds, FollowEachSlotsAcceptedInputs) {
  KDA_SKIP_WITHOUT_RUNNER();
  ConvCaseShape sh = GetParam();
  sh.rows = 5;
  sh.slots = 6;
  expect_rounds_follow_history(sh, fresh_seed(), full_matrix() ? 40 : 20, kRunnerConv);
}

std::vector<ConvCaseShape> round_shapes() {
  std::vector<ConvCaseShape> out;
  for (const ConvCaseShape& s : conv_sweep_shapes()) {
    if (s.channels == 384 || s.tokens == 1) continue;
    if (!full_matrix() && !(s.channels == 200 && s.tokens == 4 && s.width == 4)) continue;
    out.push_back(s);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvRounds, ::testing::ValuesIn(round_shapes()),
                         [](const auto& param_info) { return param_info.param.name(); });

// Worked by hand: W = 3, one channel, exact small integers, no activation. In place (short_conv) the
// window of a slot with a = 2 starts at column 1; the state then holds [x_0, x_1, x_2] at columns 0..2.
TEST(Conv, HandWorkedInPlaceWindow) {
  KDA_SKIP_WITHOUT_RUNNER();
  ConvCaseShape sh;
  sh.layout = ConvLayout::in_place;
  sh.rows = 1;
  sh.tokens = 2;
  sh.channels = 1;
  sh.width = 3;
  sh.slots = 1;
  sh.scratch_steps = 3;
  sh.bias = true;
  sh.activation = ConvActivation::none;
  ConvCase c(sh, 1, {0}, {2});
  c.weight = {1.0f, 2.0f, 4.0f};
  c.bias = {0.5f};
  // Columns 0..3 (W - 2 + S = 4): [garbage, 1, 10, garbage]; window = [1, 10].
  std::vector<float> state(size_t(c.state_stride), -7.0f);
  state[1] = 1.0f;
  state[2] = 10.0f;
  c.state.assign(DType::f32, state);
  c.x.assign(DType::f32, {100.0f, 1000.0f});
  kRunnerConv.conv(c);
  EXPECT_EQ(c.y_at(0, 0, 0), 1.0f * 1 + 2.0f * 10 + 4.0f * 100 + 0.5f);
  EXPECT_EQ(c.y_at(0, 1, 0), 1.0f * 10 + 2.0f * 100 + 4.0f * 1000 + 0.5f);
  EXPECT_EQ(c.state.at(0), 10.0f) << "column 0: the window's last input";
  EXPECT_EQ(c.state.at(1), 100.0f);
  EXPECT_EQ(c.state.at(2), 1000.0f);
  EXPECT_EQ(c.state.at(3), -7.0f) << "column W - 2 + T is not the round's";
}

// The same round in the halves: half p = 1 (columns 5..9 of W - 1 + S = 5 each) holds the history
// [h0, h1 | 1, 10, garbage]; with a = 2 the window is [1, 10]. Half 0 then holds [1, 10 | 100, 1000]
// and half 1 is untouched.
TEST(Conv, HandWorkedHalves) {
  KDA_SKIP_WITHOUT_RUNNER();
  ConvCaseShape sh;
  sh.layout = ConvLayout::halves;
  sh.rows = 1;
  sh.tokens = 2;
  sh.channels = 1;
  sh.width = 3;
  sh.slots = 1;
  sh.scratch_steps = 3;
  sh.bias = true;
  sh.activation = ConvActivation::none;
  ConvCase c(sh, 1, {0}, {2}, {1});
  c.weight = {1.0f, 2.0f, 4.0f};
  c.bias = {0.5f};
  std::vector<float> state(size_t(c.state_stride), -7.0f);
  state[5] = 3.0f;
  state[6] = 5.0f;
  state[7] = 1.0f;
  state[8] = 10.0f;
  c.state.assign(DType::f32, state);
  c.x.assign(DType::f32, {100.0f, 1000.0f});
  kRunnerConv.conv(c);
  EXPECT_EQ(c.y_at(0, 0, 0), 1.0f * 1 + 2.0f * 10 + 4.0f * 100 + 0.5f);
  EXPECT_EQ(c.y_at(0, 1, 0), 1.0f * 10 + 2.0f * 100 + 4.0f * 1000 + 0.5f);
  const std::vector<float> half0 = {1.0f, 10.0f, 100.0f, 1000.0f, -7.0f};
  const std::vector<float> half1 = {3.0f, 5.0f, 1.0f, 10.0f, -7.0f};
  for (size_t j = 0; j < 5; ++j) {
    EXPECT_EQ(c.state.at(j), half0[j]) << "half 0, column " << j;
    EXPECT_EQ(c.state.at(5 + j), half1[j]) << "half 1, column " << j << ": the half the round read";
  }
}

// A window move per accept length: commit from the conv scratch (a = 0 moves nothing), materialize
// from column a of the slot's half p (a = 0 with p = 0 moves nothing); out-of-range slots are skipped,
// a length above S is clamped to S and recorded.
TEST(Conv, WindowMovesCommitAndMaterialize) {
  KDA_SKIP_WITHOUT_RUNNER();
  for (bool from_scratch : {true, false}) {
    for (DType io : {DType::f32, DType::bf16}) {
      ConvCaseShape sh;
      sh.io = io;
      sh.layout = from_scratch ? ConvLayout::fixed_window : ConvLayout::halves;
      sh.channels = 130;
      sh.width = 4;
      sh.tokens = 3;
      sh.scratch_steps = 4;
      sh.slots = 6;
      const uint64_t seed = fresh_seed();
      SCOPED_TRACE(std::string(from_scratch ? "commit" : "materialize") + " " + to_string(io) + " seed=" +
                   std::to_string(seed));
      ConvCase c(sh, seed, {0}, {0});
      c.scratch.assign(io, c.uniform(c.scratch.size(), -2.0f, 2.0f));
      const std::vector<int32_t> slot_of = {0, 1, 2, -1, 3, 9, 4, 5};
      const std::vector<int32_t> accept_of = {0, 1, 2, 1, 4, 1, 3, 7};  // per entry (commit)
      const std::vector<int32_t> accept_len = {0, 1, 2, 4, 3, 7};       // per slot (materialize)
      c.slot_parity = {1, 0, 1, 0, 1, 1};
      std::vector<uint8_t> want = c.state.bytes;
      const int32_t S = sh.scratch_steps, W = sh.width;
      for (size_t e = 0; e < slot_of.size(); ++e) {
        const int32_t slot = slot_of[e];
        if (slot < 0 || slot >= sh.slots) continue;
        const int32_t a = std::min(from_scratch ? accept_of[e] : accept_len[size_t(slot)], S);
        const int32_t column = c.window_column(a, c.slot_parity[size_t(slot)]);
        if (from_scratch ? a == 0 : column == 0) continue;
        for (int32_t j = 0; j < W - 1; ++j)
          for (int32_t ch = 0; ch < sh.channels; ++ch)
            put_elem(want, io, c.state_at(slot, j, ch),
                     from_scratch ? c.scratch.at(c.scratch_at(slot * S + a - 1, j, ch))
                                  : c.state.at(c.state_at(slot, column + j, ch)));
      }
      std::vector<DeviceErrorWord> errors(1);
      {
        Placement at(runner().memory());
        ConvWindowParams p = c.window_params(c.pointers(at), at.in(slot_of), int32_t(slot_of.size()),
                                             from_scratch ? at.in(accept_of) : nullptr, at.in(accept_len), from_scratch);
        p.errors = at.out(errors);
        run_op<ConvWindowOp>(p);
        at.fetch();
      }
      EXPECT_EQ(first_difference(c.state.bytes, want), -1);
      // Both clamp the 7; a materialize list's slot 9 is also recorded (a commit's slots were checked by
      // the index build). The first record is whichever core met its entry first.
      const auto code = DeviceErrorCode(errors[0].code);
      if (from_scratch) {
        EXPECT_EQ(code, DeviceErrorCode::accept_out_of_range);
        EXPECT_EQ(errors[0].value, 7);
      } else {
        EXPECT_TRUE((code == DeviceErrorCode::accept_out_of_range && errors[0].value == 7) ||
                    (code == DeviceErrorCode::slot_out_of_range && errors[0].value == 9))
            << to_string(code) << " " << errors[0].value;
      }
      EXPECT_EQ(errors[0].count, from_scratch ? 1u : 2u);
    }
  }
}

// What only the device sees: a row's slot outside [0, P) makes it padding, an accept length above S is
// clamped to S (the window at its last place, still inside the row); each recorded.
TEST(Conv, BadRowsAreClampedOrPaddedAndRecorded) {
  KDA_SKIP_WITHOUT_RUNNER();
  for (int32_t channels : {9, 300}) {
    ConvCaseShape sh;
    sh.channels = channels;
    sh.tokens = 2;
    sh.scratch_steps = 3;
    sh.slots = 4;
    sh.rows = 2;
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("C=" + std::to_string(channels) + " seed=" + std::to_string(seed));
    ConvCase c(sh, seed, {7, 1}, {0, 3});
    ConvCase clamped(sh, seed, {-1, 1}, {0, 3});  // the same bytes, the bad row as padding
    const ConvExpectation want = expect_of(clamped);
    c.set_batch({7, 1}, {0, 9});
    std::vector<DeviceErrorWord> errors(1);
    {
      Placement at(runner().memory());
      ConvParams p = c.params(c.pointers(at));
      p.errors = at.out(errors);
      run_op<ConvOp>(p);
      at.fetch();
    }
    expect_conv_results(c, want, conv_tolerance(sh.io));
    const auto code = DeviceErrorCode(errors[0].code);  // the first of the two, whichever core met it first
    EXPECT_TRUE(code == DeviceErrorCode::slot_out_of_range || code == DeviceErrorCode::accept_out_of_range);
    EXPECT_EQ(errors[0].count, 2u) << "the bad slot and the clamped length, once each";
  }
}

// docs/python.md: short_conv takes any C, its conv state rows need not fill 16 bytes. A compact state of
// C = 33 whose base sits one element past a 16-byte boundary gives the fp64 results of the case's 16-byte
// rows, bitwise in the state.
TEST(Conv, ShortConvTakesRowsThatDoNotFill16Bytes) {
  KDA_SKIP_WITHOUT_RUNNER();
  for (DType io : {DType::f32, DType::bf16}) {
    ConvCaseShape sh;
    sh.io = io;
    sh.layout = ConvLayout::in_place;  // short_conv's own layout (docs/python.md)
    sh.channels = 33;
    sh.tokens = 3;
    sh.scratch_steps = 4;
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(sh.str() + " seed=" + std::to_string(seed));
    ConvCase c(sh, seed, {4, -1, 0, 2}, {3, 0, 0, 1});
    const ConvExpectation want = expect_of(c);
    const size_t es = dtype_size(io), row = size_t(c.columns) * size_t(sh.channels) * es;
    ASSERT_NE(row % 16, 0u) << "the case must have rows that do not fill 16 bytes";
    std::vector<uint8_t> compact(32 + size_t(sh.slots) * row);
    // One element past a 16-byte boundary, wherever the rows are placed (device memory starts aligned).
    const uintptr_t start = runner().memory() == Backend::cpu ? reinterpret_cast<uintptr_t>(compact.data()) % 16 : 0;
    const size_t shift = (16 - start) % 16 + es, padded = size_t(c.state_stride) * es;
    for (int32_t s = 0; s < sh.slots; ++s)
      std::memcpy(compact.data() + shift + size_t(s) * row, c.state.bytes.data() + size_t(s) * padded, row);
    {
      Placement at(runner().memory());
      uint8_t* placed = at.out(compact);
      const ConvPointers ptr = c.pointers(at);
      const ShortConvCall call =
          short_conv_call(c, ptr, state_view(placed + shift, io, 1, 0, sh.slots, int64_t(c.columns) * sh.channels));
      const uint64_t launches = runner_launches();
      ops::short_conv(runner().stream, call);
      detail::wait_for_device(runner().memory());
      if (runner().on_executor()) {
        EXPECT_EQ(runner_launches() - launches, 1u) << "the conv ran on the executor";
      }
      at.fetch();
      for (int32_t s = 0; s < sh.slots; ++s)
        std::memcpy(c.state.bytes.data() + size_t(s) * padded, compact.data() + shift + size_t(s) * row, row);
    }
    expect_conv_results(c, want, conv_tolerance(io));
  }
}

// The launchers refuse, naming the check and its value, what the kernels are not built for. These run
// on the host before any launch and need no device; the CPU conv takes them.
TEST(Conv, TheLaunchersRefuseParametersTheKernelsAreNotBuiltFor) {
  if (runner().kind == RunnerKind::cpu) GTEST_SKIP() << "the CPU conv is no launcher";
  ConvCaseShape sh;
  ConvCase c(sh, 1, {0, 1, 2, 3}, {0, 0, 0, 0});
  const ConvParams good = c.params(c.host_pointers());
  const std::vector<std::pair<std::string, std::function<void(ConvParams&)>>> bad = {
      {"width", [](ConvParams& p) { p.width = 5; }},
      {"width", [](ConvParams& p) { p.width = 1; }},
      {"tokens", [](ConvParams& p) { p.tokens = p.scratch_steps + 1; }},
      {"channels", [](ConvParams& p) { p.channels = 0; }},
      {"out", [](ConvParams& p) { p.out[0].channels -= 1; }},
      {"out[].y", [](ConvParams& p) { p.out[0].y = nullptr; }},
      {"x", [](ConvParams& p) { p.x = static_cast<const char*>(p.x) + 1; }},
      {"weight", [](ConvParams& p) { p.weight = nullptr; }},
      {"state", [](ConvParams& p) { p.state.row_stride = 4; }},
      {"state", [](ConvParams& p) { p.state.dtype = DType::bf16; }},
      {"row_accept", [](ConvParams& p) { p.row_accept = nullptr; }},
      {"row_parity", [](ConvParams& p) { p.row_parity = nullptr; }},
  };
  const uint64_t launches = runner_launches();
  for (const auto& [argument, spoil] : bad) {
    ConvParams p = good;
    spoil(p);
    try {
      run_op<ConvOp>(p);
      ADD_FAILURE() << "a bad " << argument << " was launched";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.argument(), argument) << e.what();
      EXPECT_NE(std::string(e.what()).find("launch_conv"), std::string::npos) << e.what();
    }
  }
  ConvWindowParams w = c.window_params(c.host_pointers(), c.row_slot.data(), 4, nullptr, c.row_accept.data(), false);
  w.width = 9;
  try {
    run_op<ConvWindowOp>(w);
    ADD_FAILURE() << "a bad width was launched";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "width") << e.what();
  }
  EXPECT_EQ(runner_launches(), launches) << "a refused launch reached the executor";
}

}  // namespace
}  // namespace kdagraph::test
