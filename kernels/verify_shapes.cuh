// [TAG_VERIFY_SHAPES] The tiles of the verify kernel family (kernels/verify_update.cuh, VerifyTile) that
// the library launches: kernels/verify.cu picks one per launch with verify_tiling (kernels/verify.h),
// kernels/verify_tree.cu launches token trees on the narrow one. profiling/bench_verify_sweep.cu times
// them against the rest of the family on a GPU; profiling/README.md says which won and why these.
#pragma once

#include <cuda_runtime.h>

#include "kernels/launch.h"
#include "kernels/verify.h"
#include "kernels/verify_update.cuh"

namespace kdagraph::verify_detail {

// Until a GPU sweep has chosen (issue 31), the wide tiles are the tallest whose blocks fit two to an SM
// without spilling (at most 128 registers a thread): the per-block prologue (the index and input round
// trips, the preprocessing) is paid once per 64 V rows rather than per 16, and 32 KB of seed (K = 128)
// is in flight per block. A whole head of K = 128 in one 256-thread block would hold 64 state floats a
// thread and spill.
template <int K>
struct LibraryTiles;
// The short conv fused in (one kernel per layer) runs the narrow tile whatever the batch, with its own
// register budget: its row and window bookkeeping stays live through the token loop, and at K = 128
// four blocks an SM (128 registers a thread) spill with fp32 state, three do not.
// Stochastic rounding (docs/low_precision.md) runs the narrow tile at two blocks an SM whatever the batch, the conv
// fused or not, chains and trees: its generator (Philox, about 10 registers at each state store) spills
// the tiles' nearest-rounding budgets.
template <>
struct LibraryTiles<128> {
  using narrow = VerifyTile<128, 32, 4, 4, 4>;  // 16 rows, 128 threads: 8 blocks a head
  using wide = VerifyTile<128, 16, 4, 8, 2>;    // 64 rows, 256 threads: 2 blocks a head
  using fused = VerifyTile<128, 32, 4, 4, 3>;   // narrow, three blocks an SM
  using stochastic = VerifyTile<128, 32, 4, 4, 2>;
};
template <>
struct LibraryTiles<64> {
  using narrow = VerifyTile<64, 16, 2, 4, 4>;  // 16 rows, 128 threads: 4 blocks a head
  using wide = VerifyTile<64, 16, 4, 8, 2>;    // a whole head, 256 threads
  using fused = narrow;
  using stochastic = VerifyTile<64, 16, 2, 4, 2>;
};

// The verify of a token tree (TAG_TREE), compiled in kernels/verify_tree.cu: its branch states are in
// dynamic shared memory (launch_verify_tiles sizes it by T).
template <int K, class IoT, class StateT>
cudaError_t launch_tree(const VerifyParams& p, Launch on);

// Stochastic rounding into a 16-bit state (docs/low_precision.md), chains and trees, the conv fused or not, compiled
// in kernels/verify_stochastic.cu for io of the state's dtype (bf16 or f16) and K = 64, 128.
template <int K, class IoT, class StateT>
cudaError_t launch_stochastic(const VerifyParams& p, Launch on);

}  // namespace kdagraph::verify_detail
