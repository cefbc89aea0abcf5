// [TAG_LAUNCH_SEAM] The one way the library launches a kernel, and the one way a kernel declares shared
// memory. Every launcher calls launch_kernel instead of writing <<<>>> itself, and every kernel takes its
// shared memory from shared_object instead of declaring a __shared__ variable, so a test build can run
// the very same kernel source on the CPU (the SIMT executor under tests/simt/ provides both there).
// Kernel bodies stay free of #ifdefs.
#pragma once

#if defined(KDAGRAPH_SIMT)
#include "tests/simt/launch.h"
#else
#include <cuda_runtime.h>

#include <utility>

namespace kdagraph {

// Enqueues `kernel` on `stream` with no dynamic shared memory; returns the launch's error.
template <class... Params, class... Args>
inline cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream,
                                 Args&&... args) {
  kernel<<<grid, block, 0, stream>>>(std::forward<Args>(args)...);
  return cudaGetLastError();
}

// The block's shared object of type T (one per type and block, uninitialized). The same static
// __shared__ storage as a variable in the kernel; the executor needs the indirection to find and poison
// it per block, since GCC ignores placement attributes on the static locals of function templates.
template <class T>
__device__ __forceinline__ T& shared_object() {
  __shared__ T object;
  return object;
}

// [TAG_PDL] Programmatic dependent launch (SPEC §5): a kernel reads what earlier rounds wrote before
// grid_dependency_wait(), what the previous kernel wrote after it, and calls trigger_dependent_launch()
// only after its wait. Placeholders until the launch seam launches with PDL; the SIMT executor has the
// same two.
__device__ __forceinline__ void grid_dependency_wait() {}
__device__ __forceinline__ void trigger_dependent_launch() {}

}  // namespace kdagraph
#endif
