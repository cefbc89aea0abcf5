// SPEC §1 on the device: one lane's part of a token update. A lane holds a 4-element slice of K of kRows
// state rows (kernels/verify.cu); sums over K are the lane's own products, then a butterfly across its
// lane group. Every value is the element arithmetic of kernels/kda_math.h, the CPU's [TAG_UPDATE_ORDER].
//
// The update is cut into the pieces the kernel interleaves across tokens: token t's output sum and token
// t + 1's projection sum both read S_t, so they share one butterfly (sums_pair) instead of two in a row.
// Each sum still adds the same products in the same butterfly order, so the values are unchanged.
#pragma once

#include <cstdint>

#include "kernels/kda_math.h"

namespace kdagraph::verify_detail {

using math::bf16;

constexpr int kWarpSize = 32;
constexpr int kSlice = 4;  // state elements of one V row per lane

// A lane's slice of one state row: 16 bytes in fp32, 8 in bf16. The .cg intrinsics keep the vector
// width (a plain dereference may be split into scalar stores) and go through L2 only: the seed may be
// a row this same launch writes (SPEC §3), so neither the read-only path nor L1 may serve it.
__device__ __forceinline__ void load_slice(const float* src, float (&x)[kSlice]) {
  const float4 w = __ldcg(reinterpret_cast<const float4*>(src));
  x[0] = w.x;
  x[1] = w.y;
  x[2] = w.z;
  x[3] = w.w;
}

__device__ __forceinline__ void load_slice(const bf16* src, float (&x)[kSlice]) {
  const uint2 w = __ldcg(reinterpret_cast<const uint2*>(src));
  x[0] = math::to_f32(bf16{uint16_t(w.x & 0xffffu)});
  x[1] = math::to_f32(bf16{uint16_t(w.x >> 16)});
  x[2] = math::to_f32(bf16{uint16_t(w.y & 0xffffu)});
  x[3] = math::to_f32(bf16{uint16_t(w.y >> 16)});
}

__device__ __forceinline__ void store_slice(float* dst, const float (&x)[kSlice]) {
  __stcg(reinterpret_cast<float4*>(dst), make_float4(x[0], x[1], x[2], x[3]));
}

__device__ __forceinline__ void store_slice(bf16* dst, const float (&x)[kSlice]) {
  const auto bits = [](float f) { return uint32_t(math::f32_to_bf16(f).bits); };
  __stcg(reinterpret_cast<uint2*>(dst),
         make_uint2(bits(x[0]) | bits(x[1]) << 16, bits(x[2]) | bits(x[3]) << 16));
}

// A lane's slice of a staged fp32 vector (shared memory).
__device__ __forceinline__ void load4(const float* src, float (&x)[kSlice]) {
  const float4 w = *reinterpret_cast<const float4*>(src);
  x[0] = w.x;
  x[1] = w.y;
  x[2] = w.z;
  x[3] = w.w;
}

// Sums over the kLanes lanes of an aligned lane group, of kRows values at once (their shuffles are
// independent, so they overlap). The butterfly gives every lane the same bits (each pairwise sum is
// commutative), so all lanes go on with one value.
template <int kLanes, int kRows>
__device__ __forceinline__ void group_sums(float (&x)[kRows]) {
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) x[r] += __shfl_xor_sync(0xffffffffu, x[r], offset);
  }
}

// The same over two sets of kRows values in one butterfly: each value bitwise as group_sums gives it.
template <int kLanes, int kRows>
__device__ __forceinline__ void group_sums_pair(float (&x)[kRows], float (&y)[kRows]) {
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      x[r] += __shfl_xor_sync(0xffffffffu, x[r], offset);
      y[r] += __shfl_xor_sync(0xffffffffu, y[r], offset);
    }
  }
}

// [TAG_UPDATE_ORDER] A token's update of a lane's kRows rows, in two pieces around the sum of p:
//   decay_and_project: S' = a S, and the lane's part of p = sum S' k;
//   apply_delta:       u = beta (v - p), S = S' + k u.
template <int kRows>
__device__ __forceinline__ void decay_and_project(float (&s)[kRows][kSlice], const float (&a)[kSlice],
                                                  const float (&k)[kSlice], float (&proj)[kRows]) {
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    proj[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < kSlice; ++c) {
      s[r][c] = math::decayed(s[r][c], a[c]);
      proj[r] = math::accumulate(proj[r], s[r][c], k[c]);
    }
  }
}

template <int kRows, class IoT>
__device__ __forceinline__ void apply_delta(float (&s)[kRows][kSlice], const float (&k)[kSlice], float beta,
                                            const IoT* v, const float (&proj)[kRows]) {
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const float u = math::delta(beta, math::to_f32(v[r]), proj[r]);
#pragma unroll
    for (int c = 0; c < kSlice; ++c) s[r][c] = math::rank1_update(s[r][c], k[c], u);
  }
}

// The lane's part of o = S q for each of its rows.
template <int kRows>
__device__ __forceinline__ void output_partial(const float (&s)[kRows][kSlice], const float (&q)[kSlice],
                                               float (&out)[kRows]) {
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    out[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < kSlice; ++c) out[r] = math::accumulate(out[r], s[r][c], q[c]);
  }
}

}  // namespace kdagraph::verify_detail
