// Memory owners for both backends. Allocation happens only in constructors, never inside a capture.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kdagraph/types.hpp"

namespace kdagraph::detail {

// Synchronous copies for setup, tests and tools; never called on a round's hot path. On CUDA the copy is
// ordered on `stream` after the work already enqueued there, and the call returns once it is done.
void copy_to_backend(Backend backend, void* dst, const void* src, size_t bytes, cudaStream_t stream = nullptr);
void copy_to_host(Backend backend, void* dst, const void* src, size_t bytes, cudaStream_t stream = nullptr);
// Waits for all of the device's work (cudaDeviceSynchronize); nothing on the CPU backend.
void wait_for_device(Backend backend);
void fill_bytes(Backend backend, void* dst, int value, size_t bytes);
// Free device memory (cudaMemGetInfo) on CUDA, 0 on the CPU: what a graph took is the drop across it.
int64_t free_device_bytes(Backend backend);

// Backend memory: 64-byte aligned host memory on the CPU, cudaMalloc on CUDA.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Backend backend, size_t bytes);
  ~Buffer();
  // Owns an allocation that must be freed exactly once.
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;

  // A buffer holding a copy of `host` (setup, tests, tools).
  template <class T>
  static Buffer copy_of(Backend backend, const std::vector<T>& host) {
    Buffer b(backend, host.size() * sizeof(T));
    b.upload(host.data(), b.bytes());
    return b;
  }

  void* data() const { return data_; }
  template <class T = void>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }
  Backend backend() const { return backend_; }

  // Synchronous setup helpers, never on a round's hot path: on CUDA each finishes before it returns.
  void upload(const void* src, size_t bytes);
  void fill(int byte);
  // The buffer's bytes once all the device's work has finished: the copy runs on the legacy default
  // stream, which a non-blocking stream's kernels are not ordered before, so a read-back right after
  // a round on such a stream could otherwise see the buffer before the round wrote it (seen on an H200:
  // tests passed alone and failed with other processes on the GPU).
  template <class T>
  std::vector<T> download() const {
    std::vector<T> out(bytes_ / sizeof(T));
    wait_for_device(backend_);
    copy_to_host(backend_, out.data(), data_, out.size() * sizeof(T));
    return out;
  }

 private:
  void release() noexcept;
  Backend backend_ = Backend::cpu;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Host memory the device can read (and write) directly: pinned and mapped on CUDA, plain on the CPU.
// Used for the device error word, which the host then reads without stopping the pipeline.
class MappedHostBuffer {
 public:
  MappedHostBuffer() = default;
  MappedHostBuffer(Backend backend, size_t bytes);
  ~MappedHostBuffer();
  // Owns a pinned allocation that must be freed exactly once.
  MappedHostBuffer(const MappedHostBuffer&) = delete;
  MappedHostBuffer& operator=(const MappedHostBuffer&) = delete;

  void* host() const { return host_; }
  void* device() const { return device_; }

 private:
  Backend backend_ = Backend::cpu;
  void* host_ = nullptr;
  void* device_ = nullptr;
};

}  // namespace kdagraph::detail
