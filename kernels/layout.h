// docs/storage.md: where each state lives. Plain __host__ __device__ arithmetic, tested on the host
// (tests/kernels/layout_test.cpp) and called unchanged by the CUDA kernels.
//
// [TAG_STATE_LAYOUT] pool rows are slots; scratch rows are slot * S + t. The kernels address state only
// through views (layer_base, state_row); the Verifier lays out its own buffers with StateGeometry.
#pragma once

#include <cstdint>

#include "kdagraph/buffers.hpp"
#include "kernels/kda_math.h"

namespace kdagraph {

// Element size of a state or io dtype, callable from device code too.
KDA_HD int64_t elem_bytes(DType t) { return t == DType::f32 ? 4 : 2; }

// Elements from one state row to the next that keep every row 16-byte aligned (docs/ops.md): the compact
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

// [TAG_RING_LAYOUT] Replay's corrections ring (docs/modes.md, SlotStorage::ring_kg and ring_u): per layer,
// row slot holds its R records, record i of the slot's ring being k [H, K] and g [HV, K] in the io
// dtype (the kg row: every k, then every g) and u [HV, V] in fp32 (the u row). The verify kernel, the
// CPU implementation and the accept step's compaction address it through these offsets.
struct RingLayout {
  int32_t records = 0, heads = 0, value_heads = 0, head_k = 0, head_v = 0;

  KDA_HD int64_t k_offset(int32_t i, int32_t hq) const { return (int64_t(i) * heads + hq) * head_k; }
  KDA_HD int64_t g_offset(int32_t i, int32_t h) const {
    return int64_t(records) * heads * head_k + (int64_t(i) * value_heads + h) * head_k;
  }
  KDA_HD int64_t u_offset(int32_t i, int32_t h) const { return (int64_t(i) * value_heads + h) * head_v; }
  KDA_HD int64_t kg_row_elems() const { return int64_t(records) * (heads + value_heads) * head_k; }
  KDA_HD int64_t u_row_elems() const { return int64_t(records) * value_heads * head_v; }
};

// The ring record that the pending or new record number `i` after `start` is.
KDA_HD int32_t ring_record(int32_t start, int32_t i, int32_t records) { return (start + i) % records; }

// Whether a round of T tokens over a slot with `pending` unfolded records flushes (docs/modes.md): writes its
// folded state back to the checkpoint, so that its records start the ring over. It must when the ring
// could not hold another round's records after this one's.
KDA_HD bool ring_flushes(int32_t pending, int32_t tokens, int32_t records, int32_t flush_min) {
  return pending >= flush_min || pending + tokens > records - tokens;
}

// Scratch row holding the post-state of token t of slot `slot`'s last verify.
KDA_HD int32_t scratch_row(int32_t slot, int32_t t, int32_t scratch_steps) {
  return slot * scratch_steps + t;
}

// Scratch row a fused-accept verify seeds from, or -1 when the seed is pool[slot] (accept_len 0).
KDA_HD int32_t seed_scratch_row(int32_t slot, int32_t accept_len, int32_t scratch_steps) {
  return accept_len > 0 ? scratch_row(slot, accept_len - 1, scratch_steps) : -1;
}

}  // namespace kdagraph
