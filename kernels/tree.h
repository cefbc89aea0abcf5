// docs/trees.md: token trees. A round's T tokens of a row may form a tree: parent[t] in [-1, t) (-1: a child
// of the seed), so the tokens are in topological order and a chain is parent[t] = t - 1. Token t updates
// its parent's state and outputs from its own post-state. The sampler accepts a root-to-node path,
// SGLang's accept_index row (node indices from a child of the seed down, -1 after the end; the root is
// token 0 in SGLang's trees, any token with parent -1 here); the accept length becomes the last node + 1, so every seed and commit row keeps the chain's formula, slot * S + a - 1.
//
// One set of functions for the index build, the verify and the accept on both backends: what the host
// cannot see (a parent or a path in device memory) is clamped here and recorded.
#pragma once

#include <cstdint>

#include "kernels/device_error.h"

namespace kdagraph {

// The parent of token t of a row as the kernels use it: parent[t] when it is in [-1, t), else t - 1 (the
// chain's), recorded (parent_out_of_range) when `report`. A null `parent` is the chain.
KDA_HD int32_t checked_parent(const int32_t* parent, int32_t t, int32_t n, DeviceErrorWord* errors, bool report) {
  if (parent == nullptr) return t - 1;
  const int32_t pt = parent[t];
  if (pt >= -1 && pt < t) return pt;
  if (report) record_device_error(errors, DeviceErrorCode::parent_out_of_range, n, pt);
  return t - 1;
}

// The states a verify must keep past the next token (T <= 31): bit j + 1 is set when the post-state of
// token j (bit 0: the seed) is the parent of a token other than j + 1, which must then start from it
// again. A chain keeps none, so it runs exactly as without a tree.
KDA_HD uint32_t tree_branch_points(const int32_t* parent, int32_t tokens) {
  uint32_t points = 0;
  for (int32_t t = 1; t < tokens; ++t) {
    const int32_t pt = checked_parent(parent, t, 0, nullptr, false);
    if (pt != t - 1) points |= 1u << (pt + 1);
  }
  return points;
}

// Where a verify keeps its branch states: in slots of a fixed number per row, each reused once the last
// token that starts from its state has read it back. A state that must be kept has a token other than
// its successor still to start from it; those tokens are distinct, so when new token t - 1's post-state
// is kept at most min(t + 1, T - t) states are live: never more than tree_slot_count(T).
KDA_HD constexpr int32_t tree_slot_count(int32_t tokens) { return (tokens + 1) / 2; }

// Each kept state's slot (tree_branch_points' states j: 0 the seed, j new token j - 1's post-state), 3
// bits apiece: at most tree_slot_count(31) = 16 slots would not fit, so a caller bounds T (the CUDA
// verify: kMaxCudaTreeTokens, 8 slots).
struct TreeSlots {
  uint32_t kept = 0;  // tree_branch_points
  uint64_t slot = 0;  // bits [3 j, 3 j + 3): state j's slot, when kept
  int32_t used = 0;   // slots in use at most
  KDA_HD int32_t of(int32_t j) const { return int32_t(slot >> (3 * j) & 7u); }
};

// Assigns the slots in the verify's order, lowest free first: new token t - 1's post-state is kept (when
// it must be) before token t starts, then token t reads its parent's state back, and, if it is that
// state's last reader, frees its slot. Registers only: bit masks, no per-state arrays (which
// a kernel would place in local memory). `parent` as checked_parent reads it; tokens <= 16.
KDA_HD TreeSlots tree_branch_slots(const int32_t* parent, int32_t tokens) {
  TreeSlots r;
  uint32_t last_reader = 0;  // bit t: token t is the last to start from its parent's kept state
  for (int32_t t = tokens - 1; t >= 1; --t) {
    const int32_t j = checked_parent(parent, t, 0, nullptr, false) + 1;
    if (j == t) continue;  // its predecessor's state, in hand
    if ((r.kept >> j & 1u) == 0) last_reader |= 1u << t;
    r.kept |= 1u << j;
  }
  uint32_t occupied = 0;
  for (int32_t j = 0; j < tokens; ++j) {
    if (r.kept >> j & 1u) {
      int32_t free_slot = 0;
      while (occupied >> free_slot & 1u) ++free_slot;
      occupied |= 1u << free_slot;
      r.slot |= uint64_t(free_slot) << (3 * j);
      if (free_slot + 1 > r.used) r.used = free_slot + 1;
    }
    if (last_reader >> j & 1u) occupied &= ~(1u << r.of(checked_parent(parent, j, 0, nullptr, false) + 1));
  }
  return r;
}

// An accepted path of a row: `nodes` valid entries of accept_index, ending at token `last`.
struct TreePath {
  int32_t nodes = 1;
  int32_t last = 0;
  bool root_only = false;  // cut to nothing: token 0 alone, whatever the path's first entry says
};

// Row n's accept_index [T] as the kernels use it: the path from a child of the seed (a token whose
// parent is -1) down the tree, to its first -1 or its end. A first node that is no child of the seed,
// or a node that is not a child of the one before it, cuts the path there and is recorded
// (path_invalid) when `report`; a path cut to nothing keeps token 0. `parent` is the row's checked
// parents (the index build's), or null: the chain.
KDA_HD TreePath checked_path(const int32_t* path, const int32_t* parent, int32_t tokens, int32_t n,
                             DeviceErrorWord* errors, bool report) {
  TreePath r;
  r.nodes = 0;
  r.last = -1;
  for (int32_t i = 0; i < tokens; ++i) {
    const int32_t node = path[i];
    if (node == -1 && i > 0) break;
    const bool child = node > r.last && node < tokens && (parent != nullptr ? parent[node] : node - 1) == r.last;
    if (!child) {
      if (report) record_device_error(errors, DeviceErrorCode::path_invalid, n, node);
      break;
    }
    r.nodes = i + 1;
    r.last = node;
  }
  if (r.nodes == 0) r = TreePath{1, 0, true};  // token 0, always a child of the seed
  return r;
}

// The nodes of a slot's kept path (SlotStorage::accept_path, the accept step's checked copy): its
// entries before the first -1, at most `tokens`, each in [0, tokens) (an entry outside ends the path
// too: the row is memory the caller owns).
KDA_HD int32_t kept_path_nodes(const int32_t* path, int32_t tokens) {
  int32_t k = 0;
  while (k < tokens && path[k] >= 0 && path[k] < tokens) ++k;
  return k;
}

}  // namespace kdagraph
