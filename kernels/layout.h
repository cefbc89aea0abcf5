// SPEC §2: where each state lives. Plain __host__ __device__ arithmetic, tested on the host
// (tests/kernels/layout_test.cpp) and called unchanged by the CUDA kernels.
//
// [TAG_STATE_LAYOUT] pool [L, P, HV, V, K]; scratch [L, P, S, HV, V, K] with row = slot * S + t.
// verify, state_copy and the tests' references all address through these functions.
#pragma once

#include <cstdint>

#include "kernels/kda_math.h"

namespace kdagraph {

struct StateGeometry {
  int32_t layers = 0;         // L
  int32_t slots = 0;          // P
  int32_t scratch_steps = 0;  // S
  int32_t value_heads = 0;    // HV
  int32_t head_v = 0;         // V
  int32_t head_k = 0;         // K

  KDA_HD int64_t head_elems() const { return int64_t(head_v) * head_k; }
  KDA_HD int64_t slot_elems() const { return int64_t(value_heads) * head_elems(); }
  KDA_HD int64_t pool_layer_elems() const { return int64_t(slots) * slot_elems(); }
  KDA_HD int64_t scratch_rows() const { return int64_t(slots) * scratch_steps; }
  KDA_HD int64_t scratch_layer_elems() const { return scratch_rows() * slot_elems(); }
  KDA_HD int64_t pool_elems() const { return int64_t(layers) * pool_layer_elems(); }
  KDA_HD int64_t scratch_elems() const { return int64_t(layers) * scratch_layer_elems(); }

  // Element offset of head `head` of slot `slot` in layer `layer` of the pool.
  KDA_HD int64_t pool_offset(int32_t layer, int32_t slot, int32_t head) const {
    return int64_t(layer) * pool_layer_elems() + int64_t(slot) * slot_elems() +
           int64_t(head) * head_elems();
  }
  // Element offset of head `head` of scratch row `row` (= slot * S + t) in layer `layer`.
  KDA_HD int64_t scratch_offset(int32_t layer, int32_t row, int32_t head) const {
    return int64_t(layer) * scratch_layer_elems() + int64_t(row) * slot_elems() +
           int64_t(head) * head_elems();
  }
};

// Scratch row holding the post-state of token t of slot `slot`'s last verify.
KDA_HD int32_t scratch_row(int32_t slot, int32_t t, int32_t scratch_steps) {
  return slot * scratch_steps + t;
}

// Scratch row a fused-accept verify seeds from, or -1 when the seed is pool[slot] (accept_len 0).
KDA_HD int32_t seed_scratch_row(int32_t slot, int32_t accept_len, int32_t scratch_steps) {
  return accept_len > 0 ? scratch_row(slot, accept_len - 1, scratch_steps) : -1;
}

}  // namespace kdagraph
