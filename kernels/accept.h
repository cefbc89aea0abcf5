// docs/modes.md: accepting a round. The sampler's accept lengths arrive in device memory, one per batch row.
//   fused-accept: accept_len[row_slot[n]] = a      two-phase: row_accept[n] = a (commit reads it)
// (which of the two: ModePolicy::accept_sets_slot); replay also moves the slot's ring cursor: its
// pending records become (0 if the round flushed, else the pending ones) + a, from the round's first
// record on a flush. A token tree's accepted records are first moved into place (RingCompactParams).
// A length outside [1, T] is clamped into it and recorded in the device error word. A token tree's
// accepted path (docs/trees.md) gives the length instead: its last node + 1 (kernels/tree.h).
#pragma once

#include <cstdint>
#include <string>

#include "kdagraph/error.hpp"
#include "kdagraph/types.hpp"
#include "kernels/device_error.h"
#include "kernels/layout.h"
#include "kernels/tree.h"

namespace kdagraph {

struct AcceptParams {
  int32_t rows = 0;                  // N
  int32_t tokens = 0;                // T
  bool sets_slot = true;             // ModePolicy::accept_sets_slot
  const int32_t* row_slot = nullptr; // [N] from RoundIndices, -1 padded
  const int32_t* accepted = nullptr; // [N] the sampler's accept lengths, or
  const int32_t* accept_index = nullptr;  // [N, T] its accepted paths (docs/trees.md), with
  const int32_t* parent = nullptr;        // [N, T] the round's checked tree (RoundIndices::parent)
  int32_t* accept_len = nullptr;     // [P] fused-accept
  int32_t* row_accept = nullptr;     // [N] two-phase
  // Where the round keeps a parity (replay's token cache, the conv state's halves): the round wrote the
  // buffers of parity 1 - row_parity[n], and they become the slot's (the next verify reads them).
  const int32_t* row_parity = nullptr;  // [N] from RoundIndices
  int32_t* round_parity = nullptr;      // [P]
  // docs/trees.md, where a round of trees keeps each slot's accepted path (SlotStorage::accept_path): [P, T],
  // the row's checked path (or, from a length a, 0 .. a - 1), -1 after it.
  int32_t* slot_path = nullptr;
  // Replay (docs/modes.md): [N] the round's ring cursor and flush (RoundIndices), [P] the slots' cursor.
  const int32_t* row_pending = nullptr;
  const int32_t* row_start = nullptr;
  const int32_t* row_flush = nullptr;
  int32_t* ring_pending = nullptr;
  int32_t* ring_start = nullptr;
  int32_t ring_records = 0;  // R
  // docs/low_precision.md, stochastic rounding: [P] each slot's store counter, advanced once a round (the next
  // round's stores draw afresh). Null: not kept.
  uint32_t* rounding_counter = nullptr;
  DeviceErrorWord* errors = nullptr;
};

KDA_HD void accept_row(const AcceptParams& p, int32_t n) {
  const int32_t slot = p.row_slot[n];
  if (slot < 0) {
    if (!p.sets_slot) p.row_accept[n] = 0;
    return;
  }
  const int32_t* path = p.accept_index != nullptr ? p.accept_index + int64_t(n) * p.tokens : nullptr;
  const TreePath checked = path != nullptr ? checked_path(path, p.parent + int64_t(n) * p.tokens, p.tokens, n, p.errors, true)
                                           : TreePath{};
  const int32_t a = path != nullptr ? checked.last + 1 : checked_accept(p.accepted[n], 1, p.tokens, n, p.errors, true);
  if (p.slot_path != nullptr) {
    int32_t* kept = p.slot_path + int64_t(slot) * p.tokens;
    const int32_t nodes = path != nullptr ? checked.nodes : a;
    const bool from_path = path != nullptr && !checked.root_only;
    for (int32_t i = 0; i < p.tokens; ++i) kept[i] = i >= nodes ? -1 : (from_path ? path[i] : i);
  }
  if (p.sets_slot) p.accept_len[slot] = a;
  else p.row_accept[n] = a;
  if (p.ring_pending != nullptr) {  // a tree's records were moved into place: its nodes count
    const int32_t kept = path != nullptr ? checked.nodes : a, pending = p.row_pending[n];
    if (p.row_flush[n] != 0) p.ring_start[slot] = ring_record(p.row_start[n], pending, p.ring_records);
    p.ring_pending[slot] = (p.row_flush[n] != 0 ? 0 : pending) + kept;
  }
  if (p.round_parity != nullptr && p.row_parity[n] >= 0) p.round_parity[slot] = 1 - (p.row_parity[n] & 1);
  if (p.rounding_counter != nullptr) p.rounding_counter[slot] += 1;
}

void accept_cpu(const AcceptParams& p);

// docs/trees.md replay: the records of a round of token trees sit at the round's first record + token; the
// accepted path's nodes become the next pending records, in path order (record first + i <- first +
// path[i]; path[i] >= i, so a copy in i order reads no record it wrote). One (row, layer) a call, its
// elements e0, e0 + stride, ... of a record's k, g and u; the path as accept_row checks it.
struct RingCompactParams {
  int32_t rows = 0, tokens = 0, layers = 0;
  const int32_t* row_slot = nullptr;      // [N]
  const int32_t* accept_index = nullptr;  // [N, T]
  const int32_t* parent = nullptr;        // [N, T] the round's checked tree
  const int32_t* row_pending = nullptr;   // [N]
  const int32_t* row_start = nullptr;     // [N]
  RingLayout ring;
  StateView ring_kg, ring_u;
};

template <class IoT>
KDA_HD void compact_ring_records(const RingCompactParams& p, int32_t n, int32_t layer, int64_t e0, int64_t stride) {
  const int32_t slot = p.row_slot[n];
  if (slot < 0) return;
  const int32_t* path = p.accept_index + int64_t(n) * p.tokens;
  const TreePath checked = checked_path(path, p.parent + int64_t(n) * p.tokens, p.tokens, n, nullptr, false);
  if (checked.root_only) return;  // token 0 alone: already in place
  char* kg_base = layer_base(p.ring_kg, layer);
  char* u_base = layer_base(p.ring_u, layer);
  if (kg_base == nullptr || u_base == nullptr) return;  // the verify recorded the bad entry
  IoT* kg = reinterpret_cast<IoT*>(state_row(kg_base, p.ring_kg, slot));
  float* u = reinterpret_cast<float*>(state_row(u_base, p.ring_u, slot));
  const RingLayout& r = p.ring;
  const int64_t k_elems = int64_t(r.heads) * r.head_k, g_elems = int64_t(r.value_heads) * r.head_k,
                u_elems = int64_t(r.value_heads) * r.head_v;
  const int32_t first = p.row_pending[n];
  for (int64_t e = e0; e < k_elems + g_elems + u_elems; e += stride) {
    for (int32_t i = 0; i < checked.nodes; ++i) {
      if (path[i] == i) continue;
      const int32_t to = ring_record(p.row_start[n], first + i, r.records);
      const int32_t from = ring_record(p.row_start[n], first + path[i], r.records);
      if (e < k_elems) kg[r.k_offset(to, 0) + e] = kg[r.k_offset(from, 0) + e];
      else if (e < k_elems + g_elems) kg[r.g_offset(to, 0) + e - k_elems] = kg[r.g_offset(from, 0) + e - k_elems];
      else u[r.u_offset(to, 0) + e - k_elems - g_elems] = u[r.u_offset(from, 0) + e - k_elems - g_elems];
    }
  }
}

void compact_ring_cpu(const RingCompactParams& p, DType io_dtype);

}  // namespace kdagraph

#if defined(KDAGRAPH_WITH_CUDA) || defined(KDAGRAPH_SIMT)  // SIMT: simt/ runs the launchers on the CPU
#include <cuda_runtime_api.h>

#include "kernels/launch.h"

namespace kdagraph {
cudaError_t launch_accept(const AcceptParams& p, Launch on);
cudaError_t launch_compact_ring(const RingCompactParams& p, DType io_dtype, Launch on);
}  // namespace kdagraph
#endif

namespace kdagraph {
struct AcceptOp {
  using Params = AcceptParams;
  static constexpr const char* kName = "accept";
  static void cpu(const Params& p) { accept_cpu(p); }
#if defined(KDAGRAPH_WITH_CUDA) || defined(KDAGRAPH_SIMT)
  static cudaError_t cuda(const Params& p, Launch on) { return launch_accept(p, on); }
#endif
  static std::string shape(const Params& p) { return "rows=" + std::to_string(p.rows) + " T=" + std::to_string(p.tokens); }
};

// The ring's compaction with its io dtype, as an operation of the backend seam.
struct CompactRingParams {
  RingCompactParams ring;
  DType io_dtype = DType::f32;
};
struct CompactRingOp {
  using Params = CompactRingParams;
  static constexpr const char* kName = "compact_ring";
  static void cpu(const Params& p) { compact_ring_cpu(p.ring, p.io_dtype); }
#if defined(KDAGRAPH_WITH_CUDA) || defined(KDAGRAPH_SIMT)
  static cudaError_t cuda(const Params& p, Launch on) { return launch_compact_ring(p.ring, p.io_dtype, on); }
#endif
  static std::string shape(const Params& p) {
    return "rows=" + std::to_string(p.ring.rows) + " T=" + std::to_string(p.ring.tokens) +
           " L=" + std::to_string(p.ring.layers);
  }
};
}  // namespace kdagraph
