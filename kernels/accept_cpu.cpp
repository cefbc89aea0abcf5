#include "kernels/accept.h"

#include "kernels/kda_math.h"

namespace kdagraph {

void accept_cpu(const AcceptParams& p) {
  for (int32_t n = 0; n < p.rows; ++n) accept_row(p, n);
}

void compact_ring_cpu(const RingCompactParams& p, DType io_dtype) {
  for (int32_t n = 0; n < p.rows; ++n)
    for (int32_t l = 0; l < p.layers; ++l) {
      // Records move as bits: one 2-byte instance serves bf16 and f16.
      if (io_dtype == DType::f32) compact_ring_records<float>(p, n, l, 0, 1);
      else compact_ring_records<math::bf16>(p, n, l, 0, 1);
    }
}

}  // namespace kdagraph
