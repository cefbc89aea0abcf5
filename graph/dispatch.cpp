#include "graph/dispatch.h"

#include <array>
#include <cstring>
#include <memory>

#include "kernels/cuda_check.h"

namespace kdagraph::detail {

namespace {
thread_local int t_cpu_round_depth = 0;
}  // namespace

void complete_cpu_kernels() {
#if defined(KDAGRAPH_SIMT)
  complete_simt_kernels();
#endif
}

bool in_cpu_round() { return t_cpu_round_depth > 0; }
CpuRoundDepth::CpuRoundDepth() { ++t_cpu_round_depth; }
CpuRoundDepth::~CpuRoundDepth() { --t_cpu_round_depth; }

void enqueue_copy(const Stream& s, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  switch (s.backend) {
    case Backend::cpu:
      cpu_submit([dst, src, bytes] {
        complete_cpu_kernels();
        std::memcpy(dst, src, bytes);
      });
      return;
    case Backend::cuda:
#if defined(KDAGRAPH_WITH_CUDA)
      KDA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s.stream));
      return;
#else
      throw_no_cuda("enqueue_copy");
#endif
  }
}

void enqueue_fill(const Stream& s, void* dst, int value, size_t bytes) {
  if (bytes == 0) return;
  switch (s.backend) {
    case Backend::cpu:
      cpu_submit([dst, value, bytes] {
        complete_cpu_kernels();
        std::memset(dst, value, bytes);
      });
      return;
    case Backend::cuda:
#if defined(KDAGRAPH_WITH_CUDA)
      KDA_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, s.stream));
      return;
#else
      throw_no_cuda("enqueue_fill");
#endif
  }
}

#if defined(KDAGRAPH_WITH_CUDA)
struct Uploader::Ring {
  static constexpr int kEntries = 8;
  size_t entry_bytes;
  void* host = nullptr;
  std::array<cudaEvent_t, kEntries> events{};
  int next = 0;

  explicit Ring(size_t bytes) : entry_bytes(bytes) {
    KDA_CUDA_CHECK(cudaHostAlloc(&host, entry_bytes * kEntries, cudaHostAllocDefault));
    for (auto& e : events) KDA_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  ~Ring() {
    for (auto& e : events)
      if (e != nullptr) KDA_CUDA_CHECK_NOTHROW(cudaEventDestroy(e));
    KDA_CUDA_CHECK_NOTHROW(cudaFreeHost(host));
  }
  // Owns pinned memory and events that must be released exactly once.
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  void upload(cudaStream_t stream, void* dst, const void* src, size_t bytes) {
    const int i = next;
    next = (next + 1) % kEntries;
    KDA_CUDA_CHECK(cudaEventSynchronize(events[size_t(i)]));
    char* entry = static_cast<char*>(host) + size_t(i) * entry_bytes;
    std::memcpy(entry, src, bytes);
    KDA_CUDA_CHECK(cudaMemcpyAsync(dst, entry, bytes, cudaMemcpyHostToDevice, stream));
    KDA_CUDA_CHECK(cudaEventRecord(events[size_t(i)], stream));
  }
};
#else
struct Uploader::Ring {};
#endif

Uploader::Uploader(Backend backend, size_t max_bytes) : max_bytes_(max_bytes) {
  switch (backend) {
    case Backend::cpu: return;
    case Backend::cuda:
#if defined(KDAGRAPH_WITH_CUDA)
      ring_ = std::make_unique<Ring>(max_bytes);
      return;
#else
      throw_no_cuda("Uploader");
#endif
  }
}

Uploader::~Uploader() = default;

void Uploader::upload(const Stream& s, void* dst, const void* src, size_t bytes) {
  require_in_range("Uploader::upload", "bytes", int64_t(bytes), 0, int64_t(max_bytes_));
  switch (s.backend) {
    case Backend::cpu:
      cpu_submit([dst, data = std::string(static_cast<const char*>(src), bytes)] {
        complete_cpu_kernels();
        std::memcpy(dst, data.data(), data.size());
      });
      return;
    case Backend::cuda:
#if defined(KDAGRAPH_WITH_CUDA)
      require(ring_ != nullptr, "Uploader::upload", "stream.backend", "= cuda, but the uploader was made for the CPU");
      ring_->upload(s.stream, dst, src, bytes);
      return;
#else
      throw_no_cuda("Uploader::upload");
#endif
  }
}

bool is_capturing(const Stream& s) {
  switch (s.backend) {
    case Backend::cpu: return cpu_capture_active();
    case Backend::cuda: {
#if defined(KDAGRAPH_WITH_CUDA)
      cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
      KDA_CUDA_CHECK(cudaStreamIsCapturing(s.stream, &status));
      return status == cudaStreamCaptureStatusActive;
#else
      return false;
#endif
    }
  }
  return false;
}

}  // namespace kdagraph::detail
