// docs/errors.md: recording what only the device can see. One function for both backends.
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

// An accept length read from memory the caller owns, as entry e would use it: clamped to [lo, hi], a
// value outside recorded (accept_out_of_range) when `report`.
KDA_HD int32_t checked_accept(int32_t a, int32_t lo, int32_t hi, int32_t e, DeviceErrorWord* errors, bool report) {
  if (a >= lo && a <= hi) return a;
  if (report) record_device_error(errors, DeviceErrorCode::accept_out_of_range, e, a);
  return a < lo ? lo : hi;
}

// Adds `bytes` to a traffic counter (SlotStorage::bytes_moved) when there is one. Thread-safe on both
// backends: a kernel adds its own reads and writes of states and ring records as it makes them.
KDA_HD void count_bytes(unsigned long long* counter, int64_t bytes) {
  if (counter == nullptr || bytes <= 0) return;
#if defined(__CUDA_ARCH__)
  atomicAdd(counter, static_cast<unsigned long long>(bytes));
#else
  __atomic_fetch_add(counter, static_cast<unsigned long long>(bytes), __ATOMIC_RELAXED);
#endif
}

// A ring cursor of slot `slot` (docs/modes.md: ring_pending, ring_start), which the device wrote: a value
// outside [0, hi] is clamped into it, and recorded (with the slot) when `report`.
KDA_HD int32_t checked_ring(int32_t x, int32_t hi, int32_t slot, DeviceErrorWord* errors, bool report) {
  if (x >= 0 && x <= hi) return x;
  if (report) record_device_error(errors, DeviceErrorCode::ring_out_of_range, slot, x);
  return x < 0 ? 0 : hi;
}

// Entry e of a slot list (a batch, or a materialize list): the slot it names, or -1. -1 entries are
// padding; entries outside [0, slots) and repeats of an earlier entry (the first keeps the slot) are
// treated as padding too and recorded when `report`. A listed slot is then worked on once, whatever the
// list holds: replaying a prefix or moving a window twice would corrupt the state.
KDA_HD int32_t checked_slot(const int32_t* list, int32_t e, int32_t slots, DeviceErrorWord* errors, bool report) {
  int32_t slot = list[e];
  if (slot < -1 || slot >= slots) {
    if (report) record_device_error(errors, DeviceErrorCode::slot_out_of_range, e, slot);
    return -1;
  }
  for (int32_t m = 0; slot >= 0 && m < e; ++m) {
    if (list[m] == slot) {
      if (report) record_device_error(errors, DeviceErrorCode::slot_repeated, e, slot);
      return -1;
    }
  }
  return slot;
}

}  // namespace kdagraph
