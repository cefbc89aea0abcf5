#include "kernels/cuda_check.h"

#include <cstdio>
#include <string>

#include "kdagraph/error.hpp"

namespace kdagraph::detail {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  // The exception reports it; a later launch's cudaGetLastError() must not report it again as its own.
  (void)cudaGetLastError();
  throw Error(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
              cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

void throw_launch_failure(cudaError_t err, const char* kernel, const std::string& shape) {
  throw Error(std::string("launch of ") + kernel + " (" + shape + ") failed: " + cudaGetErrorName(err) + ": " +
              cudaGetErrorString(err));
}

// Formats straight to stderr: building a std::string could throw, and destructors call this.
void warn_cuda_error(cudaError_t err, const char* call, const char* file, int line) noexcept {
  std::fprintf(stderr, "kdagraph: warning: %s failed at %s:%d: %s: %s\n", call, file, line,
               cudaGetErrorName(err), cudaGetErrorString(err));
}

}  // namespace kdagraph::detail
