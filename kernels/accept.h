// SPEC §3: accepting a round. The sampler's accept lengths arrive in device memory, one per batch row.
//   fused-accept: accept_len[row_slot[n]] = a      two-phase: row_accept[n] = a (commit reads it)
// (which of the two: ModePolicy::accept_sets_slot)
// A length outside [1, T] is clamped into it and recorded in the device error word. A token tree's
// accepted path (SPEC §12) gives the length instead: its last node + 1 (kernels/tree.h).
#pragma once

#include <cstdint>
#include <string>

#include "kdagraph/error.hpp"
#include "kdagraph/types.hpp"
#include "kernels/device_error.h"
#include "kernels/tree.h"

namespace kdagraph {

struct AcceptParams {
  int32_t rows = 0;                  // N
  int32_t tokens = 0;                // T
  bool sets_slot = true;             // ModePolicy::accept_sets_slot
  const int32_t* row_slot = nullptr; // [N] from RoundIndices, -1 padded
  const int32_t* accepted = nullptr; // [N] the sampler's accept lengths, or
  const int32_t* accept_index = nullptr;  // [N, T] its accepted paths (SPEC §12), with
  const int32_t* parent = nullptr;        // [N, T] the round's checked tree (RoundIndices::parent)
  int32_t* accept_len = nullptr;     // [P] fused-accept
  int32_t* row_accept = nullptr;     // [N] two-phase
  // Where the round keeps a parity (replay's token cache, the conv state's halves): the round wrote the
  // buffers of parity 1 - row_parity[n], and they become the slot's (the next verify reads them).
  const int32_t* row_parity = nullptr;  // [N] from RoundIndices
  int32_t* round_parity = nullptr;      // [P]
  // SPEC §12, where a round of trees keeps each slot's accepted path (SlotStorage::accept_path): [P, T],
  // the row's checked path (or, from a length a, 0 .. a - 1), -1 after it.
  int32_t* slot_path = nullptr;
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
  if (p.round_parity != nullptr && p.row_parity[n] >= 0) p.round_parity[slot] = 1 - (p.row_parity[n] & 1);
}

void accept_cpu(const AcceptParams& p);

}  // namespace kdagraph

#if defined(KDAGRAPH_WITH_CUDA) || defined(KDAGRAPH_SIMT)  // SIMT: tests/simt/ runs the launchers on the CPU
#include <cuda_runtime_api.h>

#include "kernels/launch.h"

namespace kdagraph {
cudaError_t launch_accept(const AcceptParams& p, Launch on);
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
}  // namespace kdagraph
