// [TAG_LAUNCH_SEAM] The host half of the launch seam that is not a template: whether the current device
// has programmatic dependent launch.
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

}  // namespace kdagraph::detail
