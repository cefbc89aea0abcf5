// kernels/cuda_check.h's check_launch and complete_simt_kernels in the SIMT test build, where the
// library's CPU backend runs the CUDA launchers (graph/dispatch.h): a failed launch names the kernel, its
// shape and what the executor found.
#include "kdagraph/error.hpp"
#include "kernels/cuda_check.h"
#include "tests/simt/executor.h"

namespace kdagraph::detail {

void check_launch(cudaError_t err, const char* kernel, const std::string& shape) {
  if (err != cudaSuccess)
    throw Error(std::string("launch of ") + kernel + " (" + shape + ") failed on the SIMT executor: " +
                simt::last_error());
}

void complete_simt_kernels() {
  if (simt::synchronize() != cudaSuccess)
    throw Error(std::string("a kernel failed on the SIMT executor once it went on past its grid_dependency_wait: ") +
                simt::last_error());
}

}  // namespace kdagraph::detail
