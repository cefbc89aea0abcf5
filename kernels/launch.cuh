// [TAG_LAUNCH_SEAM] The one way the library launches a kernel. Every launcher calls launch_kernel instead
// of writing <<<>>> itself, so a test build can run the very same kernel source on the CPU (the SIMT
// executor under tests/simt/ provides its own launch_kernel there). Kernel bodies stay free of #ifdefs.
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

}  // namespace kdagraph
#endif
