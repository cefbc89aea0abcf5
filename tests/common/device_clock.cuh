// The device's global nanosecond timer, for GPU tests whose kernels must run for a set time or give up
// after one. Device code: include from .cu tests only.
#pragma once

#include <cstdint>

namespace kdagraph::test {

__device__ inline uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

}  // namespace kdagraph::test
