#include <cstring>

#include "kernels/state_copy.h"

namespace kdagraph {

void copy_accepted_states_cpu(const StateCopyParams& p) {
  const StateGeometry& geo = p.geometry;
  const size_t bytes = size_t(geo.slot_elems()) * dtype_size(p.state_dtype);
  auto* pool = static_cast<unsigned char*>(p.pool);
  const auto* scratch = static_cast<const unsigned char*>(p.scratch);
  const int64_t units = int64_t(geo.layers) * p.count;
#pragma omp parallel for schedule(static)
  for (int64_t u = 0; u < units; ++u) {
    const int32_t layer = int32_t(u / p.count), e = int32_t(u % p.count);
    const int32_t a = copy_source_accept(p, e, layer == 0);
    if (a <= 0) continue;
    const int32_t slot = p.slot_of[e];
    const int32_t row = scratch_row(slot, a - 1, geo.scratch_steps);
    std::memcpy(pool + geo.pool_offset(layer, slot, 0) * dtype_size(p.state_dtype),
                scratch + geo.scratch_offset(layer, row, 0) * dtype_size(p.state_dtype), bytes);
  }
}

void reset_accept_len_cpu(const StateCopyParams& p) {
  for (int32_t e = 0; e < p.count; ++e) {
    const int32_t slot = p.slot_of[e];
    if (slot >= 0 && slot < p.geometry.slots) p.accept_len[slot] = 0;
  }
}

}  // namespace kdagraph
