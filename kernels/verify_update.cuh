// docs/math.md on the device: one lane's part of a token update, for every tile shape of the verify kernel
// family (kernels/verify_kernel.cuh). Every value is the element arithmetic of kernels/kda_math.h, the
// CPU's [TAG_UPDATE_ORDER].
//
// [TAG_VERIFY_TILE] The shape of a tile is a compile-time choice (VerifyTile): kLanes lanes share a V
// row (a lane group), each holding kChunks chunks of 4 key channels of each of its kRows rows; kWarps
// warps make a block. Every shape computes the same bits: a sum over K is fixed as K / 4 chunk sums
// (each chunk's own chain of multiply-adds), combined by one butterfly tree over the chunks, whose steps
// wider than the lane group a lane takes in its own registers and the rest by shuffles. The lane of
// group lane l holds chunks l, l + kLanes, l + 2 kLanes, ... (channel (l + j kLanes) * 4), so each load
// and store of a chunk is coalesced across the group. Since IEEE addition commutes, each in-lane step
// gives what the shuffle it replaces gives. So a bucket's graph and an eager call of fewer rows, which
// may run different shapes, agree bitwise.
#pragma once

#include <cstdint>

#include "kernels/kda_math.h"
#include "kernels/rounding.h"

namespace kdagraph::verify_detail {

using math::bf16;
using math::f16;

constexpr int kWarpSize = 32;
constexpr int kSlice = 4;  // key channels of one chunk

// How a token's output is summed (docs/math.md gives o = S_t q):
//   decayed_state: one pass over the lane's slice sums both S'k and S'q (S' = a S, the decayed state),
//                  and o = S'q + u (k . q): one butterfly per token, no pass after the rank-1 update.
//                  The library's formula; kernels/verify_cpu.cpp computes the same one. (The formula
//                  before issue 31, o = S_t q, lost its last sweep member in issue 47 and its branch
//                  with the replay ring, issue 48.)
enum class OutputFormula { decayed_state };

// What the sweep's probes leave out, to split a verify's time by difference (profiling/
// bench_verify_sweep.cu); the library launches VerifyProbe::none only.
enum class VerifyProbe {
  none,
  no_state_stores,  // no post-state and no pool writeback: the time the state stores take
  prologue_only,    // no token loop: the seed read, the index and input round trips and the staging
};

// How a launch's blocks take its units (row, value head, tile): the library launches a block per unit;
// the sweep also times persistent blocks, as many as the device holds at once (multiprocessors x
// Tile::kMinBlocksPerSm), each working through units gridDim.x apart with the next unit's seed tile in
// flight (cp.async into dynamic shared memory) while the current one's tokens run, so that the reads in
// flight no longer stop at one seed tile a resident block (issue 31: replay, large batches).
enum class VerifySchedule { block_a_unit, persistent };

template <int K, int kLanes_, int kRows_, int kWarps_, int kMinBlocksPerSm_>
struct VerifyTile {
  static constexpr int kHeadDim = K;
  static constexpr int kLanes = kLanes_;    // lanes of a group, sharing a V row
  static constexpr int kRows = kRows_;      // V rows of a group
  static constexpr int kWarps = kWarps_;
  static constexpr int kMinBlocksPerSm = kMinBlocksPerSm_;
  static constexpr int kChunks = K / kSlice / kLanes;  // chunks of a row a lane holds
  static constexpr int kGroupsPerWarp = kWarpSize / kLanes;
  static constexpr int kThreads = kWarps * kWarpSize;
  static constexpr int kTileV = kWarps * kGroupsPerWarp * kRows;
  static constexpr int kTilesPerHead = K / kTileV;
  static_assert(kLanes >= 1 && kLanes <= kWarpSize && kWarpSize % kLanes == 0, "a lane group lies in one warp");
  static_assert(K % (kSlice * kLanes) == 0 && (kChunks & (kChunks - 1)) == 0,
                "a row is a power-of-two number of chunks a lane");
  static_assert(K % kTileV == 0, "tiles cover a head exactly");
};

// A lane's chunk of one state row: 16 bytes in fp32, 8 in bf16 or f16. The .cg intrinsics keep the vector
// width (a plain dereference may be split into scalar stores) and go through L2 only: the seed may be
// a row this same launch writes (docs/modes.md), so neither the read-only path nor L1 may serve it.
__device__ __forceinline__ void load_slice(const float* src, float (&x)[kSlice]) {
  const float4 w = __ldcg(reinterpret_cast<const float4*>(src));
  x[0] = w.x;
  x[1] = w.y;
  x[2] = w.z;
  x[3] = w.w;
}

// Four 16-bit values (bf16 or f16), as one 8-byte word holds them, in fp32.
template <class T>
__device__ __forceinline__ void unpack16x4(uint2 w, float (&x)[kSlice]) {
  x[0] = math::to_f32(T{uint16_t(w.x & 0xffffu)});
  x[1] = math::to_f32(T{uint16_t(w.x >> 16)});
  x[2] = math::to_f32(T{uint16_t(w.y & 0xffffu)});
  x[3] = math::to_f32(T{uint16_t(w.y >> 16)});
}

__device__ __forceinline__ void load_slice(const bf16* src, float (&x)[kSlice]) {
  unpack16x4<bf16>(__ldcg(reinterpret_cast<const uint2*>(src)), x);
}
__device__ __forceinline__ void load_slice(const f16* src, float (&x)[kSlice]) {
  unpack16x4<f16>(__ldcg(reinterpret_cast<const uint2*>(src)), x);
}

// Stores a chunk. `streaming`: a post-state, which this round does not read again (the next round
// reads one of them, long after the other layers have passed through L2): evict-first. Otherwise (the
// pool row replay writes back) through L2 as a plain store.
// A 16-bit state is rounded (docs/low_precision.md) to nearest in pairs (the hardware's cvt.rn.*x2.f32 on the
// device), or, kStochastic, with the four draws `draws` gives the chunk's element group `group` (its
// first element of the head, over 4). `keep`: x becomes the values stored (a flush goes on from the
// state as it reads back). Stochastic rounding is a kernel of its own (kernels/verify_stochastic.cu):
// its generator's registers stay out of the nearest-rounding kernels.
template <bool kStochastic>
__device__ __forceinline__ void store_slice(float* dst, float (&x)[kSlice], bool streaming, const math::StoreDraws&,
                                            uint32_t, bool) {
  const float4 w = make_float4(x[0], x[1], x[2], x[3]);
  if (streaming) __stcs(reinterpret_cast<float4*>(dst), w);
  else __stcg(reinterpret_cast<float4*>(dst), w);
}

template <bool kStochastic, class T>
__device__ __forceinline__ void store_slice(T* dst, float (&x)[kSlice], bool streaming, const math::StoreDraws& draws,
                                            uint32_t group, bool keep) {
  uint32_t pair[2];
  if constexpr (kStochastic) {
    uint32_t random[kSlice];
    draws.draw4(group, random);
    uint16_t bits[kSlice];
#pragma unroll
    for (int e = 0; e < kSlice; ++e) bits[e] = math::round_state<T>(x[e], true, random[e]).bits;
    pair[0] = uint32_t(bits[0]) | uint32_t(bits[1]) << 16;
    pair[1] = uint32_t(bits[2]) | uint32_t(bits[3]) << 16;
  } else {
    pair[0] = math::pack2_rn<T>(x[0], x[1]);
    pair[1] = math::pack2_rn<T>(x[2], x[3]);
  }
  const uint2 w = make_uint2(pair[0], pair[1]);
  if (streaming) __stcs(reinterpret_cast<uint2*>(dst), w);
  else __stcg(reinterpret_cast<uint2*>(dst), w);
  if (keep) unpack16x4<T>(w, x);
}

// A lane's chunk of a staged fp32 vector (shared memory).
__device__ __forceinline__ void load4(const float* src, float (&x)[kSlice]) {
  const float4 w = *reinterpret_cast<const float4*>(src);
  x[0] = w.x;
  x[1] = w.y;
  x[2] = w.z;
  x[3] = w.w;
}

// A chunk of state as a cp.async left it in shared memory (the persistent schedule's next seed).
__device__ __forceinline__ void load_staged_slice(const float* src, float (&x)[kSlice]) { load4(src, x); }

__device__ __forceinline__ void load_staged_slice(const bf16* src, float (&x)[kSlice]) {
  unpack16x4<bf16>(*reinterpret_cast<const uint2*>(src), x);
}
__device__ __forceinline__ void load_staged_slice(const f16* src, float (&x)[kSlice]) {
  unpack16x4<f16>(*reinterpret_cast<const uint2*>(src), x);
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

// The butterfly steps wider than the lane group, in the lane's registers: chunk j meets chunk
// j + half, as lane (l + j kLanes) would meet lane (l + (j + half) kLanes) at that step. out[r] is row
// r's sum over the lane's chunks, as the shuffles below the group's width expect it.
template <int kChunks, int kRows>
__device__ __forceinline__ void chunk_sums(float (&x)[kRows][kChunks], float (&out)[kRows]) {
#pragma unroll
  for (int half = kChunks / 2; half > 0; half /= 2) {
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int j = 0; j < half; ++j) x[r][j] = x[r][j] + x[r][j + half];
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) out[r] = x[r][0];
}

// A lane's slice of the state: kRows rows of kChunks chunks.
template <class Tile>
using StateSlice = float[Tile::kRows][Tile::kChunks][kSlice];

// Chunk j of a staged K-vector, as lane `group_lane` holds it.
template <class Tile>
__device__ __forceinline__ int chunk_channel(int group_lane, int j) {
  return (group_lane + j * Tile::kLanes) * kSlice;
}

// [TAG_UPDATE_ORDER] S' = a S, and the lane's parts of p = sum S' k and of sum S' q.
template <class Tile>
__device__ __forceinline__ void decay_and_project(StateSlice<Tile>& s, const float* a, const float* k, const float* q,
                                                  int group_lane, float (&proj)[Tile::kRows],
                                                  float (&qproj)[Tile::kRows]) {
  constexpr int R = Tile::kRows, C = Tile::kChunks;
  float pk[R][C], pq[R][C];
#pragma unroll
  for (int j = 0; j < C; ++j) {
    const int i = chunk_channel<Tile>(group_lane, j);
    float aj[kSlice], kj[kSlice], qj[kSlice];
    load4(a + i, aj);
    load4(k + i, kj);
    load4(q + i, qj);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      pk[r][j] = 0.0f;
      pq[r][j] = 0.0f;
#pragma unroll
      for (int c = 0; c < kSlice; ++c) {
        s[r][j][c] = math::decayed(s[r][j][c], aj[c]);
        pk[r][j] = math::accumulate(pk[r][j], s[r][j][c], kj[c]);
        pq[r][j] = math::accumulate(pq[r][j], s[r][j][c], qj[c]);
      }
    }
  }
  chunk_sums<C, R>(pk, proj);
  chunk_sums<C, R>(pq, qproj);
}

// u = beta (v - p), S = S' + k u, for each of the lane's rows; u[r] is returned for the output.
template <class Tile, class IoT>
__device__ __forceinline__ void apply_delta(StateSlice<Tile>& s, const float* k, float beta, const IoT* v,
                                            const float (&proj)[Tile::kRows], int group_lane,
                                            float (&u)[Tile::kRows]) {
  constexpr int R = Tile::kRows, C = Tile::kChunks;
#pragma unroll
  for (int r = 0; r < R; ++r) u[r] = math::delta(beta, math::to_f32(v[r]), proj[r]);
#pragma unroll
  for (int j = 0; j < C; ++j) {
    float kj[kSlice];
    load4(k + chunk_channel<Tile>(group_lane, j), kj);
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int c = 0; c < kSlice; ++c) s[r][j][c] = math::rank1_update(s[r][j][c], kj[c], u[r]);
  }
}

// [TAG_UPDATE_ORDER] A ring record folded into the lane's rows (docs/modes.md replay): S = a S, then
// S = S + k u with the record's u of each row, element by element decay_and_project and apply_delta's
// arithmetic, with no projection.
template <class Tile>
__device__ __forceinline__ void fold_record(StateSlice<Tile>& s, const float* a, const float* k,
                                            const float (&u)[Tile::kRows], int group_lane) {
  constexpr int R = Tile::kRows, C = Tile::kChunks;
#pragma unroll
  for (int j = 0; j < C; ++j) {
    const int i = chunk_channel<Tile>(group_lane, j);
    float aj[kSlice], kj[kSlice];
    load4(a + i, aj);
    load4(k + i, kj);
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int c = 0; c < kSlice; ++c) s[r][j][c] = math::rank1_update(math::decayed(s[r][j][c], aj[c]), kj[c], u[r]);
  }
}

}  // namespace kdagraph::verify_detail
