// SPEC §3: the two state copies of the modes, one operation with two callers.
//   commit (two-phase):  for each batch row n with row_accept[n] = a >= 1,
//                        pool[l][row_slot[n]] = scratch[l][slot * S + a - 1] for every layer l.
//   materialize:         for each listed slot with accept_len[slot] = a >= 1, the same copy; then
//                        accept_len[slot] = 0 (a second step, after every layer's copy has read it).
#pragma once

#include <cstdint>

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
  StateGeometry geometry;
  DType state_dtype = DType::f32;
  void* pool = nullptr;
  const void* scratch = nullptr;
  DeviceErrorWord* errors = nullptr;
};

// Accept length of entry e, clamped to [0, S]; 0 means nothing to copy. -1: skip the entry.
KDA_HD int32_t copy_source_accept(const StateCopyParams& p, int32_t e, bool report) {
  const int32_t slot = p.slot_of[e];
  if (slot < 0 || slot >= p.geometry.slots) return -1;
  const int32_t a = p.accept_of ? p.accept_of[e] : p.accept_len[slot];
  if (a < 0 || a > p.geometry.scratch_steps) {
    if (report) record_device_error(p.errors, DeviceErrorCode::accept_out_of_range, e, a);
    return a < 0 ? 0 : p.geometry.scratch_steps;
  }
  return a;
}

void copy_accepted_states_cpu(const StateCopyParams& p);
// Sets accept_len[slot_of[e]] = 0 for every listed in-range slot.
void reset_accept_len_cpu(const StateCopyParams& p);

}  // namespace kdagraph

#if defined(KDAGRAPH_WITH_CUDA)
#include <cuda_runtime_api.h>
namespace kdagraph {
// One launch for all layers. Allocates nothing, never synchronizes.
cudaError_t launch_copy_accepted_states(const StateCopyParams& p, cudaStream_t stream);
cudaError_t launch_reset_accept_len(const StateCopyParams& p, cudaStream_t stream);
}  // namespace kdagraph
#endif
