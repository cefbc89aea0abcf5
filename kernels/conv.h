// docs/conv.md: the short convolution of a KDA layer, a causal depthwise convolution of width W over the C
// channels of its q, k and v projections, and the moves of its window (two-phase commit, materialize).
//
//   y_t[c] = act(sum_{j<W} w[c][j] * x_{t-W+1+j}[c] (+ bias[c])),  fp32, in this order [TAG_CONV_ORDER]
//
// Inputs before the round's first token come from the slot's conv state. One unit of work is one
// channel of one row for all T tokens (conv_channel): it reads its window, then writes the channel's
// history, and no other unit touches that channel of that row. The CPU and the CUDA kernel run the same
// functions below.
//
// [TAG_CONV_LAYOUT] Conv state row `slot`, conv scratch row `slot * S + t`: time-major, column j (one
// input vector x of C channels) at element j * C, io dtype. Three layouts (ConvLayout):
//   fixed_window (two-phase): W - 1 columns, the window at column 0; each token's window goes to the
//            conv scratch and the commit copies the accepted one back.
//   in_place (short_conv, docs/python.md): W - 2 + S columns, the window at o = max(a - 1, 0); a call writes
//            columns [0, W - 2) <- [o + 1, o + W - 1) and [W - 2, W - 2 + T) <- x_1..x_T over it.
//   halves   (fused-accept, replay): two halves of W - 1 + S columns, half h = [W - 1 base | S new]
//            at column h * (W - 1 + S). The slot's parity p (SlotStorage::round_parity, shared with the
//            token cache) names the half its last accepted round wrote; its history is half p's base,
//            then new[0, a) with a = accept_len (a = 0: the base alone), so the window is half p's
//            columns [a, a + W - 1). A round reads it and writes half 1 - p: base <- the window,
//            new[t] <- x_t; the accept step commits the round by setting the parity to 1 - p. A prefill
//            writes half 0's base with parity 0 and a = 0; materialize moves the window there (the
//            column-0 form anyone reading the state directly expects).
// Why halves: every unit of a launch reads half p and only a channel's owner writes half 1 - p, so no
// unit writes a column another unit of the same launch reads (the fused conv + verify reads q and k
// channels in every V tile and value head of a group); a verify never accepted leaves the state valid;
// and a token tree can read its history as base ++ new[path] with the accepted path kept per slot, no
// scatter. Per round and channel it reads W - 1 columns and writes W - 1 + T, W - 1 more than a ring
// of columns would (about 37 KB per layer and request at Kimi-Linear TP2, bf16, C = 6144: under 1% of
// the 5 MiB state traffic), and a ring cannot carry a tree's path without a scatter.
// include/kdagraph/ops.hpp (SlotStorage), the Verifier's allocation and the README describe it.
#pragma once

#include <cstdint>
#include <string>

#include "kdagraph/buffers.hpp"
#include "kdagraph/error.hpp"
#include "kernels/device_error.h"
#include "kernels/kda_math.h"
#include "kernels/layout.h"
#include "kernels/tree.h"

namespace kdagraph {

inline constexpr int32_t kMinConvWidth = 2;
inline constexpr int32_t kMaxConvWidth = 4;

// How a conv state row holds a slot's history [TAG_CONV_LAYOUT].
enum class ConvLayout : int32_t { fixed_window = 0, in_place = 1, halves = 2 };

// The layout of a round's conv state in a mode: halves in the offset-window modes.
KDA_HD ConvLayout conv_layout(const ModePolicy& policy) {
  return policy.conv_offset_window ? ConvLayout::halves : ConvLayout::fixed_window;
}

// Columns of one half (halves): the base window and room for T <= S new inputs.
KDA_HD int32_t conv_half_columns(int32_t width, int32_t scratch_steps) { return width - 1 + scratch_steps; }

// Columns a conv state row needs.
KDA_HD int32_t conv_state_columns(ConvLayout layout, int32_t width, int32_t scratch_steps) {
  switch (layout) {
    case ConvLayout::in_place: return width - 2 + scratch_steps;
    case ConvLayout::halves: return 2 * conv_half_columns(width, scratch_steps);
    case ConvLayout::fixed_window:
    default: return width - 1;
  }
}

// Column where the window of a slot with accept length `a` starts: in place, max(a - 1, 0); in the
// halves, column a of half `parity`.
KDA_HD int32_t conv_window_column(ConvLayout layout, int32_t accept, int32_t parity, int32_t width,
                                  int32_t scratch_steps) {
  switch (layout) {
    case ConvLayout::in_place: return accept > 0 ? accept - 1 : 0;
    case ConvLayout::halves: return (parity & 1) * conv_half_columns(width, scratch_steps) + accept;
    case ConvLayout::fixed_window:
    default: return 0;
  }
}

KDA_HD float conv_activation(ConvActivation act, float z) {
  switch (act) {
    case ConvActivation::silu: return z * math::sigmoid(z);
    case ConvActivation::none:
    default: return z;
  }
}

struct ConvParams {
  int32_t rows = 0;      // N
  int32_t tokens = 0;    // T
  int32_t channels = 0;  // C
  int32_t width = 0;     // W
  ConvActivation activation = ConvActivation::silu;
  DType io_dtype = DType::f32;  // of x, y, the conv state and the conv scratch

  const void* x = nullptr;        // [N, T, C]
  const float* weight = nullptr;  // [C, W]
  const float* bias = nullptr;    // [C] or null
  ConvOutputSegment out[kMaxConvSegments];  // tile [0, C) in order, each [N, T, channels]

  // Layer `layer` of the views. Row n is slot row_slot[n] (negative: padded; >= slots: recorded, padded).
  StateView state;
  StateView scratch;             // fixed_window: conv scratch rows write_row[n][t]
  int32_t layer = 0;
  int32_t slots = 0;             // rows of the state a batch may name
  int32_t scratch_steps = 0;     // S: the rows' columns (conv_state_columns)
  ConvLayout layout = ConvLayout::halves;
  // Bytes every state row starts at: 16 for a round's views (docs/ops.md); one element for short_conv, which
  // takes any C (docs/python.md). A unit reads and writes single elements, so either layout runs the same code.
  int32_t state_row_align = 16;
  const int32_t* row_slot = nullptr;    // [N]
  const int32_t* row_accept = nullptr;  // [N] in_place, halves: the slot's accept length a
  const int32_t* row_parity = nullptr;  // [N] halves: the slot's parity p
  const int32_t* write_row = nullptr;   // [N, T] fixed_window
  // docs/trees.md token trees (fixed_window, halves): [N, T] the round's checked tree (RoundIndices::parent):
  // token t's window runs back along its ancestors into the slot's history. Halves then keep each
  // slot's accepted path, [slots, path_tokens] (SlotStorage::accept_path): the history is the base,
  // then new[path[0]], new[path[1]], ... Null: chains.
  const int32_t* parent = nullptr;
  const int32_t* slot_path = nullptr;
  int32_t path_tokens = 0;
  // in_place (short_conv, docs/python.md, docs/trees.md): [N, path_tokens] the path each row accepted last round, read
  // as slot_path is (row n's instead of its slot's); a row whose path is empty reads as a chain.
  const int32_t* row_path = nullptr;
  DeviceErrorWord* errors = nullptr;
};

// What row n of a conv does, decided once per row: where its conv state row starts (null: padded, or
// an invalid layer base), the column its window starts at, and (in_place, halves) the column the
// history it writes starts at: the window's last `keep` inputs, then x_1..x_T. Recorded errors are
// reported when `report`.
struct ConvRow {
  char* state = nullptr;
  char* scratch = nullptr;
  int32_t read = 0;
  int32_t write = 0;
  int32_t keep = 0;
  // With a tree's kept path (docs/trees.md): the history is the `kept` columns from `base` (halves: W - 1,
  // in_place: W - 2), then the new columns after them path[0], ..., path[nodes - 1]; `read` is not used.
  const int32_t* path = nullptr;
  int32_t nodes = 0, base = 0, kept = 0;
  KDA_HD bool padded() const { return state == nullptr; }
};

// Column of the j-th input (oldest first) of a row's window of `width` - 1 inputs: `read` + j, or with a
// kept path (docs/trees.md) input kept + nodes - (W - 1) + j of the history base ++ new[path].
KDA_HD int32_t conv_history_column(const ConvRow& r, int32_t width, int32_t j) {
  if (r.path == nullptr) return r.read + j;
  const int32_t i = r.kept + r.nodes - (width - 1) + j;
  return i < r.kept ? r.base + i : r.base + r.kept + r.path[i - r.kept];
}

// Row n as slot `slot` with accept length `accept` and parity `parity` (used in the layouts that keep
// them): conv_row reads them from the row's index arrays; a verify predicting its window before its grid
// dependency wait (docs/graphs.md) passes pre-round values.
KDA_HD ConvRow conv_row_at(const ConvParams& p, int32_t n, int32_t slot, int32_t accept, int32_t parity, bool report) {
  ConvRow r;
  if (slot < 0) return r;
  if (slot >= p.slots) {
    if (report) record_device_error(p.errors, DeviceErrorCode::slot_out_of_range, n, slot);
    return r;
  }
  const bool fixed = p.layout == ConvLayout::fixed_window;
  if (!fixed) {
    // The window must lie inside the row's columns.
    const int32_t a = checked_accept(accept, 0, p.scratch_steps, n, p.errors, report);
    const int32_t half = p.layout == ConvLayout::halves ? parity & 1 : 0;
    r.read = conv_window_column(p.layout, a, half, p.width, p.scratch_steps);
    r.write = p.layout == ConvLayout::halves ? conv_window_column(p.layout, 0, 1 - half, p.width, p.scratch_steps) : 0;
    r.keep = p.layout == ConvLayout::halves ? p.width - 1 : p.width - 2;
    if (p.slot_path != nullptr && p.layout == ConvLayout::halves) {
      r.path = p.slot_path + int64_t(slot) * p.path_tokens;
      r.nodes = a > 0 ? kept_path_nodes(r.path, p.path_tokens) : 0;
      r.base = conv_window_column(p.layout, 0, half, p.width, p.scratch_steps);
      r.kept = p.width - 1;
    } else if (p.row_path != nullptr && p.layout == ConvLayout::in_place) {
      r.path = p.row_path + int64_t(n) * p.path_tokens;
      r.nodes = kept_path_nodes(r.path, p.path_tokens);
      r.base = 0;
      r.kept = p.width - 2;
      if (r.nodes == 0) r.path = nullptr;  // nothing accepted down a tree: the chain's window at column 0
    }
  }
  char* state = layer_base(p.state, p.layer);
  char* scratch = fixed ? layer_base(p.scratch, p.layer) : nullptr;
  if (state == nullptr || (fixed && scratch == nullptr)) {
    if (report) record_device_error(p.errors, DeviceErrorCode::layer_base_invalid, n, p.layer);
    return ConvRow{};
  }
  r.state = state_row(state, p.state, slot);
  r.scratch = scratch;
  return r;
}

// Row n's entries of the index arrays conv_row reads (those its layout keeps), as they are: loaded apart
// from their checks so that a verify can start these loads before it knows whether the row is padded.
struct ConvRowIndices {
  int32_t slot = -1, accept = 0, parity = 0;
};
KDA_HD ConvRowIndices conv_row_indices(const ConvParams& p, int32_t n) {
  const bool fixed = p.layout == ConvLayout::fixed_window;
  return ConvRowIndices{p.row_slot[n], fixed ? 0 : p.row_accept[n],
                        p.layout == ConvLayout::halves ? p.row_parity[n] : 0};
}

KDA_HD ConvRow conv_row_at(const ConvParams& p, int32_t n, const ConvRowIndices& i, bool report) {
  return conv_row_at(p, n, i.slot, i.accept, i.parity, report);
}

KDA_HD ConvRow conv_row(const ConvParams& p, int32_t n, bool report) {
  return conv_row_at(p, n, conv_row_indices(p, n), report);
}

// Where channel c of a row's outputs goes: the segment holding it, found once per unit (the
// segments' array is indexed with constants only, so the device reads it from the parameters).
template <class IoT>
struct ConvOutputAt {
  IoT* y;           // channel c of token 0 of row 0
  int64_t stride;   // elements from one token to the next: the segment's channels
  KDA_HD IoT* at(int64_t token) const { return y + token * stride; }
};

template <class IoT>
KDA_HD ConvOutputAt<IoT> conv_output(const ConvParams& p, int32_t c) {
  int32_t first = 0, channels = p.out[0].channels;
  void* y = p.out[0].y;
  for (int s = 1; s < kMaxConvSegments; ++s) {
    if (c >= first + channels) {
      first += channels;
      channels = p.out[s].channels;
      y = p.out[s].y;
    }
  }
  return ConvOutputAt<IoT>{static_cast<IoT*>(y) + (c - first), channels};
}

// [TAG_CONV_ORDER] One output: the W products summed oldest input first, then the bias, then the
// activation. `window` holds the W - 1 inputs before x.
template <int W>
KDA_HD float conv_output_value(const ConvParams& p, const float (&w)[W], const float (&window)[W - 1], float x,
                               float bias) {
  float acc = 0.0f;
  for (int j = 0; j < W - 1; ++j) acc = math::fmadd(w[j], window[j], acc);
  acc = math::fmadd(w[W - 1], x, acc);
  if (p.bias != nullptr) acc = acc + bias;
  return conv_activation(p.activation, acc);
}

// docs/trees.md: the T tokens of one channel of a token tree (`parent`, the row's tree; a parent outside
// [-1, t), possible in short_conv's caller memory, is read as t - 1 and recorded by channel 0): token t's
// window is the inputs of its nearest W - 1 ancestors, oldest first, preceded by the last inputs of
// the row's history `hist` (as stored) where it has fewer. Its outputs and what it writes are the
// chain's in every other way (a chain given as a tree is bitwise the chain): the history (halves: the
// window, then every token's input in token order) or each token's window after it (fixed_window's
// conv scratch, the window its children read, which the commit of an accepted node copies back).
// Every array is indexed with constants (registers on the device).
template <int W, class IoT>
KDA_HD void conv_tree_tokens(const ConvParams& p, const ConvRow& r, const int32_t* parent, const IoT* x,
                             const IoT (&hist)[W - 1], const float (&w)[W], float bias, IoT* state, int32_t n,
                             int32_t c, IoT* y, int64_t y_stride, bool writes_state, bool writes_history,
                             int64_t token0) {
  const int64_t C = p.channels;
  for (int32_t t = 0; t < p.tokens; ++t) {
    IoT ancestors[W - 1];  // nearest first
    int32_t used = 0, node = checked_parent(parent, t, n, p.errors, c == 0);
    for (int k = 0; k < W - 1; ++k) {
      const bool in_round = node >= 0;
      ancestors[k] = in_round ? x[node * C] : IoT{};
      used += in_round;
      node = in_round ? checked_parent(parent, node, n, p.errors, false) : -1;
    }
    IoT raw[W - 1];
    float window[W - 1];
    for (int m = 0; m < W - 1; ++m) {
      IoT from_history = IoT{};
      for (int q = 0; q < W - 1; ++q)
        if (q == m + used) from_history = hist[q];
      raw[m] = W - 2 - m < used ? ancestors[W - 2 - m] : from_history;
      window[m] = math::to_f32(raw[m]);
    }
    const IoT x_raw = x[t * C];
    y[t * y_stride] = math::from_f32<IoT>(conv_output_value<W>(p, w, window, math::to_f32(x_raw), bias));
    if (writes_history) state[(r.write + r.keep + t) * C] = x_raw;
    if (!writes_state || p.layout != ConvLayout::fixed_window) continue;
    const int32_t row = p.write_row[token0 + t];
    if (row < 0) continue;
    IoT* scratch = reinterpret_cast<IoT*>(state_row(r.scratch, p.scratch, row)) + c;
    for (int j = 0; j < W - 2; ++j) scratch[j * C] = raw[j + 1];
    scratch[(W - 2) * C] = x_raw;
  }
}

// Channel c of a real row n for all T tokens: y[t * y_stride] = y_t (io dtype) and, when
// `writes_state`, the channel's history (in_place, halves) or its conv scratch windows (fixed_window).
// The window is read whole before anything is written: in place, the row's new columns overlap the
// columns it was read from.
template <int W, class IoT>
KDA_HD void conv_channel_into(const ConvParams& p, const ConvRow& r, int32_t n, int32_t c, IoT* y, int64_t y_stride,
                              bool writes_state) {
  const int32_t T = p.tokens;
  const int64_t C = p.channels;
  const int64_t token0 = int64_t(n) * T;
  IoT* state = reinterpret_cast<IoT*>(r.state) + c;  // column j of this channel at state[j * C]
  // The window's inputs as stored: what the history and conv scratch copy, bit for bit.
  IoT raw[W - 1];
  float window[W - 1];
  for (int j = 0; j < W - 1; ++j) {
    raw[j] = state[int64_t(conv_history_column(r, W, j)) * C];
    window[j] = math::to_f32(raw[j]);
  }
  float w[W];
  for (int j = 0; j < W; ++j) w[j] = p.weight[c * int64_t(W) + j];
  const float bias = p.bias != nullptr ? p.bias[c] : 0.0f;
  const bool writes_history = writes_state && p.layout != ConvLayout::fixed_window;
  if (writes_history) {  // the window's last `keep` inputs start the history (constant indices: registers)
    const int32_t dropped = W - 1 - r.keep;
    for (int j = 0; j < W - 1; ++j)
      if (j >= dropped) state[(r.write + j - dropped) * C] = raw[j];
  }

  const IoT* x = static_cast<const IoT*>(p.x) + token0 * C + c;
  if (p.parent != nullptr) {
    conv_tree_tokens<W, IoT>(p, r, p.parent + token0, x, raw, w, bias, state, n, c, y, y_stride, writes_state,
                             writes_history, token0);
    return;
  }
  for (int32_t t = 0; t < T; ++t) {
    const IoT x_raw = x[t * C];
    const float xt = math::to_f32(x_raw);
    y[t * y_stride] = math::from_f32<IoT>(conv_output_value<W>(p, w, window, xt, bias));
    for (int j = 0; j < W - 2; ++j) {
      window[j] = window[j + 1];
      raw[j] = raw[j + 1];
    }
    window[W - 2] = xt;
    raw[W - 2] = x_raw;
    if (writes_history) state[(r.write + r.keep + t) * C] = x_raw;
    if (!writes_state || p.layout != ConvLayout::fixed_window) continue;
    const int32_t row = p.write_row[token0 + t];
    if (row < 0) continue;
    IoT* scratch = reinterpret_cast<IoT*>(state_row(r.scratch, p.scratch, row)) + c;
    for (int j = 0; j < W - 1; ++j) scratch[j * C] = raw[j];
  }
}

// conv_channel_into at the run-time width p.width (2 to 4, checked by the callers).
template <class IoT>
KDA_HD void conv_channel_into_width(const ConvParams& p, const ConvRow& r, int32_t n, int32_t c, IoT* y,
                                    int64_t y_stride, bool writes_state) {
  switch (p.width) {
    case 2: return conv_channel_into<2, IoT>(p, r, n, c, y, y_stride, writes_state);
    case 3: return conv_channel_into<3, IoT>(p, r, n, c, y, y_stride, writes_state);
    default: return conv_channel_into<4, IoT>(p, r, n, c, y, y_stride, writes_state);
  }
}

// One unit of work of the conv operation: channel c of row n for all T tokens, into its output segment
// (zeros for a padded row).
template <int W, class IoT>
KDA_HD void conv_channel(const ConvParams& p, const ConvRow& r, int32_t n, int32_t c) {
  const ConvOutputAt<IoT> out = conv_output<IoT>(p, c);
  const int64_t token0 = int64_t(n) * p.tokens;
  if (r.padded()) {
    for (int32_t t = 0; t < p.tokens; ++t) *out.at(token0 + t) = math::from_f32<IoT>(0.0f);
    return;
  }
  conv_channel_into<W, IoT>(p, r, n, c, out.at(token0), out.stride, true);
}

// The window moves of docs/conv.md, for every (entry, layer, channel): the W - 1 columns starting at
//   commit (two-phase, from_scratch):  conv scratch row slot * S + a - 1, a = accept_of[e];
//   materialize (halves):              the slot's window, column a of half p (a = accept_len[slot],
//                                      p = round_parity[slot]),
// go to columns [0, W - 1) of conv state row `slot` (half 0's base). Nothing moves when the window is
// there already (a commit with a = 0, a materialize with a = 0 and p = 0). materialize resets
// accept_len and the parity afterwards, as a separate step (ops::materialize).
struct ConvWindowParams {
  int32_t count = 0;                  // entries: batch rows (commit) or listed slots (materialize)
  const int32_t* slot_of = nullptr;   // [count] slot of each entry; entries outside [0, slots) are skipped
  const int32_t* accept_of = nullptr; // [count] accept length per entry (commit); nullptr: accept_len[slot]
  const int32_t* accept_len = nullptr;  // [P]
  const int32_t* round_parity = nullptr;  // [P] materialize: the half holding each slot's history
  int32_t slots = 0;                  // P
  int32_t scratch_steps = 0;          // S
  int32_t max_accept = 0;             // accept lengths are clamped to [0, max_accept]: S, or T in replay
  int32_t channels = 0;               // C
  int32_t width = 0;                  // W
  int32_t layers = 0;                 // L
  DType io_dtype = DType::f32;
  bool from_scratch = true;
  StateView state;
  StateView scratch;                  // from_scratch only
  // docs/trees.md, materialize with token trees: each slot's kept path [slots, path_tokens]; the window is
  // then the last W - 1 inputs of half p's base ++ new[path] (conv_history_column). Null: chains.
  const int32_t* slot_path = nullptr;
  int32_t path_tokens = 0;
  DeviceErrorWord* errors = nullptr;
};

// Where entry e's window comes from and goes to in layer `layer`; {nullptr, nullptr} when nothing moves.
// A clamped accept length is recorded when `report_accept`, an invalid layer base when `report_layer`.
struct ConvWindowMove {
  const char* src;
  char* dst;
  // With a kept path (src is then the row's start): where each column comes from (ConvRow's fields).
  const int32_t* path;
  int32_t nodes, base, kept;
};

KDA_HD ConvWindowMove conv_window_move(const ConvWindowParams& p, int32_t e, int32_t layer, bool report_accept,
                                       bool report_layer) {
  const ConvWindowMove none{nullptr, nullptr, nullptr, 0, 0, 0};
  // A commit's entries are the round's checked row slots; a materialize list is checked here.
  const int32_t slot = p.accept_of != nullptr ? (p.slot_of[e] < p.slots ? p.slot_of[e] : -1)
                                              : checked_slot(p.slot_of, e, p.slots, p.errors, report_accept);
  if (slot < 0) return none;
  const int32_t a = checked_accept(p.accept_of != nullptr ? p.accept_of[e] : p.accept_len[slot], 0, p.max_accept, e,
                                   p.errors, report_accept);
  const int32_t column =
      p.from_scratch ? 0 : conv_window_column(ConvLayout::halves, a, p.round_parity[slot], p.width, p.scratch_steps);
  if (p.from_scratch ? a == 0 : column == 0) return none;
  ConvRow from;
  if (!p.from_scratch && p.slot_path != nullptr && a > 0) {
    from.path = p.slot_path + int64_t(slot) * p.path_tokens;
    from.nodes = kept_path_nodes(from.path, p.path_tokens);
    from.base = conv_window_column(ConvLayout::halves, 0, p.round_parity[slot], p.width, p.scratch_steps);
    from.kept = p.width - 1;
  }
  char* state = layer_base(p.state, layer);
  char* scratch = p.from_scratch ? layer_base(p.scratch, layer) : nullptr;
  if (state == nullptr || (p.from_scratch && scratch == nullptr)) {
    if (report_layer) record_device_error(p.errors, DeviceErrorCode::layer_base_invalid, e, layer);
    return none;
  }
  char* dst = state_row(state, p.state, slot);
  if (p.from_scratch)
    return ConvWindowMove{state_row(scratch, p.scratch, scratch_row(slot, a - 1, p.scratch_steps)), dst, nullptr, 0, 0, 0};
  if (from.path != nullptr) return ConvWindowMove{dst, dst, from.path, from.nodes, from.base, from.kept};
  return ConvWindowMove{dst + int64_t(column) * p.channels * elem_bytes(p.io_dtype), dst, nullptr, 0, 0, 0};
}

// Channel c of a move, elements of type E (the io dtype's bits), oldest column first. A materialize
// within half 0 has its source and destination overlap with the destination first (a columns lower),
// so copying upwards reads every column before it is overwritten. So does a kept path's: its column j
// is nodes + j >= j + 1, or a new column past the base.
template <class E>
KDA_HD void conv_window_channel(const ConvWindowParams& p, const ConvWindowMove& m, int32_t c) {
  const E* src = reinterpret_cast<const E*>(m.src) + c;
  E* dst = reinterpret_cast<E*>(m.dst) + c;
  const int64_t C = p.channels;
  if (m.path != nullptr) {
    ConvRow from;
    from.path = m.path;
    from.nodes = m.nodes;
    from.base = m.base;
    from.kept = m.kept;
    for (int32_t j = 0; j < p.width - 1; ++j) dst[j * C] = src[int64_t(conv_history_column(from, p.width, j)) * C];
    return;
  }
  for (int32_t j = 0; j < p.width - 1; ++j) dst[j * C] = src[j * C];
}

// Host backend: both cores over the (row, channel) units. Runs now.
void conv_cpu(const ConvParams& p);
void conv_window_cpu(const ConvWindowParams& p);

}  // namespace kdagraph

#if defined(KDAGRAPH_WITH_CUDA) || defined(KDAGRAPH_SIMT)  // SIMT: simt/ runs the launchers on the CPU
#include <cuda_runtime_api.h>

#include "kernels/launch.h"

namespace kdagraph {
// Enqueue as `on` says; allocate nothing, never synchronize. Throw InvalidArgument, naming the check and
// the value, for parameters the kernels are not built for.
cudaError_t launch_conv(const ConvParams& p, Launch on);
cudaError_t launch_conv_window(const ConvWindowParams& p, Launch on);
}  // namespace kdagraph
#endif

namespace kdagraph {
struct ConvOp {
  using Params = ConvParams;
  static constexpr const char* kName = "conv";
  static void cpu(const Params& p) { conv_cpu(p); }
#if defined(KDAGRAPH_WITH_CUDA) || defined(KDAGRAPH_SIMT)
  static cudaError_t cuda(const Params& p, Launch on) { return launch_conv(p, on); }
#endif
  static std::string shape(const Params& p) {
    return "layer=" + std::to_string(p.layer) + " rows=" + std::to_string(p.rows) + " T=" + std::to_string(p.tokens) +
           " C=" + std::to_string(p.channels) + " W=" + std::to_string(p.width);
  }
};
struct ConvWindowOp {
  using Params = ConvWindowParams;
  static constexpr const char* kName = "conv_window";
  static void cpu(const Params& p) { conv_window_cpu(p); }
#if defined(KDAGRAPH_WITH_CUDA) || defined(KDAGRAPH_SIMT)
  static cudaError_t cuda(const Params& p, Launch on) { return launch_conv_window(p, on); }
#endif
  static std::string shape(const Params& p) {
    return std::string(p.from_scratch ? "commit" : "materialize") + " count=" + std::to_string(p.count) +
           " layers=" + std::to_string(p.layers) + " C=" + std::to_string(p.channels);
  }
};
}  // namespace kdagraph
