// kernels/cuda_check.h's throw_launch_failure and complete_simt_kernels in the SIMT test build, where the
// library's CPU backend runs the CUDA launchers (graph/dispatch.h): a failed launch names the kernel, its
// shape and what the executor found. And kernels/launch.h's question to the device, answered by the
// executor's stand-in (kernels/launch.cpp is not in this build).
#include "kdagraph/error.hpp"
#include "kernels/cuda_check.h"
#include "kernels/launch.h"
#include "simt/executor.h"

namespace kdagraph::detail {

void throw_launch_failure(cudaError_t, const char* kernel, const std::string& shape) {
  throw Error(std::string("launch of ") + kernel + " (" + shape + ") failed on the SIMT executor: " +
              simt::last_error());
}

int device_multiprocessors() { return simt::options().multiprocessors; }

void complete_simt_kernels() {
  if (simt::synchronize() != cudaSuccess)
    throw Error(std::string("a kernel failed on the SIMT executor once it went on past its grid_dependency_wait: ") +
                simt::last_error());
}

}  // namespace kdagraph::detail
