// SPEC §1, §3: the T-token verify of one KDA layer for a batch of N rows.
//
// Each (row, value head) starts from its seed (pool[slot] or a scratch row, as RoundIndices says),
// applies the update for t = 1..T, writes every post-state to scratch row write_row[n][t] and every
// output o_t. Padded rows read nothing, write no state and output zeros.
#pragma once

#include <cstdint>

#include "kdagraph/types.hpp"
#include "kernels/indices.h"

namespace kdagraph {

struct VerifyParams {
  int32_t rows = 0;         // N
  int32_t tokens = 0;       // T
  int32_t heads = 0;        // H
  int32_t value_heads = 0;  // HV
  int32_t head_k = 0;       // K
  int32_t head_v = 0;       // V
  DType io_dtype = DType::f32;
  DType state_dtype = DType::f32;
  VerifyOptions options;

  const void* q = nullptr;     // [N, T, H, K]
  const void* k = nullptr;     // [N, T, H, K]
  const void* v = nullptr;     // [N, T, HV, V]
  const void* g = nullptr;     // [N, T, HV, K] log decay, or raw gate input
  const void* beta = nullptr;  // [N, T, HV]
  void* o = nullptr;           // [N, T, HV, V]
  const float* A_log = nullptr;    // [HV], gate in kernel only
  const float* dt_bias = nullptr;  // [HV * K], gate in kernel only

  const void* pool_layer = nullptr;  // this layer's [P, HV, V, K]
  void* scratch_layer = nullptr;     // this layer's [P * S, HV, V, K]: seeds are read from it too
  const int32_t* seed_pool = nullptr;
  const int32_t* seed_scratch = nullptr;
  const int32_t* write_row = nullptr;
};

// Host backend: both cores over the independent (row, head) units. Runs now.
void verify_cpu(const VerifyParams& p);

}  // namespace kdagraph

#if defined(KDAGRAPH_WITH_CUDA)
#include <cuda_runtime_api.h>
namespace kdagraph {
// Head dims the CUDA kernel is built for (SPEC §1: at least K = V = 128 and 64).
bool verify_cuda_supports(int32_t head_k, int32_t head_v);
// Enqueues the verify on `stream`; allocates nothing, never synchronizes.
cudaError_t launch_verify(const VerifyParams& p, cudaStream_t stream);
}  // namespace kdagraph
#endif
