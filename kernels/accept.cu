// docs/modes.md accept on the device: one thread per batch row runs accept_row, the CPU's own function; a
// replay round of token trees first moves its accepted records into place, a block per (row, layer).
#include "kernels/accept.h"

#include "kdagraph/error.hpp"
#include "kernels/launch.cuh"

namespace kdagraph {
namespace {

constexpr int kAcceptThreads = 128;

// The sampler's lengths come from the kernel just before it: nothing is read above the wait.
__global__ void __launch_bounds__(kAcceptThreads) accept_kernel(const AcceptParams p) {
  grid_dependency_wait();
  trigger_dependent_launch();
  const int32_t n = int32_t(blockIdx.x) * kAcceptThreads + int32_t(threadIdx.x);
  if (n < p.rows) accept_row(p, n);
}

constexpr int kCompactThreads = 256;

// The accepted paths come from the sampler's kernel before it: nothing is read above the wait.
template <class IoT>
__global__ void __launch_bounds__(kCompactThreads) compact_ring_kernel(const RingCompactParams p) {
  grid_dependency_wait();
  trigger_dependent_launch();
  compact_ring_records<IoT>(p, int32_t(blockIdx.x), int32_t(blockIdx.y), threadIdx.x, kCompactThreads);
}

}  // namespace

cudaError_t launch_compact_ring(const RingCompactParams& p, DType io_dtype, Launch on) {
  require_in_range("launch_compact_ring", "rows", p.rows, 0, INT32_MAX);
  require_in_range("launch_compact_ring", "layers", p.layers, 1, 65535);
  if (p.rows == 0) return cudaSuccess;
  const dim3 grid(unsigned(p.rows), unsigned(p.layers));
  // Records move as bits: one 2-byte instance serves bf16 and f16.
  return io_dtype == DType::f32 ? launch_kernel(compact_ring_kernel<float>, grid, kCompactThreads, on, p)
                                : launch_kernel(compact_ring_kernel<math::bf16>, grid, kCompactThreads, on, p);
}

cudaError_t launch_accept(const AcceptParams& p, Launch on) {
  require_in_range("launch_accept", "rows", p.rows, 0, INT32_MAX);
  require_in_range("launch_accept", "tokens", p.tokens, 1, INT32_MAX);
  if (p.rows == 0) return cudaSuccess;
  const unsigned blocks = unsigned((p.rows + kAcceptThreads - 1) / kAcceptThreads);
  return launch_kernel(accept_kernel, blocks, kAcceptThreads, on, p);
}

}  // namespace kdagraph
