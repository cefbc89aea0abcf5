// Streams and events of either backend, as RAII owners. The library, its tests, profiling and the
// tools all use these; on the CPU backend work runs at once, so there is nothing to wait for and an
// event records the host clock.
#pragma once

#include <chrono>

#include "kdagraph/types.hpp"

// As the CUDA runtime spells it; keeps CUDA headers out of this header.
struct CUevent_st;
typedef struct CUevent_st* cudaEvent_t;

namespace kdagraph::detail {

// A stream of either backend: created here and destroyed with the handle (owning), or the caller's
// (viewing, never destroyed here).
class StreamHandle {
 public:
  // A new stream: non-blocking on CUDA (it does not wait for the legacy default stream), none on the CPU.
  static StreamHandle create(Backend backend);
  static StreamHandle view(const Stream& s);
  ~StreamHandle();
  // Owns (when owning) a CUDA stream that must be destroyed exactly once; moves transfer it.
  StreamHandle(const StreamHandle&) = delete;
  StreamHandle& operator=(const StreamHandle&) = delete;
  StreamHandle(StreamHandle&& other) noexcept;
  StreamHandle& operator=(StreamHandle&& other) noexcept;

  const Stream& get() const { return stream_; }
  cudaStream_t cuda() const { return stream_.stream; }
  // Waits for everything enqueued so far (CUDA); nothing to wait for on the CPU.
  void synchronize() const;

 private:
  StreamHandle(Stream s, bool owning) : stream_(s), owning_(owning) {}
  void release() noexcept;
  Stream stream_;
  bool owning_ = false;
};

// A point in a stream. On CUDA a timing event; on the CPU, where work has run when it is enqueued, the
// host clock at record().
class Event {
 public:
  explicit Event(Backend backend);
  ~Event();
  // Owns a CUDA event that must be destroyed exactly once.
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) = delete;

  void record(const Stream& s);
  void synchronize() const;
  // Milliseconds from `start` to this event; waits for this one.
  double elapsed_ms_since(const Event& start) const;

 private:
  Backend backend_;
  cudaEvent_t event_ = nullptr;
  std::chrono::steady_clock::time_point host_time_{};
};

}  // namespace kdagraph::detail
