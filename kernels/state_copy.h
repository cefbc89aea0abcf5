// docs/modes.md: the two state copies of the modes, one operation with two callers.
//   commit (two-phase):  for each batch row n with row_accept[n] = a >= 1,
//                        pool[l][row_slot[n]] = scratch[l][slot * S + a - 1] for every layer l.
//   materialize:         for each listed slot with accept_len[slot] = a >= 1, the same copy; then
//                        accept_len[slot] = 0, and round_parity and replay's ring cursor 0 where
//                        kept (a second step, after every layer's copy, fold and window move has
//                        read them).
#pragma once

#include <cstdint>
#include <string>

#include "kdagraph/error.hpp"
#include "kdagraph/types.hpp"
#include "kernels/device_error.h"
#include "kernels/layout.h"

namespace kdagraph {

struct StateCopyParams {
  int32_t count = 0;                  // entries: batch rows (commit) or listed slots (materialize)
  const int32_t* slot_of = nullptr;   // [count] slot of each entry; negative entries are skipped
  const int32_t* accept_of = nullptr; // [count] accept length per entry (commit); nullptr: accept_len[slot]
  int32_t* accept_len = nullptr;      // [P]
  int32_t* round_parity = nullptr;    // [P] materialize resets it too; null where the round keeps none
  int32_t* ring_pending = nullptr;    // [P] replay: materialize resets them too
  int32_t* ring_start = nullptr;      // [P]
  int32_t slots = 0;                  // P
  int32_t scratch_steps = 0;          // S
  int64_t row_elems = 0;              // HV * V * K: what one layer of one slot holds
  StateView pool;                     // rows are slots
  StateView scratch;                  // rows are slot * S + t, same dtype as the pool
  DeviceErrorWord* errors = nullptr;
  unsigned long long* bytes_moved = nullptr;  // SlotStorage::bytes_moved
};

// The slot of entry e, or -1: skip it. A commit's entries are the round's row slots (already checked by
// the index build); a materialize list is checked here (checked_slot: out of range or repeated).
KDA_HD int32_t copy_entry_slot(const StateCopyParams& p, int32_t e, bool report) {
  if (p.accept_of == nullptr) return checked_slot(p.slot_of, e, p.slots, p.errors, report);
  const int32_t slot = p.slot_of[e];
  return slot >= 0 && slot < p.slots ? slot : -1;
}

// Accept length of entry e (slot `slot`), clamped to [0, S]; 0 means nothing to copy.
KDA_HD int32_t copy_source_accept(const StateCopyParams& p, int32_t e, int32_t slot, bool report) {
  return checked_accept(p.accept_of ? p.accept_of[e] : p.accept_len[slot], 0, p.scratch_steps, e, p.errors, report);
}

// Where entry e copies from and to in layer `layer`, or {nullptr, nullptr} when there is nothing to copy:
// a skipped entry, accept length 0, or an invalid layer base. A clamped accept length is recorded when
// `report_accept`, an invalid layer base when `report_layer` (so each is recorded once, not per thread).
struct CopyRows {
  const char* src;
  char* dst;
};
KDA_HD CopyRows copy_rows(const StateCopyParams& p, int32_t e, int32_t layer, bool report_accept,
                          bool report_layer) {
  const int32_t slot = copy_entry_slot(p, e, report_accept);
  if (slot < 0) return CopyRows{nullptr, nullptr};
  const int32_t a = copy_source_accept(p, e, slot, report_accept);
  if (a <= 0) return CopyRows{nullptr, nullptr};
  char* pool = layer_base(p.pool, layer);
  char* scratch = layer_base(p.scratch, layer);
  if (pool == nullptr || scratch == nullptr) {
    if (report_layer) record_device_error(p.errors, DeviceErrorCode::layer_base_invalid, e, layer);
    return CopyRows{nullptr, nullptr};
  }
  return CopyRows{state_row(scratch, p.scratch, scratch_row(slot, a - 1, p.scratch_steps)),
                  state_row(pool, p.pool, slot)};
}

// Materialize's last step for entry e: the listed slot, if in range, back to the form a prefill leaves
// (accept_len 0, parity 0, an empty ring). A slot listed twice is reset by its first entry only (checked_slot; the
// copy already recorded it): two threads writing one word is a data race even when they write the same
// value (ThreadSanitizer reported it on the SIMT executor).
KDA_HD void reset_slot(const StateCopyParams& p, int32_t e) {
  const int32_t slot = checked_slot(p.slot_of, e, p.slots, p.errors, false);
  if (slot < 0) return;
  p.accept_len[slot] = 0;
  if (p.round_parity != nullptr) p.round_parity[slot] = 0;
  if (p.ring_pending != nullptr) {
    p.ring_pending[slot] = 0;
    p.ring_start[slot] = 0;
  }
}

void copy_accepted_states_cpu(const StateCopyParams& p);
// reset_slot for every entry.
void reset_accept_len_cpu(const StateCopyParams& p);

}  // namespace kdagraph

#if defined(KDAGRAPH_WITH_CUDA) || defined(KDAGRAPH_SIMT)  // SIMT: simt/ runs the launchers on the CPU
#include <cuda_runtime_api.h>

#include "kernels/launch.h"

namespace kdagraph {
// One launch for all layers. Allocates nothing, never synchronizes.
cudaError_t launch_copy_accepted_states(const StateCopyParams& p, Launch on);
cudaError_t launch_reset_accept_len(const StateCopyParams& p, Launch on);
}  // namespace kdagraph
#endif

namespace kdagraph {
struct CopyAcceptedStatesOp {
  using Params = StateCopyParams;
  static constexpr const char* kName = "copy_accepted_states";
  static void cpu(const Params& p) { copy_accepted_states_cpu(p); }
#if defined(KDAGRAPH_WITH_CUDA) || defined(KDAGRAPH_SIMT)
  static cudaError_t cuda(const Params& p, Launch on) { return launch_copy_accepted_states(p, on); }
#endif
  static std::string shape(const Params& p) {
    return "count=" + std::to_string(p.count) + " layers=" + std::to_string(p.pool.layers);
  }
};
struct ResetAcceptLenOp {
  using Params = StateCopyParams;
  static constexpr const char* kName = "reset_accept_len";
  static void cpu(const Params& p) { reset_accept_len_cpu(p); }
#if defined(KDAGRAPH_WITH_CUDA) || defined(KDAGRAPH_SIMT)
  static cudaError_t cuda(const Params& p, Launch on) { return launch_reset_accept_len(p, on); }
#endif
  static std::string shape(const Params& p) { return "count=" + std::to_string(p.count); }
};
}  // namespace kdagraph
