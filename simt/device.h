// What a CUDA kernel sees under the SIMT executor: the execution-space keywords, the built-in index
// variables, and the intrinsics the kernels use, all landing in simt/executor.h. Include it
// before any toolkit header (simt/include/cuda_runtime.h and cuda_pipeline.h do), so that the
// toolkit's crt/host_defines.h keeps these definitions.
#pragma once

// Kernels and device functions are plain functions. The toolkit defines __host__, __device__ and
// __global__ as nothing for a host compiler too; keep whichever came first.
#ifndef __host__
#define __host__
#endif
#ifndef __device__
#define __device__
#endif
#ifndef __global__
#define __global__
#endif
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif
// Shared memory comes from kdagraph::shared_object (kernels/launch.cuh, simt/launch.h), which the
// executor can poison per block; a __shared__ variable of a kernel's own would keep the previous block's
// data, so it does not compile here.
#undef __shared__
#define __shared__ static_assert(false, "kernels take shared memory from kdagraph::shared_object<T>()");

#include <driver_types.h>
#include <vector_functions.h>
#include <vector_types.h>

#include <cstring>
#include <type_traits>

#include "simt/executor.h"

// The built-in variables, per thread (per fiber: the executor sets them at every switch).
extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;

inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  kdagraph::simt::syncthreads(file, line);
}

template <class T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32, const char* file = __builtin_FILE(),
                  int line = __builtin_LINE()) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "a shuffle moves up to 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &var, sizeof var);
  bits = kdagraph::simt::shfl_xor(mask, bits, lane_mask, width, file, line);
  std::memcpy(&var, &bits, sizeof var);
  return var;
}

// Loads and stores cached in L2 only: on the CPU plain accesses, checked for what would fault or be
// undefined on the device.
template <class T>
T __ldcg(const T* ptr, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  kdagraph::simt::check_global_access(ptr, alignof(T), "__ldcg", file, line);
  return *ptr;
}

template <class T>
void __stcg(T* ptr, T value, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  kdagraph::simt::check_global_access(ptr, alignof(T), "__stcg", file, line);
  *ptr = value;
}

// A load through the read-only data path (memory the kernel never writes), and an evict-first store.
template <class T>
T __ldg(const T* ptr, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  kdagraph::simt::check_global_access(ptr, alignof(T), "__ldg", file, line);
  return *ptr;
}

template <class T>
void __stcs(T* ptr, T value, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  kdagraph::simt::check_global_access(ptr, alignof(T), "__stcs", file, line);
  *ptr = value;
}
