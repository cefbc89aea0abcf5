// SPEC §4 on the device: the same BuildIndices and BuildSlotIndices functors as indices_cpu.cpp, applied
// with Thrust's CUDA policy; par_nosync: no allocation, no synchronization, capture-safe.
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

namespace {

// Thrust reports a failed launch by throwing; callers of these launchers expect the CUDA error.
template <class F>
cudaError_t for_each_row(F f, int32_t rows, cudaStream_t stream) {
  try {
    thrust::for_each_n(thrust::cuda::par_nosync.on(stream), thrust::counting_iterator<int32_t>(0), rows, f);
  } catch (const thrust::system_error& e) {
    return e.code().category() == thrust::cuda_category() ? static_cast<cudaError_t>(e.code().value())
                                                          : cudaErrorUnknown;
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_build_indices(const IndexBuildParams& p, cudaStream_t stream) {
  return for_each_row(BuildIndices{p}, p.rows, stream);
}

cudaError_t launch_build_slot_indices(const SlotIndexParams& p, cudaStream_t stream) {
  return for_each_row(BuildSlotIndices{p}, p.rows, stream);
}

}  // namespace kdagraph
