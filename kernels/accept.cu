// SPEC §3 accept on the device: one thread per batch row runs accept_row, the CPU's own function.
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

}  // namespace

cudaError_t launch_accept(const AcceptParams& p, Launch on) {
  require_in_range("launch_accept", "rows", p.rows, 0, INT32_MAX);
  require_in_range("launch_accept", "tokens", p.tokens, 1, INT32_MAX);
  if (p.rows == 0) return cudaSuccess;
  const unsigned blocks = unsigned((p.rows + kAcceptThreads - 1) / kAcceptThreads);
  return launch_kernel(accept_kernel, blocks, kAcceptThreads, on, p);
}

}  // namespace kdagraph
