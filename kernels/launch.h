// [TAG_LAUNCH_SEAM] How a launcher enqueues its kernel, as host code sees it: the kernel headers declare
// their launchers with it, so g++ sources (the ops, the backend seam) can say how a kernel is launched
// without device code. The device half is kernels/launch.cuh.
#pragma once

#include "kdagraph/types.hpp"

namespace kdagraph {

// The stream a kernel goes to, and whether it may start while the previous kernel on that stream is
// still running: programmatic dependent launch (docs/graphs.md [TAG_PDL]), on devices that have it (sm_90 and
// later; elsewhere the launch is plain). Such a kernel reads only what earlier rounds wrote until its
// grid_dependency_wait() returns, and lets its own dependents start (trigger_dependent_launch()) only
// after that. A plain stream converts to a plain launch.
struct Launch {
  cudaStream_t stream = nullptr;
  bool pdl = false;

  Launch() = default;
  // Implicit: a plain stream is a plain launch.
  Launch(cudaStream_t s, bool programmatic = false) : stream(s), pdl(programmatic) {}
};

namespace detail {
// Whether the current device has programmatic dependent launch (compute capability 9.0 or later); asked
// once per device (kernels/launch.cpp, CUDA builds).
bool device_has_pdl();
// The current device's multiprocessor count, asked once per device (kernels/launch.cpp); the SIMT
// executor's stand-in device has simt::Options::multiprocessors. Launchers size their choices by it.
int device_multiprocessors();
}  // namespace detail

}  // namespace kdagraph
