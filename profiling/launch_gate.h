// Timing the device's work alone. An event recorded on an idle stream fires as soon as it is enqueued,
// so a sample `start; launch; stop` on an idle stream also measures the host's launch latency (a few
// microseconds, the whole difference at batch 1). A LaunchGate holds the stream until the host has
// enqueued the timed work: the device then finds the start event, the launches and the stop event all
// queued, and runs them back to back. (NVBench holds its streams the same way, with a blocking kernel;
// here a host function, so the host-compiled `kdagraph bench` can use it too.)
//
//   LaunchGate gate(stream); start.record(s); launch(); stop.record(s); gate.open();
//   ... after the stop event: if (gate.timed_out()) the sample is not valid
//
// The timed work must not wait for the stream (no synchronizing copy, no event or stream sync): the
// stream cannot get past the gate until it is opened. Such a wait would deadlock; the gate opens itself
// after kHoldLimit instead, and timed_out() says so. On the CPU backend, where work runs as it is
// enqueued, there is nothing to hold and the gate does nothing.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "kdagraph/types.hpp"
#include "kernels/cuda_check.h"

namespace kdagraph::profiling {

class LaunchGate {
 public:
  static constexpr std::chrono::seconds kHoldLimit{5};

  explicit LaunchGate(const Stream& s) : state_(std::make_shared<State>()) {
#if defined(KDAGRAPH_WITH_CUDA)
    if (s.backend != Backend::cuda) return;
    auto* held = new std::shared_ptr<State>(state_);  // the host function's reference; it deletes it
    const cudaError_t err = cudaLaunchHostFunc(s.stream, &LaunchGate::hold, held);
    if (err != cudaSuccess) {
      delete held;
      KDA_CUDA_CHECK(err);
    }
#else
    (void)s;
#endif
  }
  ~LaunchGate() { open(); }
  // One gate, one pending host function that reads its state: not copied, not moved.
  LaunchGate(const LaunchGate&) = delete;
  LaunchGate& operator=(const LaunchGate&) = delete;

  // Lets the stream go on; call it once the timed work is enqueued (the destructor does too).
  void open() { state_->opened.store(true, std::memory_order_release); }
  // True when the stream waited at the gate for kHoldLimit: the work enqueued behind it waited on the
  // stream, and its timing is not valid. Read it after the stream has passed the gate.
  bool timed_out() const { return state_->timed_out.load(std::memory_order_acquire); }

 private:
  struct State {
    std::atomic<bool> opened{false}, timed_out{false};
  };

#if defined(KDAGRAPH_WITH_CUDA)
  // Runs on the CUDA runtime's callback thread when the stream reaches the gate; the stream waits for it.
  static void CUDART_CB hold(void* data) {
    const std::unique_ptr<std::shared_ptr<State>> held(static_cast<std::shared_ptr<State>*>(data));
    const auto deadline = std::chrono::steady_clock::now() + kHoldLimit;
    while (!(*held)->opened.load(std::memory_order_acquire)) {
      if (std::chrono::steady_clock::now() > deadline) {
        (*held)->timed_out.store(true, std::memory_order_release);
        return;
      }
      std::this_thread::yield();
    }
  }
#endif

  std::shared_ptr<State> state_;
};

}  // namespace kdagraph::profiling
