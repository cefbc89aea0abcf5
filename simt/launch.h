// [TAG_LAUNCH_SEAM] kdagraph::launch_kernel under KDAGRAPH_SIMT (kernels/launch.cuh includes this file
// instead of writing <<<>>>): the launch runs on the SIMT executor; the stream is not used, since the
// executor keeps one order for the launching thread. A launch with `pdl` may be held at its
// grid_dependency_wait until the next one arrives (simt/executor.h, [TAG_PDL]). shared_object and
// dynamic_shared hand out the running block's shared memory.
#pragma once

#include <new>
#include <tuple>
#include <type_traits>
#include <utility>

#include "simt/device.h"
#include "simt/executor.h"

namespace kdagraph {

template <class... Params, class... Args>
inline cudaError_t launch_kernel_shared(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, Launch on,
                                        Args&&... args) {
  // Converted once to the kernel's parameter types, as the runtime copies them at a launch; the launch
  // owns them, since a held kernel runs on after this returns.
  return simt::launch(grid, block, on.pdl, shared_bytes,
                      [kernel, params = std::tuple<std::decay_t<Params>...>(std::forward<Args>(args)...)] {
                        std::apply(kernel, params);
                      });
}

template <class... Params, class... Args>
inline cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, Launch on, Args&&... args) {
  return launch_kernel_shared(kernel, grid, block, 0, on, std::forward<Args>(args)...);
}

inline void grid_dependency_wait(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  simt::grid_dependency_wait(file, line);
}

inline void trigger_dependent_launch(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  simt::trigger_dependent_launch(file, line);
}

// The block's shared object of type T, as on the device: one per type, uninitialized (poisoned).
template <class T>
T& shared_object() {
  static_assert(std::is_trivially_default_constructible_v<T>, "__shared__ objects are not constructed");
  static const size_t offset = simt::reserve_shared(sizeof(T), alignof(T));
  return *std::launder(reinterpret_cast<T*>(simt::shared_arena() + offset));
}

// The block's dynamic shared memory, exactly the bytes its launch asked for (poisoned).
template <class T>
T* dynamic_shared() {
  return reinterpret_cast<T*>(simt::dynamic_shared_arena());
}

}  // namespace kdagraph
