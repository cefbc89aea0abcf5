// SPEC §2: where each state lives. Plain __host__ __device__ arithmetic, tested on the host
// (tests/kernels/layout_test.cpp) and called unchanged by the CUDA kernels.
//
// [TAG_STATE_LAYOUT] pool rows are slots; scratch rows are slot * S + t. The kernels address state only
// through views (layer_base, state_row); the Verifier lays out its own buffers with StateGeometry.
#pragma once

#include <cstdint>

#include "kdagraph/ops.hpp"
#include "kernels/kda_math.h"

namespace kdagraph {

// Element size of a state or io dtype, callable from device code too.
KDA_HD int64_t elem_bytes(DType t) { return t == DType::f32 ? 4 : 2; }

// Elements from one state row to the next that keep every row 16-byte aligned (SPEC §10): the compact
// row size, rounded up to 16 bytes. Equal to the compact size at every head shape the GPU supports.
KDA_HD int64_t aligned_row_elems(int64_t row_elems, DType t) {
  const int64_t per16 = 16 / elem_bytes(t);
  return (row_elems + per16 - 1) / per16 * per16;
}

// The Verifier's own storage: pool [L, P, HV, V, K] and scratch [L, P * S, HV, V, K], rows `row_stride`
// elements apart (the compact HV * V * K unless set).
struct StateGeometry {
  int32_t layers = 0;         // L
  int32_t slots = 0;          // P
  int32_t scratch_steps = 0;  // S
  int32_t value_heads = 0;    // HV
  int32_t head_v = 0;         // V
  int32_t head_k = 0;         // K
  int64_t row_stride_elems = 0;  // 0: compact

  KDA_HD int64_t head_elems() const { return int64_t(head_v) * head_k; }
  KDA_HD int64_t slot_elems() const { return int64_t(value_heads) * head_elems(); }
  KDA_HD int64_t row_stride() const { return row_stride_elems > 0 ? row_stride_elems : slot_elems(); }
  KDA_HD int64_t pool_layer_elems() const { return int64_t(slots) * row_stride(); }
  KDA_HD int64_t scratch_rows() const { return int64_t(slots) * scratch_steps; }
  KDA_HD int64_t scratch_layer_elems() const { return scratch_rows() * row_stride(); }
  KDA_HD int64_t pool_elems() const { return int64_t(layers) * pool_layer_elems(); }
  KDA_HD int64_t scratch_elems() const { return int64_t(layers) * scratch_layer_elems(); }

  // Element offset of head `head` of slot `slot` in layer `layer` of the pool.
  KDA_HD int64_t pool_offset(int32_t layer, int32_t slot, int32_t head) const {
    return int64_t(layer) * pool_layer_elems() + int64_t(slot) * row_stride() + int64_t(head) * head_elems();
  }
  // Element offset of head `head` of scratch row `row` (= slot * S + t) in layer `layer`.
  KDA_HD int64_t scratch_offset(int32_t layer, int32_t row, int32_t head) const {
    return int64_t(layer) * scratch_layer_elems() + int64_t(row) * row_stride() + int64_t(head) * head_elems();
  }
};

// The Verifier's layout for a model and pool: rows 16-byte aligned.
inline StateGeometry make_geometry(const ModelShape& m, const PoolShape& p) {
  StateGeometry g{m.layers, p.slots, p.scratch_steps, m.value_heads, m.head_v, m.head_k};
  g.row_stride_elems = aligned_row_elems(g.slot_elems(), p.state_dtype);
  return g;
}

// Views of a geometry's pool and scratch at `base`.
inline StateView pool_view(const StateGeometry& g, void* base, DType t) {
  return StateView{t, g.layers, g.slots, g.row_stride(), base, g.pool_layer_elems(), nullptr};
}
inline StateView scratch_view(const StateGeometry& g, void* base, DType t) {
  return StateView{t, g.layers, g.scratch_rows(), g.row_stride(), base, g.scratch_layer_elems(), nullptr};
}

// [TAG_VIEW_ADDRESS] Where layer `layer` of a view starts, or nullptr when its base is null or, in a
// table, not 16-byte aligned (a table in device memory can only be checked here, by the kernel).
KDA_HD char* layer_base(const StateView& v, int32_t layer) {
  if (v.layer_table != nullptr) {
    char* base = static_cast<char*>(v.layer_table[layer]);
    return reinterpret_cast<uintptr_t>(base) % 16 == 0 ? base : nullptr;
  }
  if (v.base == nullptr) return nullptr;
  return static_cast<char*>(v.base) + int64_t(layer) * v.layer_stride * elem_bytes(v.dtype);
}

// Start of row `row` of a layer whose base is `layer`.
KDA_HD char* state_row(char* layer, const StateView& v, int64_t row) {
  return layer + row * v.row_stride * elem_bytes(v.dtype);
}

// [TAG_TOKEN_CACHE] Replay mode's token cache (SPEC §3): per layer, row slot * 2 + parity holds the
// inputs the update needs of one round's T tokens of that slot, as given, in the io dtype, laid out as
// one input row is: k [T, H, K], then v [T, HV, V], g [T, HV, K], beta [T, HV]. The verify kernel, the
// CPU implementation and the README's description address it through these offsets.
struct TokenCacheLayout {
  int32_t tokens = 0, heads = 0, value_heads = 0, head_k = 0, head_v = 0;

  KDA_HD int64_t k_offset(int32_t t, int32_t hq) const { return (int64_t(t) * heads + hq) * head_k; }
  KDA_HD int64_t v_offset(int32_t t, int32_t h) const {
    return int64_t(tokens) * heads * head_k + (int64_t(t) * value_heads + h) * head_v;
  }
  KDA_HD int64_t g_offset(int32_t t, int32_t h) const {
    return int64_t(tokens) * (int64_t(heads) * head_k + int64_t(value_heads) * head_v) + (int64_t(t) * value_heads + h) * head_k;
  }
  KDA_HD int64_t beta_offset(int32_t t, int32_t h) const {
    return int64_t(tokens) * (int64_t(heads) * head_k + int64_t(value_heads) * (head_v + head_k)) +
           int64_t(t) * value_heads + h;
  }
  // Elements of one cache row: T * (H * K + HV * V + HV * K + HV).
  KDA_HD int64_t row_elems() const { return beta_offset(tokens, 0); }
};

// Cache row of a slot's tokens of round parity `parity` (0 or 1).
KDA_HD int32_t cache_row(int32_t slot, int32_t parity) { return slot * 2 + parity; }

// Scratch row holding the post-state of token t of slot `slot`'s last verify.
KDA_HD int32_t scratch_row(int32_t slot, int32_t t, int32_t scratch_steps) {
  return slot * scratch_steps + t;
}

// Scratch row a fused-accept verify seeds from, or -1 when the seed is pool[slot] (accept_len 0).
KDA_HD int32_t seed_scratch_row(int32_t slot, int32_t accept_len, int32_t scratch_steps) {
  return accept_len > 0 ? scratch_row(slot, accept_len - 1, scratch_steps) : -1;
}

}  // namespace kdagraph
