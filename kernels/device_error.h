// SPEC §6: recording what only the device can see. One function for both backends.
#pragma once

#include "kdagraph/error.hpp"
#include "kernels/kda_math.h"

namespace kdagraph {

// Records an error; the first one's code, row and value stay. Thread-safe on both backends.
KDA_HD void record_device_error(DeviceErrorWord* word, DeviceErrorCode code, int32_t row, int32_t value) {
  if (word == nullptr) return;
#if defined(__CUDA_ARCH__)
  if (atomicAdd(&word->count, 1u) == 0u) {
    word->row = row;
    word->value = value;
    __threadfence_system();
    atomicExch(&word->code, uint32_t(code));
  }
#else
  if (__atomic_fetch_add(&word->count, 1u, __ATOMIC_ACQ_REL) == 0u) {
    word->row = row;
    word->value = value;
    __atomic_store_n(&word->code, uint32_t(code), __ATOMIC_RELEASE);
  }
#endif
}

}  // namespace kdagraph
