// [TAG_LAUNCH_SEAM] The one way the library launches a kernel, and the one way a kernel declares shared
// memory. Every launcher calls launch_kernel (launch_kernel_shared with dynamic shared memory) instead of
// writing <<<>>> itself, and every kernel takes its shared memory from shared_object (dynamic_shared)
// instead of declaring a __shared__ variable, so a test build can run the very same kernel source on
// the CPU: the SIMT executor (simt/) provides both there, and its build names its launch header in
// KDAGRAPH_SIMT_LAUNCH_HEADER, so the library names nothing outside itself.
// Kernel bodies stay free of #ifdefs.
//
// [TAG_PDL] Programmatic dependent launch (docs/graphs.md): the seam decides how a kernel is launched
// (kernels/launch.h), the kernel says where its dependency on the previous kernel starts. Every kernel of
// a round calls grid_dependency_wait() before it reads anything the kernel before it may write (above it
// only what earlier rounds wrote: seeds, weights, gate parameters), and trigger_dependent_launch() only
// after its wait, so that a dependent's early reads never race the kernel two places back.
#pragma once

#include "kernels/launch.h"

#if defined(KDAGRAPH_SIMT)
#include KDAGRAPH_SIMT_LAUNCH_HEADER
#else
#include <cuda_runtime.h>

#include <utility>

namespace kdagraph {

// Enqueues `kernel` as `on` says, with `shared_bytes` of dynamic shared memory (dynamic_shared); returns
// the launch's error. A programmatic launch sets cudaLaunchAttributeProgrammaticStreamSerialization,
// which a stream capture keeps as a programmatic edge of the graph. A kernel with dynamic shared memory
// is allowed that much first (cudaFuncSetAttribute: host state, no stream work, so capture-safe), as
// static and dynamic bytes together may pass the 48 KB a block gets without asking.
template <class... Params, class... Args>
inline cudaError_t launch_kernel_shared(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, Launch on,
                                        Args&&... args) {
  if (shared_bytes > 0) {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared_bytes));
    if (e != cudaSuccess) return e;
  }
  if (!on.pdl || !detail::device_has_pdl()) {
    kernel<<<grid, block, shared_bytes, on.stream>>>(std::forward<Args>(args)...);
    return cudaGetLastError();
  }
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = on.stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// The same with no dynamic shared memory.
template <class... Params, class... Args>
inline cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, Launch on, Args&&... args) {
  return launch_kernel_shared(kernel, grid, block, 0, on, std::forward<Args>(args)...);
}

// Waits until the previous kernel on the stream has completed and its writes are visible; a no-op when
// the kernel was launched plainly, and below sm_90.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cudaGridDependencySynchronize();
#endif
}

// Lets the next kernel on the stream start (its part above its own wait); call it after
// grid_dependency_wait().
__device__ __forceinline__ void trigger_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cudaTriggerProgrammaticLaunchCompletion();
#endif
}

// The block's shared object of type T (one per type and block, uninitialized). The same static
// __shared__ storage as a variable in the kernel; the executor needs the indirection to find and poison
// it per block, since GCC ignores placement attributes on the static locals of function templates.
template <class T>
__device__ __forceinline__ T& shared_object() {
  __shared__ T object;
  return object;
}


// The block's dynamic shared memory, the bytes its launch_kernel_shared asked for, as an array of T.
template <class T>
__device__ __forceinline__ T* dynamic_shared() {
  extern __shared__ __align__(16) unsigned char kdagraph_dynamic_shared[];
  return reinterpret_cast<T*>(kdagraph_dynamic_shared);
}
}  // namespace kdagraph
#endif
