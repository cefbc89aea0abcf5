// docs/trees.md on the device: where the verify kernel (kernels/verify_kernel.cuh) keeps the states a token
// tree branches from.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/launch.cuh"
#include "kernels/tree.h"
#include "kernels/verify.h"
#include "kernels/verify_update.cuh"

namespace kdagraph::verify_detail {

// [TAG_TREE] docs/trees.md: a token tree's branch states (VerifyParams::parent). A lane keeps its slice of the
// current state in registers as for a chain; where a later token branches from a state other than the
// one before it, that state's slice is kept aside, and the token starts from it. Kept in fp32 in the
// block's dynamic shared memory, in tree_slot_count(T) slots that tree_branch_slots (kernels/tree.h)
// reuses once a state's last reader has read it, not reloaded from the post-state's scratch row: that
// row holds the state dtype (bf16 rounds it), replay has no scratch, and each token must continue from
// its parent's state exactly as a chain of its path would (a path of the tree is bitwise that chain, in
// every mode). A slot holds every thread's slice, element-major so that a warp's accesses fall in
// distinct banks; only the thread that stored a value reads it back, so no barrier is needed. Every
// thread assigns the slots itself, from the row's parents, in registers (local memory had held 17
// slices a thread). launch_verify_tiles sizes the memory (tree_branch_bytes).
template <class Tile, bool kTree>
struct TreeBranches {  // a chain: nothing kept, nothing reloaded
  __device__ void set(const VerifyParams&, int32_t, bool) {}
  __device__ void keep(int32_t, const StateSlice<Tile>&) {}
  __device__ void enter(int32_t, StateSlice<Tile>&) const {}
};

template <class Tile>
constexpr int kSliceFloats = Tile::kRows * Tile::kChunks * kSlice;

// The dynamic shared memory a tree verify of `tokens` new tokens keeps its branch states in.
template <class Tile>
constexpr size_t tree_branch_bytes(int32_t tokens) {
  return size_t(tree_slot_count(tokens)) * Tile::kThreads * kSliceFloats<Tile> * sizeof(float);
}

template <class Tile>
struct TreeBranches<Tile, true> {
  const int32_t* parent = nullptr;  // the row's [T]
  TreeSlots slots;
  float* kept = nullptr;  // this thread's first element of slot 0

  __device__ void set(const VerifyParams& p, int32_t n, bool report) {
    parent = p.parent + int64_t(n) * p.tokens;
    slots = tree_branch_slots(parent, p.tokens);
    kept = dynamic_shared<float>() + threadIdx.x;
    if (report)
      for (int32_t t = 0; t < p.tokens; ++t) checked_parent(parent, t, n, p.errors, true);
  }
  // The state the new tokens start from (j = 0), or new token j - 1's post-state.
  __device__ void keep(int32_t j, const StateSlice<Tile>& s) {
    if ((slots.kept >> j & 1u) == 0) return;
    float* slot = kept + slots.of(j) * (kSliceFloats<Tile> * Tile::kThreads);
#pragma unroll
    for (int r = 0; r < Tile::kRows; ++r)
#pragma unroll
      for (int c = 0; c < Tile::kChunks; ++c)
#pragma unroll
        for (int e = 0; e < kSlice; ++e) slot[((r * Tile::kChunks + c) * kSlice + e) * Tile::kThreads] = s[r][c][e];
  }
  // Before new token t's update (t >= 1): its parent's state, where that is not the state in hand.
  __device__ void enter(int32_t t, StateSlice<Tile>& s) const {
    const int32_t pt = checked_parent(parent, t, 0, nullptr, false);
    if (pt == t - 1) return;
    const float* slot = kept + slots.of(pt + 1) * (kSliceFloats<Tile> * Tile::kThreads);
#pragma unroll
    for (int r = 0; r < Tile::kRows; ++r)
#pragma unroll
      for (int c = 0; c < Tile::kChunks; ++c)
#pragma unroll
        for (int e = 0; e < kSlice; ++e) s[r][c][e] = slot[((r * Tile::kChunks + c) * kSlice + e) * Tile::kThreads];
  }
};

}  // namespace kdagraph::verify_detail
