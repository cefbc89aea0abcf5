// SPEC §9 on the CPU backend: the short convolution against an fp64 reference in every dtype, width and
// window, over many rounds; a hand-worked case; the window moves of commit and materialize; what the
// device clamps and records.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/conv.h"
#include "tests/common/conv_case.h"

namespace kdagraph::test {
namespace {

const ConvBackend kCpuConv{
    [](ConvCase& c) { conv_cpu(c.params(c.host_pointers())); },
    [](ConvCase& c, const std::vector<int32_t>& slot_of, const std::vector<int32_t>& accept_of,
       const std::vector<int32_t>& accept_len, bool from_scratch) {
      conv_window_cpu(c.window_params(c.host_pointers(), slot_of.data(), int32_t(slot_of.size()),
                                      from_scratch ? accept_of.data() : nullptr, accept_len.data(), from_scratch));
    }};

class ConvReferenceSweep : public ::testing::TestWithParam<ConvCaseShape> {};

// One run for each accept length a = 0 (a fresh slot) to T of row 0: the window starts where the layout
// keeps it for a (and, in the halves, either parity), so the W - 1 inputs before the round are the
// previous round's, whatever a is. Row 1 is padding; slots 1 and 2 are in no row and must keep every
// byte.
TEST_P(ConvReferenceSweep, MatchesFp64) {
  const ConvCaseShape sh = GetParam();
  for (int32_t a = 0; a <= sh.tokens; ++a) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(sh.str() + " a=" + std::to_string(a) + " seed=" + std::to_string(seed));
    ConvCase c(sh, seed, {3, -1, 0, 4}, {a, 0, sh.tokens, (a + 1) % (sh.tokens + 1)}, {a % 2, 0, 1, 0});
    const ConvExpectation want = expect_of(c);
    kCpuConv.conv(c);
    expect_conv_results(c, want, conv_tolerance(sh.io));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvReferenceSweep, ::testing::ValuesIn(conv_sweep_shapes()),
                         [](const auto& param_info) { return param_info.param.name(); });

class ConvRounds : public ::testing::TestWithParam<ConvCaseShape> {};

TEST_P(ConvRounds, FollowEachSlotsAcceptedInputs) {
  ConvCaseShape sh = GetParam();
  sh.rows = 5;
  sh.slots = 6;
  expect_rounds_follow_history(sh, fresh_seed(), 40, kCpuConv);
}

std::vector<ConvCaseShape> round_shapes() {
  std::vector<ConvCaseShape> out;
  for (const ConvCaseShape& s : conv_sweep_shapes())
    if (s.channels != 384 && s.tokens != 1) out.push_back(s);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvRounds, ::testing::ValuesIn(round_shapes()),
                         [](const auto& param_info) { return param_info.param.name(); });

// Worked by hand: W = 3, one channel, exact small integers, no activation. In place (short_conv) the
// window of a slot with a = 2 starts at column 1; the state then holds [x_0, x_1, x_2] at columns 0..2.
TEST(ConvCpu, HandWorkedInPlaceWindow) {
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
  conv_cpu(c.params(c.host_pointers()));
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
TEST(ConvCpu, HandWorkedHalves) {
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
  conv_cpu(c.params(c.host_pointers()));
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
TEST(ConvCpu, WindowMovesCommitAndMaterialize) {
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
      DeviceErrorWord errors;
      ConvWindowParams p = c.window_params(c.host_pointers(), slot_of.data(), int32_t(slot_of.size()),
                                           from_scratch ? accept_of.data() : nullptr, accept_len.data(), from_scratch);
      p.errors = &errors;
      conv_window_cpu(p);
      EXPECT_EQ(first_difference(c.state.bytes, want), -1);
      // Both clamp the 7; a materialize list's slot 9 is also recorded (a commit's slots were checked by
      // the index build). The first record is whichever core met its entry first.
      const auto code = DeviceErrorCode(errors.code);
      if (from_scratch) {
        EXPECT_EQ(code, DeviceErrorCode::accept_out_of_range);
        EXPECT_EQ(errors.value, 7);
      } else {
        EXPECT_TRUE((code == DeviceErrorCode::accept_out_of_range && errors.value == 7) ||
                    (code == DeviceErrorCode::slot_out_of_range && errors.value == 9))
            << to_string(code) << " " << errors.value;
      }
      EXPECT_EQ(errors.count, from_scratch ? 1u : 2u);
    }
  }
}

// What only the device sees: a row's slot outside [0, P) makes it padding, an accept length above S is
// clamped to S (the window at its last place, still inside the row); each recorded.
TEST(ConvCpu, BadRowsAreClampedOrPaddedAndRecorded) {
  ConvCaseShape sh;
  sh.channels = 9;
  sh.tokens = 2;
  sh.scratch_steps = 3;
  sh.slots = 4;
  sh.rows = 2;
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  ConvCase c(sh, seed, {7, 1}, {0, 3});
  ConvCase clamped(sh, seed, {-1, 1}, {0, 3});  // the same bytes, the bad row as padding
  ConvExpectation want = expect_of(clamped);
  c.set_batch({7, 1}, {0, 9});
  DeviceErrorWord errors;
  ConvParams p = c.params(c.host_pointers());
  p.errors = &errors;
  conv_cpu(p);
  expect_conv_results(c, want, conv_tolerance(sh.io));
  const auto code = DeviceErrorCode(errors.code);  // the first of the two, whichever core met it first
  EXPECT_TRUE(code == DeviceErrorCode::slot_out_of_range || code == DeviceErrorCode::accept_out_of_range);
  EXPECT_EQ(errors.count, 2u) << "the bad slot and the clamped length, once each";
}

}  // namespace
}  // namespace kdagraph::test
