// SPEC §3 commit and materialize on the device. One launch copies every (entry, layer) pair: the grid
// runs over (entry, layer, chunk of the slot's HV*V*K state), each block moving one chunk in words of
// 16 bytes when the geometry allows it. Entries are chosen by copy_source_accept, the CPU's function.
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/launch.cuh"
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
  int64_t elem_bytes = 0;      // state dtype size
  int64_t words_per_slot = 0;  // one slot, one layer, in words
  int64_t chunks_per_slot = 0;
  int64_t units = 0;  // entries * layers * chunks
};

template <class Word>
__global__ void __launch_bounds__(kCopyThreads)
    copy_accepted_states_kernel(const StateCopyParams p, const CopyGrid grid) {
  for (int64_t u = blockIdx.x; u < grid.units; u += gridDim.x) {
    const int64_t chunk = u % grid.chunks_per_slot;
    const int64_t entry_layer = u / grid.chunks_per_slot;
    const int32_t layer = int32_t(entry_layer % p.geometry.layers);
    const int32_t e = int32_t(entry_layer / p.geometry.layers);
    // One report per entry, like the CPU, which reports from layer 0 only.
    const bool report = layer == 0 && chunk == 0 && threadIdx.x == 0;
    const int32_t a = copy_source_accept(p, e, report);
    if (a <= 0) continue;
    const int32_t slot = p.slot_of[e];
    const int32_t row = scratch_row(slot, a - 1, p.geometry.scratch_steps);
    auto* dst = reinterpret_cast<Word*>(static_cast<char*>(p.pool) +
                                        p.geometry.pool_offset(layer, slot, 0) * grid.elem_bytes);
    const auto* src = reinterpret_cast<const Word*>(
        static_cast<const char*>(p.scratch) + p.geometry.scratch_offset(layer, row, 0) * grid.elem_bytes);
    const int64_t first = chunk * kWordsPerChunk + threadIdx.x;
    Word w[kWordsPerThread];
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
  const int32_t e = int32_t(blockIdx.x) * kResetThreads + int32_t(threadIdx.x);
  if (e >= p.count) return;
  const int32_t slot = p.slot_of[e];
  if (slot >= 0 && slot < p.geometry.slots) p.accept_len[slot] = 0;
}

template <class Word>
cudaError_t launch_copy(const StateCopyParams& p, CopyGrid grid, int64_t slot_bytes, cudaStream_t stream) {
  grid.words_per_slot = slot_bytes / int64_t(sizeof(Word));
  grid.chunks_per_slot = (grid.words_per_slot + kWordsPerChunk - 1) / kWordsPerChunk;
  grid.units = int64_t(p.count) * p.geometry.layers * grid.chunks_per_slot;
  if (grid.units == 0) return cudaSuccess;
  const unsigned blocks = unsigned(std::min(grid.units, kMaxCopyBlocks));
  return launch_kernel(copy_accepted_states_kernel<Word>, blocks, kCopyThreads, stream, p, grid);
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

cudaError_t launch_copy_accepted_states(const StateCopyParams& p, cudaStream_t stream) {
  if (p.count < 0 || p.geometry.layers < 0 || p.geometry.slots < 0 || p.geometry.slot_elems() < 0)
    return cudaErrorInvalidValue;
  if (p.count == 0 || p.geometry.layers == 0 || p.geometry.slot_elems() == 0) return cudaSuccess;
  CopyGrid grid;
  grid.elem_bytes = int64_t(dtype_size(p.state_dtype));
  const int64_t slot_bytes = p.geometry.slot_elems() * grid.elem_bytes;
  // Every slot starts a whole number of slots past the base, so 16-byte words need only an aligned
  // base and a slot size that is a multiple of 16; otherwise 2-byte words, which every state dtype allows.
  if (aligned16(p.pool) && aligned16(p.scratch) && slot_bytes % 16 == 0)
    return launch_copy<uint4>(p, grid, slot_bytes, stream);
  return launch_copy<uint16_t>(p, grid, slot_bytes, stream);
}

cudaError_t launch_reset_accept_len(const StateCopyParams& p, cudaStream_t stream) {
  if (p.count < 0) return cudaErrorInvalidValue;
  if (p.count == 0) return cudaSuccess;
  const unsigned blocks = unsigned((p.count + kResetThreads - 1) / kResetThreads);
  return launch_kernel(reset_accept_len_kernel, blocks, kResetThreads, stream, p);
}

}  // namespace kdagraph
