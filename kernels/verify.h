// SPEC §1, §3: the T-token verify of one KDA layer for a batch of N rows.
//
// Each (row, value head) starts from its seed (pool[slot] or a scratch row, as RoundIndices says),
// applies the update for t = 1..T, writes every post-state to scratch row write_row[n][t] (a negative
// row: not written) and every output o_t. Padded rows read nothing, write no state and output zeros.
#pragma once

#include <cstdint>
#include <string>

#include "kdagraph/types.hpp"
#include "kernels/device_error.h"
#include "kernels/layout.h"

namespace kdagraph {

struct VerifyParams {
  int32_t rows = 0;         // N
  int32_t tokens = 0;       // T
  int32_t heads = 0;        // H
  int32_t value_heads = 0;  // HV
  int32_t head_k = 0;       // K
  int32_t head_v = 0;       // V
  DType io_dtype = DType::f32;  // of q, k, v, g, beta and o; the state dtype is pool.dtype
  VerifyOptions options;

  const void* q = nullptr;     // [N, T, H, K]
  const void* k = nullptr;     // [N, T, H, K]
  const void* v = nullptr;     // [N, T, HV, V]
  const void* g = nullptr;     // [N, T, HV, K] log decay, or raw gate input
  const void* beta = nullptr;  // [N, T, HV]
  void* o = nullptr;           // [N, T, HV, V]
  const float* A_log = nullptr;    // [HV], gate in kernel only
  const float* dt_bias = nullptr;  // [HV * K], gate in kernel only

  // Layer `layer` of the views: seeds come from pool row seed_pool[n] or scratch row seed_scratch[n],
  // post-states go to scratch rows write_row[n][t].
  StateView pool;
  StateView scratch;
  int32_t layer = 0;
  const int32_t* seed_pool = nullptr;     // [N]
  const int32_t* seed_scratch = nullptr;  // [N]
  const int32_t* write_row = nullptr;     // [N, T]
  DeviceErrorWord* errors = nullptr;      // a layer base the device finds invalid is recorded here
};

// The seed of row n in layer p.layer, or nullptr for a padded row. A real row whose layer bases are
// invalid (a bad entry in a device-resident table) is treated as padding, and recorded when `report`.
template <class StateT>
KDA_HD const StateT* verify_seed(const VerifyParams& p, int32_t n, bool report) {
  const int32_t seed_pool = p.seed_pool[n], seed_scratch = p.seed_scratch[n];
  if (seed_pool < 0 && seed_scratch < 0) return nullptr;
  char* pool = layer_base(p.pool, p.layer);
  char* scratch = layer_base(p.scratch, p.layer);
  if ((seed_pool >= 0 && pool == nullptr) || scratch == nullptr) {
    if (report) record_device_error(p.errors, DeviceErrorCode::layer_base_invalid, n, p.layer);
    return nullptr;
  }
  return reinterpret_cast<const StateT*>(seed_pool >= 0 ? state_row(pool, p.pool, seed_pool)
                                                        : state_row(scratch, p.scratch, seed_scratch));
}

// Host backend: both cores over the independent (row, head) units. Runs now.
void verify_cpu(const VerifyParams& p);

}  // namespace kdagraph

#if defined(KDAGRAPH_WITH_CUDA)
#include <cuda_runtime_api.h>
namespace kdagraph {
// Head dims the CUDA kernel is built for (SPEC §1: at least K = V = 128 and 64).
bool verify_cuda_supports(int32_t head_k, int32_t head_v);
// Enqueues the verify on `stream`; allocates nothing, never synchronizes. Throws InvalidArgument, naming
// the check and the value, for parameters the kernel is not built for.
cudaError_t launch_verify(const VerifyParams& p, cudaStream_t stream);
}  // namespace kdagraph
#endif

namespace kdagraph {
struct VerifyOp {
  using Params = VerifyParams;
  static constexpr const char* kName = "verify";
  static void cpu(const Params& p) { verify_cpu(p); }
#if defined(KDAGRAPH_WITH_CUDA)
  static cudaError_t cuda(const Params& p, cudaStream_t s) { return launch_verify(p, s); }
#endif
  static std::string shape(const Params& p) {
    return "layer=" + std::to_string(p.layer) + " rows=" + std::to_string(p.rows) + " T=" + std::to_string(p.tokens) +
           " H=" + std::to_string(p.heads) + " HV=" + std::to_string(p.value_heads) + " K=" + std::to_string(p.head_k) +
           " V=" + std::to_string(p.head_v);
  }
};
}  // namespace kdagraph
