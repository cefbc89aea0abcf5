// GPU test support: an honest skip where no device is visible, and RAII owners for the device memory
// and stream a test uses. Only the CUDA runtime: usable by kernel tests and public-API tests alike.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "kernels/memory.h"
#include "kernels/stream.h"
#include "tests/common/reference.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace kdagraph::test {

// True when a CUDA device is visible (asked once per process).
inline bool gpu_present() {
  static const bool present = [] {
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  }();
  return present;
}

// Throws, naming the call, when a CUDA runtime call fails; GoogleTest reports the exception.
inline void cuda_ok(cudaError_t err, const char* call) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(call) + ": " + cudaGetErrorName(err) + ": " +
                             cudaGetErrorString(err));
}
#define KDA_TEST_CUDA(call) ::kdagraph::test::cuda_ok((call), #call)

// Device memory of a test: the library's own buffer on the CUDA backend, with the constructors tests
// use. Its upload, fill and download finish before they return.
struct DeviceBuffer : detail::Buffer {
  explicit DeviceBuffer(size_t bytes) : detail::Buffer(Backend::cuda, bytes) {}
  template <class T>
  explicit DeviceBuffer(const std::vector<T>& host) : detail::Buffer(detail::Buffer::copy_of(Backend::cuda, host)) {}
};

// A test's non-blocking stream: the library's stream handle.
inline detail::StreamHandle test_stream() { return detail::StreamHandle::create(Backend::cuda); }

}  // namespace kdagraph::test

// First statement of every GPU test: reports the test SKIPPED, never passed, where no device is visible.
#define KDA_SKIP_WITHOUT_GPU()                                              \
  do {                                                                      \
    if (!::kdagraph::test::gpu_present()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)
