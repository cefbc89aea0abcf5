// SPEC §4 under the SIMT executor. kernels/indices.cu applies BuildIndices with Thrust's CUDA system,
// which a host compiler cannot build; the seam there is the launcher, so this one launches the same
// functor as a kernel of one thread per row (what Thrust's for_each_n does on the device).
#include "kernels/indices.h"
#include "kernels/launch.cuh"

namespace kdagraph {
namespace {

constexpr int kIndexThreads = 128;

__global__ void build_indices_kernel(const IndexBuildParams p) {
  const int32_t n = int32_t(blockIdx.x) * kIndexThreads + int32_t(threadIdx.x);
  if (n < p.rows) BuildIndices{p}(n);
}

}  // namespace

cudaError_t launch_build_indices(const IndexBuildParams& p, cudaStream_t stream) {
  if (p.rows <= 0) return cudaSuccess;  // for_each_n over no rows launches nothing
  const unsigned blocks = unsigned((p.rows + kIndexThreads - 1) / kIndexThreads);
  return launch_kernel(build_indices_kernel, blocks, kIndexThreads, stream, p);
}

}  // namespace kdagraph
