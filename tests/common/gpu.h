// GPU test support: an honest skip where no device is visible, and RAII owners for the device memory
// and stream a test uses. Only the CUDA runtime: usable by kernel tests and public-API tests alike.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

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

// Device memory of a test. Owns a cudaMalloc allocation that must be freed exactly once.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0) KDA_TEST_CUDA(cudaMalloc(&data_, bytes));
  }
  template <class T>
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size() * sizeof(T)) {
    upload(host.data(), bytes_);
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  template <class T = void>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }
  void upload(const void* src, size_t bytes) {
    if (bytes > 0) KDA_TEST_CUDA(cudaMemcpy(data_, src, bytes, cudaMemcpyHostToDevice));
    settle();
  }
  void fill(int byte) {
    if (bytes_ > 0) KDA_TEST_CUDA(cudaMemset(data_, byte, bytes_));
    settle();
  }
  template <class T>
  std::vector<T> download() const {
    std::vector<T> out(bytes_ / sizeof(T));
    if (bytes_ > 0)
      KDA_TEST_CUDA(cudaMemcpy(out.data(), data_, out.size() * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
  }

 private:
  // A pageable cudaMemcpy to the device and cudaMemset may return before the device has run them, on
  // the legacy stream, which the tests' non-blocking streams do not wait for: finish them here.
  static void settle() { KDA_TEST_CUDA(cudaDeviceSynchronize()); }

  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// A non-blocking stream. Owns a cudaStream_t that must be destroyed exactly once.
class TestStream {
 public:
  TestStream() { KDA_TEST_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~TestStream() { cudaStreamDestroy(stream_); }
  TestStream(const TestStream&) = delete;
  TestStream& operator=(const TestStream&) = delete;

  cudaStream_t get() const { return stream_; }
  void sync() const { KDA_TEST_CUDA(cudaStreamSynchronize(stream_)); }

 private:
  cudaStream_t stream_ = nullptr;
};

}  // namespace kdagraph::test

// First statement of every GPU test: reports the test SKIPPED, never passed, where no device is visible.
#define KDA_SKIP_WITHOUT_GPU()                                              \
  do {                                                                      \
    if (!::kdagraph::test::gpu_present()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)
