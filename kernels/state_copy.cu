// docs/modes.md commit and materialize on the device. One launch copies every (entry, layer) pair: the grid
// runs over (entry, layer, chunk of the slot's HV*V*K state), each block moving one chunk in 16-byte
// words (views keep every row 16-byte aligned, docs/ops.md). Entries are chosen by copy_rows, the CPU's
// function.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "kdagraph/error.hpp"
#include "kernels/launch.cuh"
#include "kernels/launch_checks.h"
#include "kernels/state_copy.h"

namespace kdagraph {
namespace {

constexpr int kCopyThreads = 256;
constexpr int kWordsPerThread = 4;  // loads issued before the stores, for memory-level parallelism
constexpr int kWordsPerChunk = kCopyThreads * kWordsPerThread;
// Grid-stride beyond this many blocks: plenty to fill any device, and far from the grid limit.
constexpr int64_t kMaxCopyBlocks = int64_t(1) << 20;

// What one launch covers; computed once on the host.
struct CopyGrid {
  int64_t words_per_slot = 0;  // one slot, one layer, in 16-byte words
  int64_t chunks_per_slot = 0;
  int64_t units = 0;  // entries * layers * chunks
};

__global__ void __launch_bounds__(kCopyThreads)
    copy_accepted_states_kernel(const StateCopyParams p, const CopyGrid grid) {
  grid_dependency_wait();
  trigger_dependent_launch();
  // Where a unit copies from and to, resolved by one thread and shared: a materialize list is checked
  // for repeats by a scan of the entries before it, once per block and unit rather than per thread.
  auto& resolved = shared_object<CopyRows>();
  for (int64_t u = blockIdx.x; u < grid.units; u += gridDim.x) {
    const int64_t chunk = u % grid.chunks_per_slot;
    const int64_t entry_layer = u / grid.chunks_per_slot;
    const int32_t layer = int32_t(entry_layer % p.pool.layers);
    const int32_t e = int32_t(entry_layer / p.pool.layers);
    // One report per entry (accept length) and per entry and layer (layer base), like the CPU.
    if (threadIdx.x == 0) resolved = copy_rows(p, e, layer, chunk == 0 && layer == 0, chunk == 0);
    __syncthreads();
    const CopyRows rows = resolved;
    __syncthreads();  // every thread has read it before thread 0 resolves the next unit
    if (rows.dst == nullptr) continue;
    if (threadIdx.x == 0) {  // the chunk's words, read and written
      const int64_t words = grid.words_per_slot - chunk * kWordsPerChunk;
      count_bytes(p.bytes_moved, 2 * 16 * (words < kWordsPerChunk ? words : kWordsPerChunk));
    }
    const auto* src = reinterpret_cast<const uint4*>(rows.src);
    auto* dst = reinterpret_cast<uint4*>(rows.dst);
    const int64_t first = chunk * kWordsPerChunk + threadIdx.x;
    uint4 w[kWordsPerThread];
#pragma unroll
    for (int i = 0; i < kWordsPerThread; ++i) {
      const int64_t at = first + int64_t(i) * kCopyThreads;
      if (at < grid.words_per_slot) w[i] = src[at];
    }
#pragma unroll
    for (int i = 0; i < kWordsPerThread; ++i) {
      const int64_t at = first + int64_t(i) * kCopyThreads;
      if (at < grid.words_per_slot) dst[at] = w[i];
    }
  }
}

constexpr int kResetThreads = 128;

__global__ void __launch_bounds__(kResetThreads) reset_accept_len_kernel(const StateCopyParams p) {
  grid_dependency_wait();
  trigger_dependent_launch();
  const int32_t e = int32_t(blockIdx.x) * kResetThreads + int32_t(threadIdx.x);
  if (e < p.count) reset_slot(p, e);
}

}  // namespace

cudaError_t launch_copy_accepted_states(const StateCopyParams& p, Launch on) {
  const char* where = "launch_copy_accepted_states";
  require_in_range(where, "count", p.count, 0, INT32_MAX);
  require(p.scratch.dtype == p.pool.dtype, where, "scratch.dtype", "differs from pool.dtype");
  const int64_t slot_bytes = p.row_elems * elem_bytes(p.pool.dtype);
  require(slot_bytes % 16 == 0, where, "row_elems", [&] {
    return "= " + std::to_string(p.row_elems) + ": a slot's state must be a whole number of 16-byte words";
  });
  detail::require_state_view(where, "pool", p.pool, p.pool.dtype, p.row_elems);
  detail::require_state_view(where, "scratch", p.scratch, p.pool.dtype, p.row_elems);
  CopyGrid grid;
  grid.words_per_slot = slot_bytes / 16;
  grid.chunks_per_slot = (grid.words_per_slot + kWordsPerChunk - 1) / kWordsPerChunk;
  grid.units = int64_t(p.count) * p.pool.layers * grid.chunks_per_slot;
  if (grid.units == 0) return cudaSuccess;
  const unsigned blocks = unsigned(std::min(grid.units, kMaxCopyBlocks));
  return launch_kernel(copy_accepted_states_kernel, blocks, kCopyThreads, on, p, grid);
}

cudaError_t launch_reset_accept_len(const StateCopyParams& p, Launch on) {
  require_in_range("launch_reset_accept_len", "count", p.count, 0, INT32_MAX);
  if (p.count == 0) return cudaSuccess;
  const unsigned blocks = unsigned((p.count + kResetThreads - 1) / kResetThreads);
  return launch_kernel(reset_accept_len_kernel, blocks, kResetThreads, on, p);
}

}  // namespace kdagraph
