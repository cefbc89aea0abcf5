#include "kernels/memory.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "kdagraph/error.hpp"
#include "kernels/cuda_check.h"

namespace kdagraph::detail {
void throw_no_cuda(const char* what) {
  throw Error(std::string(what) + ": backend cuda requested, but kdagraph was built without CUDA");
}

Buffer::Buffer(Backend backend, size_t bytes) : backend_(backend), bytes_(bytes) {
  if (bytes == 0) return;
  if (backend == Backend::cpu) {
    data_ = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (data_ == nullptr) throw std::bad_alloc();
    return;
  }
#if defined(KDAGRAPH_WITH_CUDA)
  KDA_CUDA_CHECK(cudaMalloc(&data_, bytes));
#else
  throw_no_cuda("Buffer");
#endif
}

Buffer::~Buffer() { release(); }

void Buffer::upload(const void* src, size_t bytes) {
  require(bytes <= bytes_, "Buffer::upload", "bytes",
          "= " + std::to_string(bytes) + " exceeds the buffer's " + std::to_string(bytes_));
  copy_to_backend(backend_, data_, src, bytes);
}

void Buffer::fill(int byte) { fill_bytes(backend_, data_, byte, bytes_); }

void Buffer::release() noexcept {
  if (data_ == nullptr) return;
  if (backend_ == Backend::cpu) {
    std::free(data_);
  } else {
#if defined(KDAGRAPH_WITH_CUDA)
    KDA_CUDA_CHECK_NOTHROW(cudaFree(data_));
#endif
  }
  data_ = nullptr;
  bytes_ = 0;
}

Buffer::Buffer(Buffer&& other) noexcept
    : backend_(other.backend_), data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    release();
    backend_ = other.backend_;
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

MappedHostBuffer::MappedHostBuffer(Backend backend, size_t bytes) : backend_(backend) {
  if (backend == Backend::cpu) {
    host_ = device_ = std::calloc(1, bytes);
    if (host_ == nullptr) throw std::bad_alloc();
    return;
  }
#if defined(KDAGRAPH_WITH_CUDA)
  KDA_CUDA_CHECK(cudaHostAlloc(&host_, bytes, cudaHostAllocMapped));
  std::memset(host_, 0, bytes);
  KDA_CUDA_CHECK(cudaHostGetDevicePointer(&device_, host_, 0));
#else
  throw_no_cuda("MappedHostBuffer");
#endif
}

MappedHostBuffer::~MappedHostBuffer() {
  if (host_ == nullptr) return;
  if (backend_ == Backend::cpu) {
    std::free(host_);
  } else {
#if defined(KDAGRAPH_WITH_CUDA)
    KDA_CUDA_CHECK_NOTHROW(cudaFreeHost(host_));
#endif
  }
}

void copy_to_backend(Backend backend, void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  if (backend == Backend::cpu) {
    std::memcpy(dst, src, bytes);
    return;
  }
#if defined(KDAGRAPH_WITH_CUDA)
  KDA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
  KDA_CUDA_CHECK(cudaStreamSynchronize(stream));
#else
  (void)stream;
  throw_no_cuda("copy_to_backend");
#endif
}

void copy_to_host(Backend backend, void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  if (backend == Backend::cpu) {
    std::memcpy(dst, src, bytes);
    return;
  }
#if defined(KDAGRAPH_WITH_CUDA)
  KDA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream));
  KDA_CUDA_CHECK(cudaStreamSynchronize(stream));
#else
  (void)stream;
  throw_no_cuda("copy_to_host");
#endif
}

void wait_for_device(Backend backend) {
  if (backend == Backend::cpu) return;
#if defined(KDAGRAPH_WITH_CUDA)
  KDA_CUDA_CHECK(cudaDeviceSynchronize());
#else
  throw_no_cuda("wait_for_device");
#endif
}

void fill_bytes(Backend backend, void* dst, int value, size_t bytes) {
  if (bytes == 0) return;
  if (backend == Backend::cpu) {
    std::memset(dst, value, bytes);
    return;
  }
#if defined(KDAGRAPH_WITH_CUDA)
  // cudaMemset of device memory may return before it has run, and a non-blocking stream does not wait
  // for the default stream: finish it here, so whatever stream uses the buffer next sees the fill.
  KDA_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, nullptr));
  KDA_CUDA_CHECK(cudaStreamSynchronize(nullptr));
#else
  throw_no_cuda("fill_bytes");
#endif
}

int64_t free_device_bytes(Backend backend) {
  if (backend != Backend::cuda) return 0;
#if defined(KDAGRAPH_WITH_CUDA)
  size_t free = 0, total = 0;
  KDA_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return int64_t(free);
#else
  throw_no_cuda("free_device_bytes");
#endif
}

}  // namespace kdagraph::detail
