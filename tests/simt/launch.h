// [TAG_LAUNCH_SEAM] kdagraph::launch_kernel under KDAGRAPH_SIMT (kernels/launch.cuh includes this file
// instead of writing <<<>>>): the launch runs on the SIMT executor, synchronously; the stream is not
// used, since the launch has finished when it returns. shared_object hands out the executor's shared
// memory.
#pragma once

#include <new>
#include <tuple>
#include <type_traits>
#include <utility>

#include "tests/simt/device.h"
#include "tests/simt/executor.h"

namespace kdagraph {

template <class... Params, class... Args>
inline cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t /*stream*/,
                                 Args&&... args) {
  // Converted once to the kernel's parameter types, as the runtime copies them at a launch.
  struct Call {
    void (*kernel)(Params...);
    std::tuple<std::decay_t<Params>...> params;
  };
  const Call call{kernel, std::tuple<std::decay_t<Params>...>(std::forward<Args>(args)...)};
  return simt::launch(grid, block,
                      [](const void* ctx) {
                        const Call& c = *static_cast<const Call*>(ctx);
                        std::apply(c.kernel, c.params);
                      },
                      &call);
}

// The block's shared object of type T, as on the device: one per type, uninitialized (poisoned).
template <class T>
T& shared_object() {
  static_assert(std::is_trivially_default_constructible_v<T>, "__shared__ objects are not constructed");
  static const size_t offset = simt::reserve_shared(sizeof(T), alignof(T));
  return *std::launder(reinterpret_cast<T*>(simt::shared_arena() + offset));
}

// [TAG_PDL] The grid dependency of kernels/launch.cuh: launches run one after another here, so the
// previous kernel has finished before any block starts.
inline void grid_dependency_wait() {}
inline void trigger_dependent_launch() {}

}  // namespace kdagraph
