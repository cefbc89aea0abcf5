// The stream and the device timer a command runs with. On the CUDA backend they own a created stream and
// two events; on the CPU backend work runs at once, so there is nothing to own or wait for.
#pragma once

#include "kdagraph/types.hpp"

// As the CUDA runtime spells it; keeps CUDA headers out of this header.
struct CUevent_st;
typedef struct CUevent_st* cudaEvent_t;

namespace kdagraph::cli {

class RunStream {
 public:
  explicit RunStream(Backend backend);
  ~RunStream();
  // Owns a CUDA stream that must be destroyed exactly once.
  RunStream(const RunStream&) = delete;
  RunStream& operator=(const RunStream&) = delete;

  const Stream& get() const { return stream_; }
  // Waits for everything enqueued so far (CUDA); nothing to wait for on the CPU.
  void synchronize() const;

 private:
  Stream stream_;
};

// Device time between start() and stop() on one stream, from CUDA events. Not available on the CPU.
class DeviceTimer {
 public:
  explicit DeviceTimer(Backend backend);
  ~DeviceTimer();
  // Owns two CUDA events that must be destroyed exactly once.
  DeviceTimer(const DeviceTimer&) = delete;
  DeviceTimer& operator=(const DeviceTimer&) = delete;

  bool available() const { return available_; }
  void start(const Stream& s);
  void stop(const Stream& s);
  // Waits for the stop event; milliseconds between the two events.
  double elapsed_ms() const;

 private:
  bool available_ = false;
  // Unused in builds without CUDA, where the timer is never available.
  [[maybe_unused]] cudaEvent_t start_ = nullptr;
  [[maybe_unused]] cudaEvent_t stop_ = nullptr;
};

// Measured copy bandwidth in GB/s counting bytes read plus bytes written (the unit of SPEC §7's state
// transfers): device-to-device cudaMemcpy on CUDA, memcpy of host memory on the CPU.
double copy_ceiling_gbs(Backend backend);

}  // namespace kdagraph::cli
