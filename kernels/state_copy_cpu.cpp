// CPU implementation of the state copies (docs/modes.md), compiled once per instruction set (kernels/cpu_isa.h).
#include <cstring>

#include "kernels/cpu_isa.h"
#include "kernels/state_copy.h"

KDAGRAPH_CPU_ISA_BEGIN

void copy_accepted_states_cpu(const StateCopyParams& p) {
  const size_t bytes = size_t(p.row_elems) * size_t(elem_bytes(p.pool.dtype));
  const int64_t units = int64_t(p.pool.layers) * p.count;
#pragma omp parallel for schedule(static) num_threads(cpu_threads())
  for (int64_t u = 0; u < units; ++u) {
    const int32_t layer = int32_t(u / p.count), e = int32_t(u % p.count);
    const CopyRows rows = copy_rows(p, e, layer, layer == 0, true);
    if (rows.dst == nullptr) continue;
    std::memcpy(rows.dst, rows.src, bytes);
    count_bytes(p.bytes_moved, 2 * int64_t(bytes));
  }
}

void reset_accept_len_cpu(const StateCopyParams& p) {
  for (int32_t e = 0; e < p.count; ++e) reset_slot(p, e);
}

KDAGRAPH_CPU_ISA_END
