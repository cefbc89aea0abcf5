// docs/indices.md on the device: the same BuildIndices and BuildSlotIndices functors as indices_cpu.cpp, one
// thread per row. A plain kernel rather than Thrust's for_each_n, so that it launches through the launch
// seam as every kernel of the round does (programmatic dependent launch, [TAG_PDL]).
#include <cuda_runtime.h>

#include "kernels/indices.h"
#include "kernels/launch.cuh"

namespace kdagraph {
namespace {

constexpr int kIndexThreads = 128;

// The batch and the accept lengths it reads may come from the kernels just before it (the sampler and
// the accept of the previous round): nothing is read above the wait.
template <class Params, class Functor>
__global__ void __launch_bounds__(kIndexThreads) for_each_row_kernel(const Params p) {
  grid_dependency_wait();
  trigger_dependent_launch();
  const int32_t n = int32_t(blockIdx.x) * kIndexThreads + int32_t(threadIdx.x);
  if (n < p.rows) Functor{p}(n);
}

template <class Params, class Functor>
cudaError_t launch_rows(const Params& p, Launch on) {
  if (p.rows <= 0) return cudaSuccess;
  const unsigned blocks = unsigned((p.rows + kIndexThreads - 1) / kIndexThreads);
  return launch_kernel(for_each_row_kernel<Params, Functor>, blocks, kIndexThreads, on, p);
}

}  // namespace

cudaError_t launch_build_indices(const IndexBuildParams& p, Launch on) {
  return launch_rows<IndexBuildParams, BuildIndices>(p, on);
}

cudaError_t launch_build_slot_indices(const SlotIndexParams& p, Launch on) {
  return launch_rows<SlotIndexParams, BuildSlotIndices>(p, on);
}

}  // namespace kdagraph
