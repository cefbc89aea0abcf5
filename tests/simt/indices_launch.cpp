// SPEC §4 under the SIMT executor. kernels/indices.cu applies BuildIndices with Thrust's CUDA system,
// which a host compiler cannot build; the seam there is the launcher, so these launch the same
// functors as kernels of one thread per row (what Thrust's for_each_n does on the device).
#include "kernels/indices.h"
#include "kernels/launch.cuh"

namespace kdagraph {
namespace {

constexpr int kIndexThreads = 128;

template <class Params, class Functor>
__global__ void for_each_row_kernel(const Params p) {
  const int32_t n = int32_t(blockIdx.x) * kIndexThreads + int32_t(threadIdx.x);
  if (n < p.rows) Functor{p}(n);
}

template <class Params, class Functor>
cudaError_t launch_rows(const Params& p, cudaStream_t stream) {
  if (p.rows <= 0) return cudaSuccess;  // for_each_n over no rows launches nothing
  const unsigned blocks = unsigned((p.rows + kIndexThreads - 1) / kIndexThreads);
  return launch_kernel(for_each_row_kernel<Params, Functor>, blocks, kIndexThreads, stream, p);
}

}  // namespace

cudaError_t launch_build_indices(const IndexBuildParams& p, cudaStream_t stream) {
  return launch_rows<IndexBuildParams, BuildIndices>(p, stream);
}

cudaError_t launch_build_slot_indices(const SlotIndexParams& p, cudaStream_t stream) {
  return launch_rows<SlotIndexParams, BuildSlotIndices>(p, stream);
}

}  // namespace kdagraph
