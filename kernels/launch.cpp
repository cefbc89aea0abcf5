// [TAG_LAUNCH_SEAM] The host half of the launch seam that is not a template: what the launchers ask of
// the current device (programmatic dependent launch, its multiprocessors), once per device.
#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <cstdint>

#include "kernels/launch.h"

namespace kdagraph::detail {

bool device_has_pdl() {
  // Per device ordinal: 0 not asked yet, 1 no, 2 yes. Asked once, read by every launch after.
  static std::array<std::atomic<int8_t>, 64> known{};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= int(known.size())) return false;
  int8_t k = known[size_t(device)].load(std::memory_order_relaxed);
  if (k == 0) {
    int major = 0;
    const bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess;
    k = ok && major >= 9 ? 2 : 1;
    known[size_t(device)].store(k, std::memory_order_relaxed);
  }
  return k == 2;
}

int device_multiprocessors() {
  // Per device ordinal: 0 not asked yet. A device that cannot say counts as one multiprocessor.
  static std::array<std::atomic<int32_t>, 64> known{};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= int(known.size())) return 1;
  int32_t count = known[size_t(device)].load(std::memory_order_relaxed);
  if (count == 0) {
    int sms = 0;
    count = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess && sms > 0 ? sms : 1;
    known[size_t(device)].store(count, std::memory_order_relaxed);
  }
  return count;
}

}  // namespace kdagraph::detail
