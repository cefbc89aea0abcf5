// docs/ops.md: the operations of a round over caller-owned buffers. Each validates, then builds its
// kernel's parameters (graph/ops_params.h) and enqueues them through the backend seam (graph/dispatch.h).
#include "kdagraph/ops.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

#include "graph/dispatch.h"
#include "graph/nvtx.h"
#include "graph/ops_params.h"
#include "graph/validate.h"
#include "kernels/accept.h"
#include "kernels/conv.h"
#include "kernels/indices.h"
#include "kernels/state_copy.h"
#include "kernels/verify.h"

namespace kdagraph {

int64_t round_index_elems(int32_t rows, int32_t tokens) {
  require_in_range("round_index_elems", "rows", rows, 0, INT32_MAX);
  require_in_range("round_index_elems", "tokens", tokens, 1, 1024);
  return int64_t(rows) * (9 + 2 * int64_t(tokens));
}

RoundIndices round_indices(int32_t* storage, int32_t rows, int32_t tokens) {
  const int64_t n = rows;
  require(storage != nullptr || round_index_elems(rows, tokens) == 0, "round_indices", "storage", "is null");
  RoundIndices idx;
  idx.capacity = rows;
  idx.tokens = tokens;
  idx.row_slot = storage;
  idx.seed_pool = storage + n;
  idx.seed_scratch = storage + 2 * n;
  idx.seed_accept = storage + 3 * n;
  idx.row_accept = storage + 4 * n;
  idx.ring_pending = storage + 5 * n;
  idx.ring_start = storage + 6 * n;
  idx.ring_flush = storage + 7 * n;
  idx.row_parity = storage + 8 * n;
  idx.write_row = storage + 9 * n;
  idx.parent = storage + (9 + int64_t(tokens)) * n;
  return idx;
}

namespace {
RingLayout ring_layout(const RoundSpec& spec) {
  const ModelShape& m = spec.model;
  return RingLayout{spec.ring.records, m.heads, m.value_heads, m.head_k, m.head_v};
}
}  // namespace

int64_t ring_kg_row_elems(const RoundSpec& spec) { return ring_layout(spec).kg_row_elems(); }
int64_t ring_u_row_elems(const RoundSpec& spec) { return ring_layout(spec).u_row_elems(); }

int64_t conv_state_row_elems(const RoundSpec& spec, int32_t scratch_steps) {
  const ConvShape& c = spec.conv;
  if (c.width == 0) return 0;
  return int64_t(conv_state_columns(conv_layout(mode_policy(spec.mode)), c.width, scratch_steps)) * c.channels;
}

bool needs_accept_path(const RoundSpec& spec) {
  const ModePolicy policy = mode_policy(spec.mode);
  return spec.trees && spec.conv.width > 0 && policy.conv_offset_window;
}

bool needs_round_parity(const RoundSpec& spec) {
  const ModePolicy policy = mode_policy(spec.mode);
  return spec.conv.width > 0 && policy.conv_offset_window;
}

bool needs_rounding_state(const RoundSpec& spec, DType state_dtype) {
  return spec.rounding == Rounding::stochastic && state_dtype != DType::f32;
}

int64_t conv_scratch_row_elems(const RoundSpec& spec) {
  return spec.conv.width == 0 ? 0 : int64_t(spec.conv.width - 1) * spec.conv.channels;
}

ConvLayerInputs conv_into_verify_inputs(const RoundSpec& spec, const void* x, const float* weight, const float* bias,
                                        void* q, void* k, void* v) {
  const ModelShape& m = spec.model;
  ConvLayerInputs in;
  in.x = x;
  in.weight = weight;
  in.bias = bias;
  in.out[0] = ConvOutputSegment{m.heads * m.head_k, q};
  in.out[1] = ConvOutputSegment{m.heads * m.head_k, k};
  in.out[2] = ConvOutputSegment{m.value_heads * m.head_v, v};
  return in;
}

namespace ops {
namespace {

// Checks shared by every operation: the spec, the storage views, and the indices at `rows`.
void validate_round(const char* where, const Stream& s, const RoundSpec& spec, const SlotStorage& storage,
                    const RoundIndices& idx, int32_t rows) {
  detail::validate_spec(where, spec, s.backend);
  detail::validate_storage(where, spec, storage, s.backend);
  detail::validate_indices(where, spec, idx, rows);
}

}  // namespace

void build_indices(const Stream& s, const RoundSpec& spec, const SlotStorage& storage, const BatchView& batch,
                   const RoundIndices& idx) {
  const char* where = "ops::build_indices";
  validate_round(where, s, spec, storage, idx, batch.rows);
  detail::validate_batch_view(where, batch);
  require(spec.trees || batch.parent == nullptr, where, "batch.parent",
          "is set but spec.trees is not: set trees to verify token trees (docs/trees.md)");
  if (batch.parent != nullptr) detail::require_buffer(where, "batch.parent", batch.parent, alignof(int32_t));
  nvtx::Scoped range(nvtx::Range::index_build, batch.rows);
  IndexBuildParams p = detail::index_params(spec, storage, batch);
  p.out = idx;
  detail::enqueue<BuildIndicesOp>(s, p, spec.pdl);
}

void verify_layer(const Stream& s, const RoundSpec& spec, const SlotStorage& storage, const RoundIndices& idx,
                  int32_t rows, int32_t layer, const LayerInputs& in, const BatchView* batch) {
  const char* where = "ops::verify_layer";
  validate_round(where, s, spec, storage, idx, rows);
  detail::validate_layer_index(where, layer, spec.model.layers);
  detail::validate_layer_inputs(where, in, spec);
  if (batch != nullptr) detail::validate_batch_view(where, *batch);
  nvtx::Scoped range(nvtx::Range::layer, layer);
  detail::enqueue<VerifyOp>(s, detail::round_verify_params(spec, storage, idx, rows, layer, in, batch), spec.pdl);
}

void conv_verify_layer(const Stream& s, const RoundSpec& spec, const SlotStorage& storage, const RoundIndices& idx,
                       int32_t rows, int32_t layer, const ConvLayerInputs& conv, const LayerInputs& in,
                       const BatchView* batch) {
  const char* where = "ops::conv_verify_layer";
  validate_round(where, s, spec, storage, idx, rows);
  require(spec.conv.width > 0, where, "spec.conv.width", "= 0: the layers have no conv");
  detail::validate_layer_index(where, layer, spec.model.layers);
  detail::validate_conv_inputs(where, conv, spec.conv.channels, spec.io_dtype, true);
  detail::validate_layer_inputs(where, in, spec, false);
  if (batch != nullptr) detail::validate_batch_view(where, *batch);
  nvtx::Scoped range(nvtx::Range::layer, layer);
  detail::enqueue<VerifyOp>(s, detail::conv_verify_params(spec, storage, idx, rows, layer, conv, in, batch), spec.pdl);
}

void verify_indexed(const Stream& s, const RoundSpec& spec, const StateView& seeds, const StateView& states,
                    const IndexedRows& idx, int32_t rows, int32_t layer, const LayerInputs& in,
                    DeviceErrorWord* errors) {
  const char* where = "ops::verify_indexed";
  detail::validate_spec(where, spec, s.backend);
  require_in_range(where, "rows", rows, 1, INT32_MAX);
  detail::validate_layer_index(where, layer, spec.model.layers);
  detail::validate_state_view(where, "states", states, spec, 1, s.backend);
  require((idx.seed_row == nullptr) != (idx.seed_token == nullptr), where, "idx",
          "must set exactly one of seed_row (a row of seeds) and seed_token (a token's row of states)");
  if (idx.seed_row != nullptr) {
    detail::validate_state_view(where, "seeds", seeds, spec, 1, s.backend);
    require(seeds.dtype == states.dtype, where, "seeds.dtype", [&] {
      return std::string("= ") + to_string(seeds.dtype) + " differs from states.dtype = " + to_string(states.dtype);
    });
    detail::require_buffer(where, "idx.seed_row", idx.seed_row, alignof(int32_t));
  } else {
    detail::require_buffer(where, "idx.seed_token", idx.seed_token, alignof(int32_t));
  }
  detail::require_buffer(where, "idx.write_row", idx.write_row, alignof(int32_t));
  require(spec.trees || idx.parent == nullptr, where, "idx.parent",
          "is set but spec.trees is not: set trees to verify token trees (docs/trees.md)");
  if (idx.parent != nullptr) detail::require_buffer(where, "idx.parent", idx.parent, alignof(int32_t));
  detail::validate_layer_inputs(where, in, spec);
  if (errors != nullptr) detail::require_buffer(where, "errors", errors, alignof(DeviceErrorWord));
  nvtx::Scoped range(nvtx::Range::layer, layer);
  VerifyParams p = detail::verify_params(spec, rows, layer, in);
  p.pool = idx.seed_row != nullptr ? seeds : states;
  p.scratch = states;
  p.writes_scratch = idx.write_states;
  p.seed_pool = idx.seed_row;
  p.seed_token = idx.seed_token;
  p.write_row = idx.write_row;
  p.parent = idx.parent;
  p.errors = errors;
  detail::enqueue<VerifyOp>(s, p, spec.pdl);
}

void build_slot_indices(const Stream& s, const int32_t* slots, int32_t rows, const int32_t* accept_len,
                        int32_t pool_slots, int32_t scratch_steps, int32_t tokens, int32_t* write_row,
                        int32_t* accepted, DeviceErrorWord* errors) {
  const char* where = "ops::build_slot_indices";
  require_in_range(where, "rows", rows, 1, INT32_MAX);
  require_in_range(where, "pool_slots", pool_slots, 1, INT32_MAX);
  require_in_range(where, "scratch_steps", scratch_steps, 1, 1 << 16);
  require_in_range(where, "tokens", tokens, 1, scratch_steps);
  require(int64_t(pool_slots) * scratch_steps <= INT32_MAX, where, "scratch_steps", [&] {
    return "= " + std::to_string(scratch_steps) + " with pool_slots = " + std::to_string(pool_slots) +
           " makes scratch rows past the int32 range";
  });
  detail::require_buffer(where, "slots", slots, alignof(int32_t));
  detail::require_buffer(where, "accept_len", accept_len, alignof(int32_t));
  detail::require_buffer(where, "write_row", write_row, alignof(int32_t));
  detail::require_buffer(where, "accepted", accepted, alignof(int32_t));
  if (errors != nullptr) detail::require_buffer(where, "errors", errors, alignof(DeviceErrorWord));
  nvtx::Scoped range(nvtx::Range::index_build, rows);
  SlotIndexParams p;
  p.slots = slots;
  p.accept_len = accept_len;
  p.pool_slots = pool_slots;
  p.scratch_steps = scratch_steps;
  p.tokens = tokens;
  p.rows = rows;
  p.write_row = write_row;
  p.accepted = accepted;
  p.errors = errors;
  detail::enqueue<BuildSlotIndicesOp>(s, p, /*pdl=*/false);
}

void conv_layer(const Stream& s, const RoundSpec& spec, const SlotStorage& storage, const RoundIndices& idx,
                int32_t rows, int32_t layer, const ConvLayerInputs& in) {
  const char* where = "ops::conv_layer";
  validate_round(where, s, spec, storage, idx, rows);
  require(spec.conv.width > 0, where, "spec.conv.width", "= 0: the layers have no conv");
  detail::validate_layer_index(where, layer, spec.model.layers);
  detail::validate_conv_inputs(where, in, spec.conv.channels, spec.io_dtype);
  nvtx::Scoped range(nvtx::Range::conv, layer);
  detail::enqueue<ConvOp>(s, detail::round_conv_params(spec, storage, idx, rows, layer, in), spec.pdl);
}

void short_conv(const Stream& s, const ShortConvCall& c) {
  const char* where = "ops::short_conv";
  detail::validate_conv(where, c.conv);
  require(c.io_dtype == DType::f32 || c.io_dtype == DType::bf16 || c.io_dtype == DType::f16, where, "io_dtype",
          "is not f32, bf16 or f16");
  require_in_range(where, "batch", c.batch, 1, INT32_MAX);
  require_in_range(where, "tokens", c.tokens, 1, 1024);
  require_in_range(where, "scratch_steps", c.scratch_steps, c.tokens, 1 << 16);
  detail::require_buffer(where, "y", c.y, dtype_size(c.io_dtype));
  ConvLayerInputs in;
  in.x = c.x;
  in.weight = c.weight;
  in.bias = c.bias;
  in.out[0] = ConvOutputSegment{c.conv.channels, c.y};
  detail::validate_conv_inputs(where, in, c.conv.channels, c.io_dtype);
  // One layer's view, validated like a round's (a spec of one layer that no conv shape constrains) but
  // with rows that start at any element: docs/python.md takes any C, where a round's views keep 16 bytes.
  RoundSpec one_layer;
  one_layer.model.layers = 1;
  const int32_t row_align = int32_t(dtype_size(c.io_dtype));
  detail::validate_view(where, "conv_state", c.conv_state, one_layer, 1,
                        int64_t(conv_state_columns(ConvLayout::in_place, c.conv.width, c.scratch_steps)) * c.conv.channels,
                        s.backend, row_align);
  require(c.conv_state.dtype == c.io_dtype, where, "conv_state.dtype", [&] {
    return std::string("= ") + to_string(c.conv_state.dtype) + " differs from io_dtype = " + to_string(c.io_dtype);
  });
  detail::require_buffer(where, "state_indices", c.state_indices, alignof(int32_t));
  detail::require_buffer(where, "num_accepted", c.num_accepted, alignof(int32_t));
  if (c.errors != nullptr) detail::require_buffer(where, "errors", c.errors, alignof(DeviceErrorWord));
  nvtx::Scoped range(nvtx::Range::conv, 0);
  ConvParams p = detail::conv_params(c.conv, c.io_dtype, c.batch, c.tokens, in);
  p.state = c.conv_state;
  p.slots = int32_t(std::min<int64_t>(c.conv_state.rows, INT32_MAX));
  p.scratch_steps = c.scratch_steps;
  p.layout = ConvLayout::in_place;
  p.state_row_align = row_align;
  p.row_slot = c.state_indices;
  p.row_accept = c.num_accepted;
  if (c.parent != nullptr) detail::require_buffer(where, "parent", c.parent, alignof(int32_t));
  if (c.accept_index != nullptr) detail::require_buffer(where, "accept_index", c.accept_index, alignof(int32_t));
  p.parent = c.parent;
  p.row_path = c.accept_index;
  p.path_tokens = c.tokens;
  p.errors = c.errors;
  detail::enqueue<ConvOp>(s, p, /*pdl=*/false);
}

namespace {

// The accept of `rows` rows, from lengths or (a tree) from paths, as ops::accept and ops::accept_path.
void enqueue_accept(const Stream& s, const RoundSpec& spec, const SlotStorage& storage, const RoundIndices& idx,
                    int32_t rows, const int32_t* accepted, const int32_t* accept_index) {
  nvtx::Scoped range(nvtx::Range::accept, rows);
  AcceptParams p;
  p.rows = rows;
  p.tokens = spec.tokens;
  p.sets_slot = mode_policy(spec.mode).accept_sets_slot;
  p.row_slot = idx.row_slot;
  p.accepted = accepted;
  p.accept_index = accept_index;
  p.parent = accept_index != nullptr ? idx.parent : nullptr;
  p.accept_len = storage.accept_len;
  p.row_accept = idx.row_accept;
  if (needs_round_parity(spec)) {
    p.row_parity = idx.row_parity;
    p.round_parity = storage.round_parity;
  }
  if (needs_accept_path(spec)) p.slot_path = storage.accept_path;
  if (needs_rounding_state(spec, storage.pool.dtype)) p.rounding_counter = storage.rounding_counter;
  if (mode_policy(spec.mode).ring) {
    p.row_pending = idx.ring_pending;
    p.row_start = idx.ring_start;
    p.row_flush = idx.ring_flush;
    p.ring_pending = storage.ring_pending;
    p.ring_start = storage.ring_start;
    p.ring_records = spec.ring.records;
    if (accept_index != nullptr) {  // the accepted path's records into place, before the cursor moves
      CompactRingParams c;
      c.io_dtype = spec.io_dtype;
      RingCompactParams& r = c.ring;
      r.rows = rows;
      r.tokens = spec.tokens;
      r.layers = spec.model.layers;
      r.row_slot = idx.row_slot;
      r.accept_index = accept_index;
      r.parent = idx.parent;
      r.row_pending = idx.ring_pending;
      r.row_start = idx.ring_start;
      r.ring = ring_layout(spec);
      r.ring_kg = storage.ring_kg;
      r.ring_u = storage.ring_u;
      detail::enqueue<CompactRingOp>(s, c, spec.pdl);
    }
  }
  p.errors = storage.errors;
  detail::enqueue<AcceptOp>(s, p, spec.pdl);
}

}  // namespace

void accept(const Stream& s, const RoundSpec& spec, const SlotStorage& storage, const RoundIndices& idx,
            int32_t rows, const int32_t* accepted) {
  const char* where = "ops::accept";
  validate_round(where, s, spec, storage, idx, rows);
  detail::require_buffer(where, "accepted", accepted, alignof(int32_t));
  enqueue_accept(s, spec, storage, idx, rows, accepted, nullptr);
}

void accept_path(const Stream& s, const RoundSpec& spec, const SlotStorage& storage, const RoundIndices& idx,
                 int32_t rows, const int32_t* accept_index) {
  const char* where = "ops::accept_path";
  validate_round(where, s, spec, storage, idx, rows);
  require(spec.trees, where, "spec.trees", "is not set: a round of chains accepts lengths (ops::accept)");
  detail::require_buffer(where, "accept_index", accept_index, alignof(int32_t));
  enqueue_accept(s, spec, storage, idx, rows, nullptr, accept_index);
}

void commit(const Stream& s, const RoundSpec& spec, const SlotStorage& storage, const RoundIndices& idx,
            int32_t rows) {
  const char* where = "ops::commit";
  validate_round(where, s, spec, storage, idx, rows);
  require(mode_policy(spec.mode).commit, where, "spec.mode",
          [&] { return std::string("= ") + to_string(spec.mode) + ": this mode has no commit (two-phase has)"; });
  nvtx::Scoped range(nvtx::Range::commit, rows);
  detail::enqueue<CopyAcceptedStatesOp>(s, detail::copy_params(spec, storage, rows, idx.row_slot, idx.row_accept), spec.pdl);
  if (spec.conv.width > 0)
    detail::enqueue<ConvWindowOp>(s, detail::window_params(spec, storage, rows, idx.row_slot, idx.row_accept, true), spec.pdl);
}

void materialize(const Stream& s, const RoundSpec& spec, const SlotStorage& storage, const int32_t* slots,
                 int32_t count, const GateParams* gates) {
  const char* where = "ops::materialize";
  detail::validate_spec(where, spec, s.backend);
  detail::validate_storage(where, spec, storage, s.backend);
  require_in_range(where, "count", count, 0, INT32_MAX);
  if (count == 0) return;
  detail::require_buffer(where, "slots", slots, alignof(int32_t));
  const bool gate_in_kernel = spec.options.gate != GateMode::precomputed;
  const bool replay = mode_policy(spec.mode).ring;
  if (replay && gate_in_kernel) {
    require(gates != nullptr, where, "gates", "is null: a replay with the gate in the kernel needs each layer's A_log and dt_bias");
    for (int32_t l = 0; l < spec.model.layers; ++l) {
      char arg[2][48];  // the layer's argument names, with no allocation
      std::snprintf(arg[0], sizeof arg[0], "gates[%d].A_log", int(l));
      std::snprintf(arg[1], sizeof arg[1], "gates[%d].dt_bias", int(l));
      // An absent parameter is zeros (docs/python.md), as in the verify that wrote the records.
      if (gates[l].A_log != nullptr) detail::require_buffer(where, arg[0], gates[l].A_log, alignof(float));
      if (gates[l].dt_bias != nullptr) detail::require_buffer(where, arg[1], gates[l].dt_bias, alignof(float));
    }
  }
  nvtx::Scoped range(nvtx::Range::materialize, count);
  const StateCopyParams p = detail::copy_params(spec, storage, count, slots, nullptr);
  if (replay) {
    // The pending records are folded by the verify kernel itself, with no new tokens: the same code and
    // order as the next verify would fold them with. Their gate parameters must be those they were
    // verified with; nothing here remembers them (the Verifier checks, Verifier::check_gates).
    for (int32_t l = 0; l < spec.model.layers; ++l) {
      VerifyParams v = detail::layer_params(spec, storage, count, l);
      v.tokens = 0;
      v.slot_list = slots;
      v.slots = storage.slots;
      v.slot_pending = storage.ring_pending;
      v.slot_start = storage.ring_start;
      if (gate_in_kernel) {
        v.A_log = gates[l].A_log;
        v.dt_bias = gates[l].dt_bias;
        v.gate_heads = gates[l].gate_heads > 0 ? gates[l].gate_heads : spec.model.value_heads;
      }
      detail::enqueue<VerifyOp>(s, v, spec.pdl);
    }
  } else {
    detail::enqueue<CopyAcceptedStatesOp>(s, p, spec.pdl);
  }
  // The conv window moves to column 0 while accept_len still names where it is. Two-phase keeps it
  // there already.
  if (spec.conv.width > 0 && mode_policy(spec.mode).conv_offset_window)
    detail::enqueue<ConvWindowOp>(s, detail::window_params(spec, storage, count, slots, nullptr, false), spec.pdl);
  detail::enqueue<ResetAcceptLenOp>(s, p, spec.pdl);
}

}  // namespace ops
}  // namespace kdagraph
