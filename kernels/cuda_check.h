// One throwing check for CUDA runtime calls and a no-throw twin for destructors. Both name the call,
// where it was made, and the error.
#pragma once

namespace kdagraph::detail {
// A CUDA-only call in a build without CUDA: throws naming `what`.
[[noreturn]] void throw_no_cuda(const char* what);
}  // namespace kdagraph::detail

#if defined(KDAGRAPH_WITH_CUDA) || defined(KDAGRAPH_SIMT)
#include <cuda_runtime_api.h>

#include <string>

namespace kdagraph::detail {
// A kernel launcher's failure `err`: throws naming the kernel, the shape it was launched for and the
// error. Called only on failure, so the shape is built only then. (The SIMT test build, simt/, has
// its own: the executor's message in place of the CUDA error.)
[[noreturn]] void throw_launch_failure(cudaError_t err, const char* kernel, const std::string& shape);
}  // namespace kdagraph::detail
#endif

#if defined(KDAGRAPH_SIMT)
namespace kdagraph::detail {
// Completes the kernel the SIMT executor holds for programmatic dependent launch, if any; throws naming
// what failed (simt/check_launch.cpp; graph/dispatch.h says when).
void complete_simt_kernels();
}  // namespace kdagraph::detail
#endif

#if defined(KDAGRAPH_WITH_CUDA)
namespace kdagraph::detail {
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
void warn_cuda_error(cudaError_t err, const char* call, const char* file, int line) noexcept;
}  // namespace kdagraph::detail

#define KDA_CUDA_CHECK(call)                                                              \
  do {                                                                                    \
    cudaError_t kda_err_ = (call);                                                        \
    if (kda_err_ != cudaSuccess) ::kdagraph::detail::throw_cuda_error(kda_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define KDA_CUDA_CHECK_NOTHROW(call)                                                      \
  do {                                                                                    \
    cudaError_t kda_err_ = (call);                                                        \
    if (kda_err_ != cudaSuccess) ::kdagraph::detail::warn_cuda_error(kda_err_, #call, __FILE__, __LINE__); \
  } while (0)
#endif
