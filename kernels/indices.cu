// SPEC §4 on the device: the same BuildIndices functor as indices_cpu.cpp, applied with Thrust's CUDA
// policy; par_nosync: no allocation, no synchronization, capture-safe.
//
// The project's default Thrust device system is the host (CPP), so that g++ sources compile; this is the
// CUDA translation unit, so its device system is CUDA, set before any Thrust header.
#undef THRUST_DEVICE_SYSTEM
#define THRUST_DEVICE_SYSTEM THRUST_DEVICE_SYSTEM_CUDA
#include <thrust/execution_policy.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/system/cuda/error.h>
#include <thrust/system_error.h>

#include "kernels/indices.h"

namespace kdagraph {

cudaError_t launch_build_indices(const IndexBuildParams& p, cudaStream_t stream) {
  try {
    thrust::for_each_n(thrust::cuda::par_nosync.on(stream), thrust::counting_iterator<int32_t>(0), p.rows,
                       BuildIndices{p});
  } catch (const thrust::system_error& e) {
    // Thrust reports a failed launch by throwing; callers of this launcher expect the CUDA error.
    return e.code().category() == thrust::cuda_category() ? static_cast<cudaError_t>(e.code().value())
                                                          : cudaErrorUnknown;
  }
  return cudaGetLastError();
}

}  // namespace kdagraph
