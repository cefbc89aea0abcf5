#include "kernels/stream.h"

#include <utility>

#include "kdagraph/error.hpp"
#include "kernels/cuda_check.h"

namespace kdagraph::detail {
StreamHandle StreamHandle::create(Backend backend) {
  Stream s{backend, nullptr};
  if (backend == Backend::cuda) {
#if defined(KDAGRAPH_WITH_CUDA)
    KDA_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
#else
    throw_no_cuda("StreamHandle::create");
#endif
  }
  return StreamHandle(s, backend == Backend::cuda);
}

StreamHandle StreamHandle::view(const Stream& s) { return StreamHandle(s, false); }

StreamHandle::~StreamHandle() { release(); }

StreamHandle::StreamHandle(StreamHandle&& other) noexcept
    : stream_(other.stream_), owning_(std::exchange(other.owning_, false)) {}

StreamHandle& StreamHandle::operator=(StreamHandle&& other) noexcept {
  if (this != &other) {
    release();
    stream_ = other.stream_;
    owning_ = std::exchange(other.owning_, false);
  }
  return *this;
}

void StreamHandle::release() noexcept {
#if defined(KDAGRAPH_WITH_CUDA)
  if (owning_ && stream_.stream != nullptr) KDA_CUDA_CHECK_NOTHROW(cudaStreamDestroy(stream_.stream));
#endif
  owning_ = false;
}

void StreamHandle::synchronize() const {
  if (stream_.backend != Backend::cuda) return;
#if defined(KDAGRAPH_WITH_CUDA)
  KDA_CUDA_CHECK(cudaStreamSynchronize(stream_.stream));
#else
  throw_no_cuda("StreamHandle::synchronize");
#endif
}

Event::Event(Backend backend) : backend_(backend) {
  if (backend != Backend::cuda) return;
#if defined(KDAGRAPH_WITH_CUDA)
  KDA_CUDA_CHECK(cudaEventCreate(&event_));
#else
  throw_no_cuda("Event");
#endif
}

Event::~Event() {
#if defined(KDAGRAPH_WITH_CUDA)
  if (event_ != nullptr) KDA_CUDA_CHECK_NOTHROW(cudaEventDestroy(event_));
#endif
}

Event::Event(Event&& other) noexcept
    : backend_(other.backend_), event_(std::exchange(other.event_, nullptr)), host_time_(other.host_time_) {}

void Event::record(const Stream& s) {
  require(s.backend == backend_, "Event::record", "stream.backend",
          std::string("= ") + to_string(s.backend) + " differs from the event's backend " + to_string(backend_));
  if (backend_ != Backend::cuda) {
    host_time_ = std::chrono::steady_clock::now();
    return;
  }
#if defined(KDAGRAPH_WITH_CUDA)
  KDA_CUDA_CHECK(cudaEventRecord(event_, s.stream));
#endif
}

void Event::synchronize() const {
#if defined(KDAGRAPH_WITH_CUDA)
  if (event_ != nullptr) KDA_CUDA_CHECK(cudaEventSynchronize(event_));
#endif
}

double Event::elapsed_ms_since(const Event& start) const {
  if (backend_ != Backend::cuda)
    return std::chrono::duration<double, std::milli>(host_time_ - start.host_time_).count();
  float ms = 0.0f;
#if defined(KDAGRAPH_WITH_CUDA)
  synchronize();
  KDA_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
#endif
  return double(ms);
}

}  // namespace kdagraph::detail
