// A short-convolution test case of one layer in host memory (docs/conv.md): random inputs, weights and conv
// state, the rows' slots and accept lengths, and what the fp64 reference (tests/common/conv_reference.h)
// says the outputs, the conv state and the conv scratch must be. The CPU tests run it directly; the GPU
// tests copy the same bytes to the device. The layout arithmetic here is written out again from the
// docs (docs/conv.md) and the layouts' description [TAG_CONV_LAYOUT] rather than taken from kernels/conv.h.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "kdagraph/ops.hpp"
#include "kernels/conv.h"
#include "tests/common/conv_reference.h"
#include "tests/common/placement.h"
#include "tests/common/reference.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {

struct ConvCaseShape {
  int32_t rows = 4, tokens = 4, channels = 200, width = 4, slots = 5, scratch_steps = 5;
  DType io = DType::f32;
  ConvLayout layout = ConvLayout::halves;  // fused-accept and replay; in_place: short_conv; fixed_window: two-phase
  bool bias = true;
  ConvActivation activation = ConvActivation::silu;
  int32_t segments = 1;  // 1: y [N, T, C]; 3: three segments of the channels
  const char* layout_name() const {
    switch (layout) {
      case ConvLayout::fixed_window: return "twophase";
      case ConvLayout::in_place: return "inplace";
      case ConvLayout::halves: return "halves";
    }
    return "?";
  }
  bool writes_in_state() const { return layout != ConvLayout::fixed_window; }
  // A test name: the swept dimensions.
  std::string name() const {
    return std::string(to_string(io)) + "_W" + std::to_string(width) + "_" + layout_name() + "_C" +
           std::to_string(channels) + "_T" + std::to_string(tokens);
  }
  std::string str() const {
    return "N=" + std::to_string(rows) + " T=" + std::to_string(tokens) + " C=" + std::to_string(channels) +
           " W=" + std::to_string(width) + " S=" + std::to_string(scratch_steps) + " io=" + to_string(io) +
           " " + layout_name() + (bias ? " bias" : "") +
           (activation == ConvActivation::silu ? " silu" : " linear") + " segments=" + std::to_string(segments);
  }
};

// GoogleTest prints a parameter with this rather than as bytes.
inline void PrintTo(const ConvCaseShape& s, std::ostream* os) { *os << s.str(); }

// Writes value `v` (exact in dtype t) as element i of a byte buffer.
inline void put_elem(std::vector<uint8_t>& bytes, DType t, size_t i, float v) {
  if (t == DType::f32) {
    std::memcpy(bytes.data() + 4 * i, &v, 4);
  } else {
    const math::bf16 b = math::f32_to_bf16(v);
    std::memcpy(bytes.data() + 2 * i, &b, 2);
  }
}

// Where a backend's buffers are: the case's own host memory, or device copies of it.
struct ConvPointers {
  const void* x;
  void* y[kMaxConvSegments];
  void* state;
  void* scratch;
  const float* weight;
  const float* bias;
  const int32_t* row_slot;
  const int32_t* row_accept;
  const int32_t* row_parity;
  const int32_t* write_row;
  const int32_t* round_parity;  // [P] the slots' parities, for a materialize
};

struct ConvCase {
  ConvCaseShape sh;
  int32_t columns = 0;                     // of a state row
  int64_t state_stride = 0, scratch_stride = 0;  // elements per row: 16-byte multiples plus a gap
  Tensor x, state, scratch;
  std::vector<Tensor> y;                   // one per segment, [N, T, channels]
  std::vector<int32_t> segment_channels;
  std::vector<float> weight, bias;
  std::vector<int32_t> row_slot, row_accept, row_parity, write_row;
  std::vector<int32_t> slot_parity;        // [P] halves: each slot's parity, for a materialize
  RefConv ref;
  std::mt19937_64 rng;

  // `slots` [N] the rows' slots (-1: padded); `accepts` [N] their accept lengths; `parities` [N] (halves)
  // their parities, 0 where not given.
  ConvCase(const ConvCaseShape& s, uint64_t seed, const std::vector<int32_t>& slots, const std::vector<int32_t>& accepts,
           const std::vector<int32_t>& parities = {})
      : sh(s), rng(seed) {
    const int32_t C = s.channels, W = s.width;
    columns = s.layout == ConvLayout::fixed_window ? W - 1
              : s.layout == ConvLayout::in_place   ? W - 2 + s.scratch_steps
                                                   : 2 * half_columns();
    const int64_t per16 = 16 / int64_t(dtype_size(s.io));
    auto stride = [&](int64_t elems) { return (elems + per16 - 1) / per16 * per16 + 2 * per16; };
    state_stride = stride(int64_t(columns) * C);
    scratch_stride = stride(int64_t(W - 1) * C);
    if (s.segments == 1) segment_channels = {C};
    else segment_channels = {C / 3, C / 3, C - 2 * (C / 3)};
    weight = uniform(size_t(C) * W, -0.8f, 0.8f);
    if (s.bias) bias = uniform(size_t(C), -0.3f, 0.3f);
    state.assign(s.io, uniform(size_t(s.slots) * size_t(state_stride), -2.0f, 2.0f));
    scratch.assign(s.io, std::vector<float>(size_t(s.slots) * s.scratch_steps * size_t(scratch_stride), 0.0f));
    scratch.poison();
    ref.channels = C;
    ref.width = W;
    ref.weight.assign(weight.begin(), weight.end());
    ref.bias.assign(bias.begin(), bias.end());
    ref.silu = s.activation == ConvActivation::silu;
    slot_parity.assign(size_t(s.slots), 0);
    set_batch(slots, accepts, parities);
    new_inputs();
  }

  // Columns of one half (halves): W - 1 base, then S new.
  int32_t half_columns() const { return sh.width - 1 + sh.scratch_steps; }

  // The rows of the next run: slots, accept lengths, parities, and the two-phase write rows slot * S + t.
  // Rows past the lists' ends are padding.
  void set_batch(const std::vector<int32_t>& slots, const std::vector<int32_t>& accepts,
                 const std::vector<int32_t>& parities = {}) {
    row_slot = slots;
    row_accept = accepts;
    row_parity = parities;
    row_slot.resize(size_t(sh.rows), -1);
    row_accept.resize(size_t(sh.rows), 0);
    row_parity.resize(size_t(sh.rows), 0);
    write_row.assign(size_t(sh.rows) * sh.tokens, -1);
    for (int32_t n = 0; n < sh.rows; ++n)
      for (int32_t t = 0; t < sh.tokens && row_slot[size_t(n)] >= 0; ++t)
        write_row[size_t(n) * sh.tokens + t] = row_slot[size_t(n)] * sh.scratch_steps + t;
  }

  std::vector<float> uniform(size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> out(n);
    for (auto& v : out) v = d(rng);
    return out;
  }

  // Fresh inputs and poisoned outputs (NaN in both dtypes) for the next run.
  void new_inputs() {
    x.assign(sh.io, uniform(size_t(sh.rows) * sh.tokens * sh.channels, -2.0f, 2.0f));
    y.assign(segment_channels.size(), Tensor{});
    for (size_t s = 0; s < y.size(); ++s) {
      y[s].assign(sh.io, std::vector<float>(size_t(sh.rows) * sh.tokens * size_t(segment_channels[s]), 0.0f));
      y[s].poison();
    }
  }

  size_t state_at(int32_t slot, int32_t column, int32_t c) const {
    return size_t(slot) * size_t(state_stride) + size_t(column) * sh.channels + size_t(c);
  }
  size_t scratch_at(int32_t row, int32_t column, int32_t c) const {
    return size_t(row) * size_t(scratch_stride) + size_t(column) * sh.channels + size_t(c);
  }
  float y_at(int32_t n, int32_t t, int32_t c) const {
    size_t s = 0;
    while (c >= segment_channels[s]) c -= segment_channels[s++];
    return y[s].at((size_t(n) * sh.tokens + t) * size_t(segment_channels[s]) + size_t(c));
  }
  // Column where the window of a slot with accept length a and parity p starts: max(a - 1, 0) in place,
  // column a of half p in the halves, 0 in two-phase.
  int32_t window_column(int32_t a, int32_t p) const {
    switch (sh.layout) {
      case ConvLayout::in_place: return a > 0 ? a - 1 : 0;
      case ConvLayout::halves: return p * half_columns() + a;
      case ConvLayout::fixed_window: return 0;
    }
    return 0;
  }
  // The W - 1 inputs of `slot` from `column` on.
  std::vector<std::vector<double>> window_at(int32_t slot, int32_t column) const {
    std::vector<std::vector<double>> w(size_t(sh.width - 1), std::vector<double>(size_t(sh.channels)));
    for (int32_t j = 0; j < sh.width - 1; ++j)
      for (int32_t c = 0; c < sh.channels; ++c) w[size_t(j)][size_t(c)] = state.at(state_at(slot, column + j, c));
    return w;
  }
  // The window row n reads.
  std::vector<std::vector<double>> window(int32_t n) const {
    return window_at(row_slot[size_t(n)], window_column(row_accept[size_t(n)], row_parity[size_t(n)]));
  }
  std::vector<std::vector<double>> inputs(int32_t n) const {
    std::vector<std::vector<double>> out(size_t(sh.tokens), std::vector<double>(size_t(sh.channels)));
    for (int32_t t = 0; t < sh.tokens; ++t)
      for (int32_t c = 0; c < sh.channels; ++c)
        out[size_t(t)][size_t(c)] = x.at((size_t(n) * sh.tokens + t) * sh.channels + size_t(c));
    return out;
  }

  ConvParams params(const ConvPointers& ptr) const {
    ConvParams p;
    p.rows = sh.rows;
    p.tokens = sh.tokens;
    p.channels = sh.channels;
    p.width = sh.width;
    p.activation = sh.activation;
    p.io_dtype = sh.io;
    p.x = ptr.x;
    p.weight = ptr.weight;
    p.bias = sh.bias ? ptr.bias : nullptr;
    for (size_t s = 0; s < segment_channels.size(); ++s) p.out[s] = ConvOutputSegment{segment_channels[s], ptr.y[s]};
    p.state = state_view(ptr.state, sh.io, 1, 0, sh.slots, state_stride);
    p.slots = sh.slots;
    p.scratch_steps = sh.scratch_steps;
    p.layout = sh.layout;
    p.row_slot = ptr.row_slot;
    if (sh.writes_in_state()) {
      p.row_accept = ptr.row_accept;
      p.row_parity = ptr.row_parity;
    } else {
      p.scratch = state_view(ptr.scratch, sh.io, 1, 0, int64_t(sh.slots) * sh.scratch_steps, scratch_stride);
      p.write_row = ptr.write_row;
    }
    return p;
  }
  // The window moves of `count` entries (one layer): commit from the conv scratch with `accept_of`, or
  // materialize within the state (halves) with the slots' `accept_len` and parities.
  ConvWindowParams window_params(const ConvPointers& ptr, const int32_t* slot_of, int32_t count,
                                 const int32_t* accept_of, const int32_t* accept_len, bool from_scratch) const {
    ConvWindowParams p;
    p.count = count;
    p.slot_of = slot_of;
    p.accept_of = accept_of;
    p.accept_len = accept_len;
    p.round_parity = ptr.round_parity;
    p.slots = sh.slots;
    p.scratch_steps = sh.scratch_steps;
    p.max_accept = sh.scratch_steps;
    p.channels = sh.channels;
    p.width = sh.width;
    p.layers = 1;
    p.io_dtype = sh.io;
    p.from_scratch = from_scratch;
    p.state = state_view(ptr.state, sh.io, 1, 0, sh.slots, state_stride);
    if (from_scratch)
      p.scratch = state_view(ptr.scratch, sh.io, 1, 0, int64_t(sh.slots) * sh.scratch_steps, scratch_stride);
    return p;
  }
  // The case's buffers as placed in `at` (host memory, or device copies that at.fetch() brings back).
  ConvPointers pointers(Placement& at) {
    ConvPointers p{};
    p.x = at.in(x.bytes);
    p.state = at.out(state.bytes);
    p.scratch = at.out(scratch.bytes);
    p.weight = at.in(weight);
    p.bias = at.in(bias);
    p.row_slot = at.in(row_slot);
    p.row_accept = at.in(row_accept);
    p.row_parity = at.in(row_parity);
    p.write_row = at.in(write_row);
    p.round_parity = at.in(slot_parity);
    for (size_t s = 0; s < y.size(); ++s) p.y[s] = at.out(y[s].bytes);
    return p;
  }
  ConvPointers host_pointers() {
    Placement host(Backend::cpu);
    return pointers(host);
  }
};

// docs/python.md's short_conv over a case's buffers as placed (`ptr`): x and y [B, T, C] (one segment), the
// conv state `state` (the case's, or a copy in other rows), the rows' slots and accept lengths.
inline ShortConvCall short_conv_call(const ConvCase& c, const ConvPointers& ptr, const StateView& state) {
  ShortConvCall call;
  call.conv = ConvShape{c.sh.channels, c.sh.width, c.sh.activation};
  call.io_dtype = c.sh.io;
  call.batch = c.sh.rows;
  call.tokens = c.sh.tokens;
  call.scratch_steps = c.sh.scratch_steps;
  call.x = ptr.x;
  call.weight = ptr.weight;
  call.bias = c.sh.bias ? ptr.bias : nullptr;
  call.y = ptr.y[0];
  call.conv_state = state;
  call.state_indices = ptr.row_slot;
  call.num_accepted = ptr.row_accept;
  return call;
}

// What a conv run must leave: the fp64 outputs of every real row, and the exact bytes of the conv
// state and the conv scratch (both hold copies of io-dtype inputs).
struct ConvExpectation {
  std::vector<std::vector<std::vector<double>>> y;  // [n][t][c], empty for padded rows
  std::vector<uint8_t> state, scratch;
};

inline ConvExpectation expect_of(const ConvCase& c) {
  ConvExpectation e;
  e.state = c.state.bytes;
  e.scratch = c.scratch.bytes;
  const int32_t W = c.sh.width, T = c.sh.tokens;
  for (int32_t n = 0; n < c.sh.rows; ++n) {
    const int32_t slot = c.row_slot[size_t(n)];
    if (slot < 0) {
      e.y.emplace_back();
      continue;
    }
    const auto before = c.window(n), x = c.inputs(n);
    e.y.push_back(ref_conv(c.ref, before, x));
    std::vector<std::vector<double>> seq = before;
    seq.insert(seq.end(), x.begin(), x.end());
    for (int32_t ch = 0; ch < c.sh.channels; ++ch) {
      if (c.sh.layout == ConvLayout::in_place) {  // columns [0, W - 2 + T) <- the window's last W - 2 inputs, then x
        for (int32_t j = 0; j < W - 2 + T; ++j)
          put_elem(e.state, c.sh.io, c.state_at(slot, j, ch), float(seq[size_t(j + 1)][size_t(ch)]));
      } else if (c.sh.layout == ConvLayout::halves) {  // half 1 - p <- the window, then x
        const int32_t half = (1 - c.row_parity[size_t(n)]) * c.half_columns();
        for (int32_t j = 0; j < W - 1 + T; ++j)
          put_elem(e.state, c.sh.io, c.state_at(slot, half + j, ch), float(seq[size_t(j)][size_t(ch)]));
      } else {  // scratch row slot * S + t <- the window after token t
        for (int32_t t = 0; t < T; ++t)
          for (int32_t j = 0; j < W - 1; ++j)
            put_elem(e.scratch, c.sh.io, c.scratch_at(slot * c.sh.scratch_steps + t, j, ch),
                     float(seq[size_t(t + 1 + j)][size_t(ch)]));
      }
    }
  }
  return e;
}

// Checks a run's results left in `c` against `e`: every real output within `tol` of fp64 (none left
// poisoned), padded rows all zero bytes, the state and scratch bytes exactly as expected.
inline void expect_conv_results(const ConvCase& c, const ConvExpectation& e, double tol) {
  std::vector<double> got, want;
  for (int32_t n = 0; n < c.sh.rows; ++n)
    for (int32_t t = 0; t < c.sh.tokens; ++t)
      for (int32_t ch = 0; ch < c.sh.channels; ++ch) {
        const float v = c.y_at(n, t, ch);
        if (e.y[size_t(n)].empty()) {
          ASSERT_EQ(v, 0.0f) << "padded row " << n << " t=" << t << " c=" << ch;
          ASSERT_FALSE(std::signbit(v)) << "padded row " << n << ": -0, not zero bytes";
          continue;
        }
        ASSERT_FALSE(std::isnan(v)) << "output not written: n=" << n << " t=" << t << " c=" << ch;
        got.push_back(v);
        want.push_back(e.y[size_t(n)][size_t(t)][size_t(ch)]);
      }
  EXPECT_LE(rel_error(got, want), tol) << "outputs against fp64";
  const int64_t state_diff = first_difference(c.state.bytes, e.state);
  EXPECT_EQ(state_diff, -1) << "conv state byte " << state_diff << " (row " << state_diff / int64_t(dtype_size(c.sh.io)) / c.state_stride << ")";
  const int64_t scratch_diff = first_difference(c.scratch.bytes, e.scratch);
  EXPECT_EQ(scratch_diff, -1) << "conv scratch byte " << scratch_diff;
}

inline double conv_tolerance(DType io) { return io == DType::f32 ? 1e-5 : 1e-2; }

// A backend under test: `conv` runs the case's conv on its buffers, `window` a window move of the
// listed entries (commit: accept_of per entry; materialize: accept_len [P] and the case's slot_parity
// per slot), each leaving the results in the case's host buffers.
struct ConvBackend {
  std::function<void(ConvCase&)> conv;
  std::function<void(ConvCase&, const std::vector<int32_t>& slot_of, const std::vector<int32_t>& accept_of,
                     const std::vector<int32_t>& accept_len, bool from_scratch)>
      window;
};

// Expects the W - 1 inputs of `slot`'s state from `column` on (0: the column-0 form) to be `history`,
// bitwise.
inline void expect_window_is(const ConvCase& c, int32_t slot, const std::vector<std::vector<double>>& history,
                             int32_t column = 0) {
  for (int32_t j = 0; j < c.sh.width - 1; ++j)
    for (int32_t ch = 0; ch < c.sh.channels; ++ch)
      ASSERT_EQ(c.state.at(c.state_at(slot, column + j, ch)), float(history[size_t(j)][size_t(ch)]))
          << "slot " << slot << " column " << column + j << " channel " << ch;
}

// docs/conv.md over many rounds on one layer: each slot's conv is a function of its accepted input sequence
// (tests/common/conv_reference.h), whichever window the layout keeps. Random batches with padded rows,
// accept lengths 1 to T, so every round's windows straddle the last round's inputs and this one's;
// two-phase commits, the halves flip their parity and materialize some slots along the way. In the
// halves and in two-phase a row's round is sometimes never accepted (its slot's accept length and
// parity stay, no commit): the state must still give the slot's history. Slots outside a batch stay
// bitwise unchanged; at the end every window (materialized: at column 0) is the last W - 1 accepted
// inputs.
inline void expect_rounds_follow_history(const ConvCaseShape& sh, uint64_t seed, int rounds, const ConvBackend& b) {
  SCOPED_TRACE(sh.str() + " seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed ^ 0x5eedull);
  const int32_t P = sh.slots, T = sh.tokens, N = sh.rows;
  const bool halves = sh.layout == ConvLayout::halves;
  std::vector<int32_t> accept_len(size_t(P), 0), parity(size_t(P), 0);
  for (int32_t slot = 0; slot < P && sh.writes_in_state(); ++slot) {  // slots start mid-stream
    accept_len[size_t(slot)] = std::uniform_int_distribution<int32_t>(0, T)(rng);
    if (halves) parity[size_t(slot)] = int32_t(rng() % 2);
  }
  ConvCase c(sh, seed, std::vector<int32_t>(size_t(N), -1), std::vector<int32_t>(size_t(N), 0));
  std::vector<std::vector<std::vector<double>>> history;
  for (int32_t slot = 0; slot < P; ++slot)
    history.push_back(c.window_at(slot, c.window_column(accept_len[size_t(slot)], parity[size_t(slot)])));
  auto materialize = [&](std::vector<int32_t> slots) {
    c.slot_parity = parity;
    b.window(c, slots, {}, accept_len, false);
    if (::testing::Test::HasFatalFailure()) return;
    for (int32_t slot : slots) {
      accept_len[size_t(slot)] = 0;  // as ops::materialize resets them, after the move
      parity[size_t(slot)] = 0;
      expect_window_is(c, slot, history[size_t(slot)]);
    }
  };
  int unaccepted = 0;
  for (int r = 0; r < rounds; ++r) {
    SCOPED_TRACE("round " + std::to_string(r));
    std::vector<int32_t> order(static_cast<size_t>(P));
    for (int32_t s = 0; s < P; ++s) order[size_t(s)] = s;
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<int32_t> slots(size_t(N), -1), accepts(size_t(N), 0), parities(size_t(N), 0);
    const int32_t n = std::uniform_int_distribution<int32_t>(1, std::min(N - 1, P))(rng);
    std::copy(order.begin(), order.begin() + n, slots.begin());
    std::shuffle(slots.begin(), slots.end(), rng);  // padded rows anywhere
    for (int32_t i = 0; i < N; ++i) {
      if (slots[size_t(i)] < 0) continue;
      accepts[size_t(i)] = accept_len[size_t(slots[size_t(i)])];
      parities[size_t(i)] = parity[size_t(slots[size_t(i)])];
    }
    c.set_batch(slots, accepts, parities);
    c.new_inputs();
    ConvExpectation want = expect_of(c);
    for (int32_t i = 0; i < N; ++i)
      if (slots[size_t(i)] >= 0) want.y[size_t(i)] = ref_conv(c.ref, history[size_t(slots[size_t(i)])], c.inputs(i));
    b.conv(c);
    if (::testing::Test::HasFatalFailure()) return;
    expect_conv_results(c, want, conv_tolerance(sh.io));
    if (::testing::Test::HasFailure()) return;

    std::vector<int32_t> accepted(size_t(N), 0);
    for (int32_t i = 0; i < N; ++i) {
      const int32_t slot = slots[size_t(i)];
      if (slot < 0) continue;
      if (sh.layout != ConvLayout::in_place && std::bernoulli_distribution(0.2)(rng)) {
        ++unaccepted;  // this row's round is dropped: nothing of it may count
        continue;
      }
      const int32_t a = std::uniform_int_distribution<int32_t>(1, T)(rng);
      accepted[size_t(i)] = a;
      history[size_t(slot)] = ref_after_accept(history[size_t(slot)], c.inputs(i), a);
      if (sh.writes_in_state()) accept_len[size_t(slot)] = a;
      if (halves) parity[size_t(slot)] = 1 - parity[size_t(slot)];
    }
    if (sh.layout == ConvLayout::fixed_window) {
      b.window(c, slots, accepted, accept_len, true);  // the commit, padded and dropped rows skipped
      for (int32_t slot : slots)
        if (slot >= 0) expect_window_is(c, slot, history[size_t(slot)]);
    } else if (halves && r % 7 == 6) {
      materialize(std::vector<int32_t>(order.begin(), order.begin() + 2));  // a snapshot mid-stream
    }
    if (::testing::Test::HasFailure()) return;
  }
  std::vector<int32_t> all(static_cast<size_t>(P));
  for (int32_t s = 0; s < P; ++s) all[size_t(s)] = s;
  if (halves) materialize(all);
  for (int32_t slot = 0; slot < P; ++slot)
    expect_window_is(c, slot, history[size_t(slot)], c.window_column(accept_len[size_t(slot)], parity[size_t(slot)]));
  if (sh.layout != ConvLayout::in_place) {
    EXPECT_GT(unaccepted, 0) << "no round went unaccepted";
  }
}

// The conv shapes the reference sweeps run: every dtype, W = 2 to 4, every layout, channels below,
// across and not a multiple of the CUDA block (128), bias or not, one or three output segments.
inline std::vector<ConvCaseShape> conv_sweep_shapes() {
  std::vector<ConvCaseShape> out;
  for (DType io : {DType::f32, DType::bf16})
    for (int32_t W = 2; W <= 4; ++W)
      for (ConvLayout layout : {ConvLayout::halves, ConvLayout::in_place, ConvLayout::fixed_window})
        for (int32_t C : {7, 200, 384})
          for (int32_t T : {1, 3, 4}) {
            ConvCaseShape s;
            s.io = io;
            s.width = W;
            s.layout = layout;
            s.channels = C;
            s.tokens = T;
            s.scratch_steps = T + 1;
            s.bias = (C + T) % 2 == 0;
            s.activation = C == 7 && T == 3 ? ConvActivation::none : ConvActivation::silu;
            s.segments = C == 200 ? 3 : 1;
            out.push_back(s);
          }
  return out;
}

}  // namespace kdagraph::test
