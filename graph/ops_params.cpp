// docs/ops.md: the kernels' parameters of the operations over caller-owned buffers (kdagraph/ops.hpp), from
// their validated arguments. Apart from the operations (graph/ops.cpp), which enqueue them, the verify
// sweep (profiling/bench_verify_sweep.cu) and the SIMT tests of the kernel family launch other members of
// the family on a round's very parameters.
#include "graph/ops_params.h"

namespace kdagraph::detail {

VerifyParams verify_params(const RoundSpec& spec, int32_t rows, int32_t layer, const LayerInputs& in) {
  VerifyParams p;
  p.rows = rows;
  p.tokens = spec.tokens;
  p.heads = spec.model.heads;
  p.value_heads = spec.model.value_heads;
  p.head_k = spec.model.head_k;
  p.head_v = spec.model.head_v;
  p.io_dtype = spec.io_dtype;
  p.options = spec.options;
  p.layer = layer;
  p.q = in.q;
  p.k = in.k;
  p.v = in.v;
  p.g = in.g;
  p.beta = in.beta;
  p.o = in.o;
  p.A_log = in.A_log;
  p.dt_bias = in.dt_bias;
  p.gate_heads = in.gate_heads > 0 ? in.gate_heads : spec.model.value_heads;
  p.gate_f32 = in.gate_f32 && spec.io_dtype != DType::f32;
  p.q_strides = in.q_strides;
  p.k_strides = in.k_strides;
  p.v_strides = in.v_strides;
  return p;
}

VerifyParams layer_params(const RoundSpec& spec, const SlotStorage& st, int32_t rows, int32_t layer,
                          const LayerInputs& in) {
  const ModePolicy policy = mode_policy(spec.mode);
  VerifyParams p = verify_params(spec, rows, layer, in);
  p.pool = st.pool;
  p.writes_scratch = policy.per_token_scratch;
  if (policy.per_token_scratch) p.scratch = st.scratch;
  if (policy.ring) {
    p.ring_kg = st.ring_kg;
    p.ring_u = st.ring_u;
    p.ring_records = spec.ring.records;
  }
  p.errors = st.errors;
  p.bytes_moved = reinterpret_cast<unsigned long long*>(st.bytes_moved);
  if (needs_rounding_state(spec, st.pool.dtype)) {
    p.rounding = Rounding::stochastic;
    p.rounding_seed = st.rounding_seed;
    p.rounding_counter = st.rounding_counter;
  }
  return p;
}

StateCopyParams copy_params(const RoundSpec& spec, const SlotStorage& st, int32_t count, const int32_t* slot_of,
                            const int32_t* accept_of) {
  StateCopyParams p;
  p.count = count;
  p.slot_of = slot_of;
  p.accept_of = accept_of;
  p.accept_len = st.accept_len;
  p.slots = st.slots;
  p.scratch_steps = st.scratch_steps;
  p.row_elems = int64_t(spec.model.value_heads) * spec.model.head_v * spec.model.head_k;
  p.pool = st.pool;
  p.scratch = st.scratch;
  if (needs_round_parity(spec)) p.round_parity = st.round_parity;
  if (mode_policy(spec.mode).ring) {
    p.ring_pending = st.ring_pending;
    p.ring_start = st.ring_start;
  }
  p.errors = st.errors;
  p.bytes_moved = reinterpret_cast<unsigned long long*>(st.bytes_moved);
  return p;
}

ConvParams conv_params(const ConvShape& shape, DType io_dtype, int32_t rows, int32_t tokens,
                       const ConvLayerInputs& in) {
  ConvParams p;
  p.rows = rows;
  p.tokens = tokens;
  p.channels = shape.channels;
  p.width = shape.width;
  p.activation = shape.activation;
  p.io_dtype = io_dtype;
  p.x = in.x;
  p.weight = in.weight;
  p.bias = in.bias;
  for (int s = 0; s < kMaxConvSegments; ++s) p.out[s] = in.out[s];
  return p;
}

ConvWindowParams window_params(const RoundSpec& spec, const SlotStorage& st, int32_t count, const int32_t* slot_of,
                               const int32_t* accept_of, bool from_scratch) {
  ConvWindowParams p;
  p.count = count;
  p.slot_of = slot_of;
  p.accept_of = accept_of;
  p.accept_len = st.accept_len;
  p.slots = st.slots;
  p.scratch_steps = st.scratch_steps;
  // The recurrent state's clamp (indices.h), so a corrupt length moves both states alike.
  p.max_accept = mode_policy(spec.mode).ring ? spec.tokens : st.scratch_steps;
  if (needs_accept_path(spec) && !from_scratch) {
    p.slot_path = st.accept_path;
    p.path_tokens = spec.tokens;
  }
  p.channels = spec.conv.channels;
  p.width = spec.conv.width;
  p.layers = spec.model.layers;
  p.io_dtype = spec.io_dtype;
  p.from_scratch = from_scratch;
  p.state = st.conv_state;
  if (from_scratch) p.scratch = st.conv_scratch;
  else p.round_parity = st.round_parity;
  p.errors = st.errors;
  return p;
}

IndexBuildParams index_params(const RoundSpec& spec, const SlotStorage& storage, const BatchView& batch) {
  IndexBuildParams p;
  p.slots = batch.slots;
  p.n_real = batch.n_real;
  p.accept_len = storage.accept_len;
  p.pool_slots = storage.slots;
  p.scratch_steps = storage.scratch_steps;
  p.tokens = spec.tokens;
  p.rows = batch.rows;
  p.policy = mode_policy(spec.mode);
  if (needs_round_parity(spec)) p.round_parity = storage.round_parity;
  if (mode_policy(spec.mode).ring) {
    p.ring_pending = storage.ring_pending;
    p.ring_start = storage.ring_start;
    p.ring = spec.ring;
  }
  if (spec.trees) p.parent = batch.parent;
  p.errors = storage.errors;
  return p;
}

VerifyParams round_verify_params(const RoundSpec& spec, const SlotStorage& storage, const RoundIndices& idx,
                                 int32_t rows, int32_t layer, const LayerInputs& in, const BatchView* batch) {
  VerifyParams p = layer_params(spec, storage, rows, layer, in);
  p.row_slot = idx.row_slot;
  p.seed_pool = idx.seed_pool;
  p.seed_scratch = idx.seed_scratch;
  p.write_row = idx.write_row;
  if (spec.trees) p.parent = idx.parent;
  if (mode_policy(spec.mode).ring) {
    p.ring_pending = idx.ring_pending;
    p.ring_start = idx.ring_start;
    p.ring_flush = idx.ring_flush;
  }
  if (batch != nullptr) p.pre_round = index_params(spec, storage, *batch);
  return p;
}

ConvParams round_conv_params(const RoundSpec& spec, const SlotStorage& storage, const RoundIndices& idx,
                             int32_t rows, int32_t layer, const ConvLayerInputs& in) {
  const ModePolicy policy = mode_policy(spec.mode);
  ConvParams p = conv_params(spec.conv, spec.io_dtype, rows, spec.tokens, in);
  p.state = storage.conv_state;
  p.layer = layer;
  p.slots = storage.slots;
  p.scratch_steps = storage.scratch_steps;
  p.layout = conv_layout(policy);
  p.row_slot = idx.row_slot;
  if (policy.conv_offset_window) {
    p.row_accept = idx.seed_accept;
    p.row_parity = idx.row_parity;
  } else {
    p.scratch = storage.conv_scratch;
    p.write_row = idx.write_row;
  }
  if (spec.trees) p.parent = idx.parent;
  if (needs_accept_path(spec)) {
    p.slot_path = storage.accept_path;
    p.path_tokens = spec.tokens;
  }
  p.errors = storage.errors;
  return p;
}

VerifyParams conv_verify_params(const RoundSpec& spec, const SlotStorage& storage, const RoundIndices& idx,
                                int32_t rows, int32_t layer, const ConvLayerInputs& conv, const LayerInputs& in,
                                const BatchView* batch) {
  ConvLayerInputs x_only = conv;
  for (ConvOutputSegment& seg : x_only.out) seg = ConvOutputSegment{};
  LayerInputs rest = in;
  rest.q = rest.k = rest.v = nullptr;
  VerifyParams p = round_verify_params(spec, storage, idx, rows, layer, rest, batch);
  p.conv = round_conv_params(spec, storage, idx, rows, layer, x_only);
  return p;
}

}  // namespace kdagraph::detail
