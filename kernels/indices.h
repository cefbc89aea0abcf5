// docs/indices.md: the fused-accept indices, built once per forward and shared by every layer of it.
//
// The builder is one functor over the rows, applied with Thrust's host policy on the CPU
// (indices_cpu.cpp) and as a kernel of one thread per row on the device (indices.cu), which launches
// through the launch seam like every kernel of the round. It allocates nothing and returns nothing to the
// host, so it is capture-safe.
//
// [TAG_INDEX_LAYOUT] RoundIndices (include/kdagraph/ops.hpp) is what verify (seed_*, write_row), accept
// (row_slot, row_accept) and commit (row_slot, row_accept) read; change them together.
#pragma once

#include <cstdint>
#include <string>

#include "kdagraph/error.hpp"
#include "kernels/device_error.h"
#include "kernels/kda_math.h"
#include "kernels/layout.h"
#include "kernels/tree.h"

namespace kdagraph {

struct IndexBuildParams {
  const int32_t* slots = nullptr;       // [N] requested slot per row, -1 marks padding
  const int32_t* n_real = nullptr;      // [1] rows >= n_real are padding whatever `slots` holds
  const int32_t* accept_len = nullptr;  // [P]
  int32_t pool_slots = 0;               // P
  int32_t scratch_steps = 0;            // S
  int32_t tokens = 0;                   // T
  int32_t rows = 0;                     // N
  // What the mode's rows address (docs/modes.md): seeds in scratch (fused accept), per-token write rows
  // (fused accept, two-phase), or, in replay, seeds in the pool (the checkpoint) with the slot's ring
  // cursor gathered and the round's flush decided.
  ModePolicy policy = mode_policy(Mode::fused_accept);
  // Replay: [P] each slot's pending records and their first record (SlotStorage), and the ring.
  const int32_t* ring_pending = nullptr;
  const int32_t* ring_start = nullptr;
  ReplayRing ring;
  // [P] where the round keeps a parity (needs_round_parity), else null: gathered into row_parity.
  const int32_t* round_parity = nullptr;
  // [N, T] the batch's token tree (docs/trees.md), or null: out.parent, where present, gets chains.
  const int32_t* parent = nullptr;
  DeviceErrorWord* errors = nullptr;
  RoundIndices out;  // the ring's arrays and row_parity are written when present
};

struct RowSeed {
  int32_t slot;    // -1: padded (or rejected) row
  int32_t accept;  // gathered accept length, clamped to [0, S] ([0, T] in replay); -1 for padded rows
};

// Decides what row n is. With `checked` (the index build): bad slots (out of range, repeated) make the
// row padding and an accept length outside [0, S] (replay: [0, T], the tokens a round appends) is
// clamped, both recorded. Without (a verify's prediction before its grid dependency wait, docs/graphs.md): no
// repeated-slot scan and nothing recorded; the index arrays the build wrote correct it after the wait.
KDA_HD RowSeed resolve_row(const IndexBuildParams& p, int32_t n, bool checked) {
  int32_t n_real = *p.n_real;
  n_real = n_real < 0 ? 0 : (n_real > p.rows ? p.rows : n_real);
  int32_t slot = -1;
  if (n < n_real)
    slot = checked ? checked_slot(p.slots, n, p.pool_slots, p.errors, true)
                   : (p.slots[n] >= 0 && p.slots[n] < p.pool_slots ? p.slots[n] : -1);
  // Padded rows gather too, from slot 0: always in range, so the gather needs no branch.
  int32_t accept = p.accept_len[slot >= 0 ? slot : 0];
  const int32_t max_accept = p.policy.ring ? p.tokens : p.scratch_steps;
  if (slot >= 0) accept = checked_accept(accept, 0, max_accept, n, p.errors, checked);
  return RowSeed{slot, slot >= 0 ? accept : -1};
}

// Where a resolved row's state and inputs come from (docs/modes.md, docs/indices.md): every field -1 for a padded
// row. The build writes them; a verify predicting its seed calls the same function.
struct RowIndices {
  int32_t slot = -1, accept = -1;
  int32_t seed_pool = -1, seed_scratch = -1;  // the seed: pool row or scratch row
  int32_t parity = -1;                        // the slot's round parity, where the round keeps one
  int32_t ring_pending = -1, ring_start = -1; // replay: the slot's ring cursor
  int32_t ring_flush = -1;                    // replay: 1 when this round flushes
};

// With `checked` (the index build) a ring cursor outside its range (ring_pending beyond R - T, the most
// a round can find without overrunning the ring; ring_start outside [0, R)) is clamped and recorded.
KDA_HD RowIndices row_indices(const IndexBuildParams& p, const RowSeed& r, bool checked = false) {
  RowIndices i;
  if (r.slot < 0) return i;
  i.slot = r.slot;
  i.accept = r.accept;
  const bool from_scratch = p.policy.seed_from_scratch && r.accept > 0;
  i.seed_pool = from_scratch ? -1 : r.slot;
  i.seed_scratch = from_scratch ? seed_scratch_row(r.slot, r.accept, p.scratch_steps) : -1;
  if (p.round_parity != nullptr) i.parity = p.round_parity[r.slot] & 1;
  if (!p.policy.ring) return i;
  const int32_t R = p.ring.records;
  i.ring_pending = checked_ring(p.ring_pending[r.slot], R - p.tokens, r.slot, p.errors, checked);
  i.ring_start = checked_ring(p.ring_start[r.slot], R - 1, r.slot, p.errors, checked);
  i.ring_flush = ring_flushes(i.ring_pending, p.tokens, R, p.ring.flush_min) ? 1 : 0;
  return i;
}

// One call per row: the row is resolved once (its repeated-slot scan is O(n)), then its T write rows.
struct BuildIndices {
  IndexBuildParams p;

  KDA_HD void operator()(int32_t n) const {
    const RowIndices i = row_indices(p, resolve_row(p, n, true), true);
    p.out.row_slot[n] = i.slot;
    p.out.seed_accept[n] = i.accept;
    p.out.seed_pool[n] = i.seed_pool;
    p.out.seed_scratch[n] = i.seed_scratch;
    int32_t* write_row = p.out.write_row + int64_t(n) * p.tokens;
    for (int32_t t = 0; t < p.tokens; ++t)
      write_row[t] = i.slot >= 0 && p.policy.per_token_scratch ? scratch_row(i.slot, t, p.scratch_steps) : -1;
    if (p.out.parent != nullptr) {  // the tree, checked once for every layer (a padded row's is never read)
      const int32_t* parent = i.slot >= 0 && p.parent != nullptr ? p.parent + int64_t(n) * p.tokens : nullptr;
      for (int32_t t = 0; t < p.tokens; ++t)
        p.out.parent[int64_t(n) * p.tokens + t] = checked_parent(parent, t, n, p.errors, true);
    }
    if (p.out.row_parity != nullptr) p.out.row_parity[n] = i.parity;
    if (p.out.ring_pending != nullptr) {
      p.out.ring_pending[n] = i.ring_pending;
      p.out.ring_start[n] = i.ring_start;
      p.out.ring_flush[n] = i.ring_flush;
    }
  }
};

// SGLang's index pair for fused accept (docs/indices.md, docs/python.md), with no storage behind it: per row n, the
// scratch rows write_row[n][t] = slot * S + t and accepted[n] = accept_len[max(slot, 0)], the slot's
// accept length as the pool holds it. A padded row (slot -1, or a bad slot, see checked_slot) has every
// write row -1 and gathers from slot 0, always in range.
struct SlotIndexParams {
  const int32_t* slots = nullptr;       // [N]
  const int32_t* accept_len = nullptr;  // [P]
  int32_t pool_slots = 0;               // P
  int32_t scratch_steps = 0;            // S
  int32_t tokens = 0;                   // T <= S
  int32_t rows = 0;                     // N
  int32_t* write_row = nullptr;         // [N, T]
  int32_t* accepted = nullptr;          // [N]
  DeviceErrorWord* errors = nullptr;
};

struct BuildSlotIndices {
  SlotIndexParams p;

  KDA_HD void operator()(int32_t n) const {
    const int32_t slot = checked_slot(p.slots, n, p.pool_slots, p.errors, true);
    p.accepted[n] = p.accept_len[slot >= 0 ? slot : 0];
    int32_t* write_row = p.write_row + int64_t(n) * p.tokens;
    for (int32_t t = 0; t < p.tokens; ++t) write_row[t] = slot >= 0 ? scratch_row(slot, t, p.scratch_steps) : -1;
  }
};

// Host backend. Stream-ordered trivially: runs now.
void build_indices_cpu(const IndexBuildParams& p);
void build_slot_indices_cpu(const SlotIndexParams& p);

}  // namespace kdagraph

#if defined(KDAGRAPH_WITH_CUDA) || defined(KDAGRAPH_SIMT)  // SIMT: simt/ runs the launchers on the CPU
#include <cuda_runtime_api.h>

#include "kernels/launch.h"

namespace kdagraph {
// Enqueues the build as `on` says; allocates nothing, never synchronizes.
cudaError_t launch_build_indices(const IndexBuildParams& p, Launch on);
cudaError_t launch_build_slot_indices(const SlotIndexParams& p, Launch on);
}  // namespace kdagraph
#endif

namespace kdagraph {
// The index build as an operation of the backend seam (graph/dispatch.h).
struct BuildIndicesOp {
  using Params = IndexBuildParams;
  static constexpr const char* kName = "build_indices";
  static void cpu(const Params& p) { build_indices_cpu(p); }
#if defined(KDAGRAPH_WITH_CUDA) || defined(KDAGRAPH_SIMT)
  static cudaError_t cuda(const Params& p, Launch on) { return launch_build_indices(p, on); }
#endif
  static std::string shape(const Params& p) {
    return "rows=" + std::to_string(p.rows) + " T=" + std::to_string(p.tokens) + " P=" + std::to_string(p.pool_slots);
  }
};
struct BuildSlotIndicesOp {
  using Params = SlotIndexParams;
  static constexpr const char* kName = "build_slot_indices";
  static void cpu(const Params& p) { build_slot_indices_cpu(p); }
#if defined(KDAGRAPH_WITH_CUDA) || defined(KDAGRAPH_SIMT)
  static cudaError_t cuda(const Params& p, Launch on) { return launch_build_slot_indices(p, on); }
#endif
  static std::string shape(const Params& p) {
    return "rows=" + std::to_string(p.rows) + " T=" + std::to_string(p.tokens) + " P=" + std::to_string(p.pool_slots);
  }
};
}  // namespace kdagraph
