// SPEC §1, §3: the T-token verify on the device.
//
// One block is one unit of work: (row n, value head h, tile of kTileV consecutive V rows). Its threads
// hold that tile of the state in registers for all T tokens: a lane group of K/4 lanes shares one V
// row, each lane keeping a 4-element slice of K (16 bytes of fp32), and each group keeps kRows rows.
// Sums over K are the lane's own 4 products, then __shfl_xor_sync across its group; everything else
// is the element arithmetic of kernels/kda_math.h, the same functions the CPU runs [TAG_UPDATE_ORDER].
//
// Memory: the seed tile is read once and every post-state written once (the 1 + T transfers of
// SPEC §7). The small per-token inputs are copied into shared memory kChunkTokens tokens at a time with
// cp.async, issued together with the seed loads, so a chunk costs one memory round trip and no
// registers; then the block preprocesses them once (L2 norm and scale of q and k, the gate, beta)
// rather than once per lane group.
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kdagraph/error.hpp"
#include "kernels/kda_math.h"
#include "kernels/launch.cuh"
#include "kernels/launch_checks.h"
#include "kernels/verify.h"

namespace kdagraph {
namespace {

using math::bf16;

constexpr int kWarpSize = 32;
constexpr int kSlice = 4;        // state elements of one V row per lane
constexpr int kChunkTokens = 8;  // tokens staged in shared memory at a time
constexpr int kVecBytes = 16;    // one cp.async

// Tile shape for head dim K (= V) with kRows V rows per lane group. Four warps per block; at K = 128 a
// tile is 16 rows, so batch 1 with HV = 16 still launches 128 blocks.
// [TAG_VERIFY_TILE] profiling/bench_verify_cuda.cu's traffic-only twin repeats this grid at K = 128.
template <int K, int kRows>
struct VerifyTile {
  static constexpr int kGroupLanes = K / kSlice;  // 32 at K = 128, 16 at K = 64
  static constexpr int kGroupsPerWarp = kWarpSize / kGroupLanes;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * kWarpSize;
  static constexpr int kTileV = kWarps * kGroupsPerWarp * kRows;
  static constexpr int kTilesPerHead = K / kTileV;
  static_assert(kGroupLanes <= kWarpSize && kWarpSize % kGroupLanes == 0, "a lane group lies in one warp");
  static_assert(K % kTileV == 0, "tiles cover a head exactly");
  static_assert(K <= kThreads, "one thread per key channel when staging dt_bias");
};

// Rows per lane group for each supported head dim: 16-row tiles at both.
template <int K>
struct VerifyConfig;
template <>
struct VerifyConfig<128> {
  static constexpr int kRows = 4;
};
template <>
struct VerifyConfig<64> {
  static constexpr int kRows = 2;
};

// Up to kChunkTokens tokens of inputs. The *_in arrays are the io-dtype bytes as copied; q, k and a are
// what the update reads: q and k times their qk_multiplier, a the per-channel decay factor.
template <int K, int kTileV, class IoT>
struct alignas(kVecBytes) StagedTokens {
  IoT q_in[kChunkTokens][K];
  IoT k_in[kChunkTokens][K];
  IoT g_in[kChunkTokens][K];
  IoT v[kChunkTokens][kTileV];  // the tile's rows, converted where read
  float q[kChunkTokens][K];
  float k[kChunkTokens][K];
  float a[kChunkTokens][K];
  float dt_bias[K];
  float a_log;
  float beta[kChunkTokens];
  int32_t write_row[kChunkTokens];
  static_assert(K * sizeof(IoT) % kVecBytes == 0 && kTileV * sizeof(IoT) % kVecBytes == 0,
                "rows copy in whole 16-byte vectors");
};

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

// Sum over the kLanes lanes of an aligned lane group. The butterfly gives every lane the same bits
// (each pairwise sum is commutative), so all lanes go on with one value.
template <int kLanes>
__device__ __forceinline__ float group_sum(float x) {
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// The row a block works on: its launch row, value head, its query/key head, the tile's first V row,
// what the row does (verify_row) and where its inputs come from.
struct BlockRow {
  int32_t n, h, hq, v0;
  VerifyRow r;
  const char* cache_from;  // the cache row holding the replayed tokens
  char* cache_to;          // the cache row the new tokens' inputs go to, or null
};

// Token u of a block's token list, as pointers to its (head's) vectors: the first r.replay tokens are
// in the cache row, the rest in the layer's inputs [TAG_TOKEN_CACHE]. q is null for cached tokens.
template <class IoT>
struct TokenPtrs {
  const IoT *q, *k, *g, *v, *beta;
};

template <int K, class IoT>
__device__ __forceinline__ TokenPtrs<IoT> token_ptrs(const VerifyParams& p, const BlockRow& b, int32_t u) {
  constexpr int V = K;
  const int32_t HV = p.value_heads;
  if (u < b.r.replay) {
    const TokenCacheLayout c{p.cache_tokens, p.heads, HV, K, V};
    const IoT* row = reinterpret_cast<const IoT*>(b.cache_from);
    return {nullptr, row + c.k_offset(u, b.hq), row + c.g_offset(u, b.h), row + c.v_offset(u, b.h) + b.v0,
            row + c.beta_offset(u, b.h)};
  }
  const int64_t tok = int64_t(b.n) * p.tokens + (u - b.r.replay);
  const int64_t qk = (tok * p.heads + b.hq) * K;
  return {static_cast<const IoT*>(p.q) + qk, static_cast<const IoT*>(p.k) + qk,
          static_cast<const IoT*>(p.g) + (tok * HV + b.h) * K, static_cast<const IoT*>(p.v) + (tok * HV + b.h) * V + b.v0,
          static_cast<const IoT*>(p.beta) + tok * HV + b.h};
}

// Starts the copies of tokens [u0, u0 + count) of the block's list into shared memory: q (new tokens
// only), k and g rows and the tile's v as 16-byte cp.async, the gate parameters once (u0 = 0), beta and
// write_row with plain loads.
template <int K, int kTileV, int kThreads, class IoT>
__device__ __forceinline__ void copy_tokens(const VerifyParams& p, const BlockRow& b, int32_t u0, int32_t count,
                                            StagedTokens<K, kTileV, IoT>& st) {
  constexpr int kElemsPerVec = kVecBytes / int(sizeof(IoT));
  constexpr int kRowVecs = K / kElemsPerVec;        // 16-byte vectors in one q, k or g row
  constexpr int kTileVecs = kTileV / kElemsPerVec;  // ... in the tile's part of one v row
  const int tid = int(threadIdx.x);

  for (int c = tid; c < count * kRowVecs; c += kThreads) {
    const int tt = c / kRowVecs, e = c % kRowVecs * kElemsPerVec;
    const TokenPtrs<IoT> t = token_ptrs<K, IoT>(p, b, u0 + tt);
    if (t.q != nullptr) __pipeline_memcpy_async(&st.q_in[tt][e], t.q + e, kVecBytes);
    __pipeline_memcpy_async(&st.k_in[tt][e], t.k + e, kVecBytes);
    __pipeline_memcpy_async(&st.g_in[tt][e], t.g + e, kVecBytes);
  }
  for (int c = tid; c < count * kTileVecs; c += kThreads) {
    const int tt = c / kTileVecs, e = c % kTileVecs * kElemsPerVec;
    __pipeline_memcpy_async(&st.v[tt][e], token_ptrs<K, IoT>(p, b, u0 + tt).v + e, kVecBytes);
  }
  if (u0 == 0 && p.dt_bias != nullptr && tid < K)
    __pipeline_memcpy_async(&st.dt_bias[tid], p.dt_bias + int64_t(b.h) * K + tid, sizeof(float));
  if (u0 == 0 && p.A_log != nullptr && tid == 0)
    __pipeline_memcpy_async(&st.a_log, p.A_log + b.h, sizeof(float));
  __pipeline_commit();
  if (tid < count) {
    const int32_t u = u0 + tid;
    st.beta[tid] = math::beta_value(p.options, math::to_f32(*token_ptrs<K, IoT>(p, b, u).beta));
    const bool report = b.h == 0 && b.v0 == 0;
    st.write_row[tid] = u >= b.r.replay ? post_state_row(p, b.n, u - b.r.replay, report) : -1;
  }
}

// Once a chunk has landed: the new tokens' inputs, as given, into the cache row for the next round's
// replay. The tile's v rows are this block's; k, g and beta are shared by the tiles of a value head (and
// k by the G value heads of a query head), so one block writes each.
template <int K, int kTileV, int kThreads, class IoT>
__device__ __forceinline__ void store_new_tokens(const VerifyParams& p, const BlockRow& b, int32_t u0, int32_t count,
                                                 const StagedTokens<K, kTileV, IoT>& st) {
  if (b.cache_to == nullptr) return;
  constexpr int V = K;
  constexpr int kElemsPerVec = kVecBytes / int(sizeof(IoT));
  constexpr int kRowVecs = K / kElemsPerVec, kTileVecs = kTileV / kElemsPerVec;
  const TokenCacheLayout c{p.cache_tokens, p.heads, p.value_heads, K, V};
  IoT* row = reinterpret_cast<IoT*>(b.cache_to);
  const bool first_tile = b.v0 == 0, writes_k = first_tile && b.h % (p.value_heads / p.heads) == 0;
  const int tid = int(threadIdx.x);
  auto copy16 = [](IoT* dst, const IoT* src) { *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src); };
  for (int c16 = tid; c16 < count * kRowVecs; c16 += kThreads) {
    const int tt = c16 / kRowVecs, e = c16 % kRowVecs * kElemsPerVec, t = u0 + tt - b.r.replay;
    if (t < 0) continue;
    if (writes_k) copy16(row + c.k_offset(t, b.hq) + e, &st.k_in[tt][e]);
    if (first_tile) copy16(row + c.g_offset(t, b.h) + e, &st.g_in[tt][e]);
  }
  for (int c16 = tid; c16 < count * kTileVecs; c16 += kThreads) {
    const int tt = c16 / kTileVecs, e = c16 % kTileVecs * kElemsPerVec, t = u0 + tt - b.r.replay;
    if (t >= 0) copy16(row + c.v_offset(t, b.h) + b.v0 + e, &st.v[tt][e]);
  }
  if (first_tile && tid < count && u0 + tid >= b.r.replay)
    row[c.beta_offset(u0 + tid - b.r.replay, b.h)] = *token_ptrs<K, IoT>(p, b, u0 + tid).beta;
}

// Once the copies have landed: q (new tokens) and k times their qk_multiplier (one warp per vector, the
// L2 norm's sum of squares a warp-wide reduction), and the decay factor of every key channel.
template <int K, int kTileV, int kThreads, class IoT>
__device__ __forceinline__ void preprocess_tokens(const VerifyParams& p, const BlockRow& b, int32_t u0, int32_t count,
                                                  StagedTokens<K, kTileV, IoT>& st) {
  constexpr int kPerLane = K / kWarpSize;
  const int warp = int(threadIdx.x) / kWarpSize, lane = int(threadIdx.x) % kWarpSize;
  const float q_scale = math::query_scale(p.options, K);
  for (int task = warp; task < 2 * count; task += kThreads / kWarpSize) {
    const int tt = task / 2;
    const bool is_q = task % 2 == 0;
    if (is_q && u0 + tt < b.r.replay) continue;  // a cached token has no query (warp-uniform)
    const IoT* src = (is_q ? st.q_in[tt] : st.k_in[tt]) + lane * kPerLane;
    float x[kPerLane];
    float sum_sq = 0.0f;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      x[e] = math::to_f32(src[e]);
      sum_sq = math::accumulate(sum_sq, x[e], x[e]);
    }
    if (p.options.l2norm_qk) sum_sq = group_sum<kWarpSize>(sum_sq);
    const float mult = math::qk_multiplier(p.options.l2norm_qk, sum_sq, is_q ? q_scale : 1.0f);
    float* dst = (is_q ? st.q[tt] : st.k[tt]) + lane * kPerLane;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) dst[e] = x[e] * mult;
  }
  const float a_log = p.A_log != nullptr ? st.a_log : 0.0f;
  const bool has_dt_bias = p.dt_bias != nullptr;
  for (int e = int(threadIdx.x); e < count * K; e += kThreads) {
    const int tt = e / K, i = e % K;
    const float log_decay =
        math::log_decay(p.options, math::to_f32(st.g_in[tt][i]), a_log, has_dt_bias ? st.dt_bias[i] : 0.0f);
    st.a[tt][i] = math::decay_factor(log_decay);
  }
}

// [TAG_UPDATE_ORDER] One token's update of a lane's kRows state rows: S' = a*S; p = sum S'k;
// u = beta (v - p); S = S' + k u. Replayed and new tokens run this same function.
template <int kRows, int kGroupLanes, class IoT>
__device__ __forceinline__ void update_state(float (&s)[kRows][kSlice], const float (&a)[kSlice],
                                             const float (&k)[kSlice], float beta, const IoT* v) {
  float proj[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    proj[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < kSlice; ++c) {
      s[r][c] = math::decayed(s[r][c], a[c]);
      proj[r] = math::accumulate(proj[r], s[r][c], k[c]);
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) proj[r] = group_sum<kGroupLanes>(proj[r]);
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const float u = math::delta(beta, math::to_f32(v[r]), proj[r]);
#pragma unroll
    for (int c = 0; c < kSlice; ++c) s[r][c] = math::rank1_update(s[r][c], k[c], u);
  }
}

// o = S q for each of the lane's rows, summed over its lane group.
template <int kRows, int kGroupLanes>
__device__ __forceinline__ void output_rows(const float (&s)[kRows][kSlice], const float (&q)[kSlice],
                                            float (&out)[kRows]) {
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    out[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < kSlice; ++c) out[r] = math::accumulate(out[r], s[r][c], q[c]);
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) out[r] = group_sum<kGroupLanes>(out[r]);
}

__device__ __forceinline__ void load4(const float* src, float (&x)[kSlice]) {
  const float4 w = *reinterpret_cast<const float4*>(src);
  x[0] = w.x;
  x[1] = w.y;
  x[2] = w.z;
  x[3] = w.w;
}

template <int K, int kRows, class IoT, class StateT>
__global__ void __launch_bounds__(VerifyTile<K, kRows>::kThreads) verify_kernel(const VerifyParams p) {
  grid_dependency_wait();
  trigger_dependent_launch();
  using Tile = VerifyTile<K, kRows>;
  constexpr int V = K;
  auto& st = shared_object<StagedTokens<K, Tile::kTileV, IoT>>();

  const int32_t tile = int32_t(blockIdx.x) % Tile::kTilesPerHead;
  const int32_t unit = int32_t(blockIdx.x) / Tile::kTilesPerHead;
  BlockRow b;
  b.h = unit % p.value_heads;
  b.n = unit / p.value_heads;
  b.hq = b.h / (p.value_heads / p.heads);  // grouped heads: value head h reads q/k head h / G
  b.v0 = tile * Tile::kTileV;
  const int32_t T = p.tokens, HV = p.value_heads;
  // Where the tile's outputs start at new token 0, as an offset: with no new tokens (replay's
  // materialize) p.o is null, and offsetting a null pointer is undefined. Tokens are HV * V apart.
  const int64_t o_tile = (int64_t(b.n) * T * HV + b.h) * V + b.v0;
  const int32_t o_stride = HV * V;

  const bool report = tile == 0 && b.h == 0 && threadIdx.x == 0;
  b.r = verify_row(p, b.n, report);
  const VerifyBases bases = b.r.padded() ? VerifyBases{} : verify_bases(p, b.r, b.n, report);
  if (b.r.padded() || !bases.ok) {  // padded row: zeros out, nothing read, no state written
    for (int e = int(threadIdx.x); e < T * Tile::kTileV; e += Tile::kThreads)
      static_cast<IoT*>(p.o)[o_tile + e / Tile::kTileV * o_stride + e % Tile::kTileV] = math::from_f32<IoT>(0.0f);
    return;
  }
  b.cache_from = b.r.replay > 0 ? state_row(bases.cache, p.token_cache, b.r.replay_from) : nullptr;
  b.cache_to = b.r.cache_to >= 0 ? state_row(bases.cache, p.token_cache, b.r.cache_to) : nullptr;

  const int lane = int(threadIdx.x) % kWarpSize, warp = int(threadIdx.x) / kWarpSize;
  const int group_lane = lane % Tile::kGroupLanes;
  const int tile_row0 = (warp * Tile::kGroupsPerWarp + lane / Tile::kGroupLanes) * kRows;  // in the tile
  const int i0 = group_lane * kSlice;  // first key channel of this lane's slice
  const int64_t slice_offset = b.h * (int64_t(V) * K) + int64_t(b.v0 + tile_row0) * K + i0;

  // The whole seed tile is in registers before any state is written: the seed may be a scratch row
  // this verify overwrites, or the pool row the replay writes back (SPEC §3). Each element is read and
  // later written by the same thread only, and no other block touches this tile.
  const StateT* seed = verify_seed<StateT>(p, b.r, bases) + slice_offset;
  float s[kRows][kSlice];
#pragma unroll
  for (int r = 0; r < kRows; ++r) load_slice(seed + int64_t(r) * K, s[r]);

  // The token list: r.replay cached accepted tokens, then the T new ones.
  const int32_t U = b.r.replay + T;
  for (int32_t u0 = 0; u0 < U; u0 += kChunkTokens) {
    const int32_t count = U - u0 < kChunkTokens ? U - u0 : kChunkTokens;
    if (u0 > 0) __syncthreads();  // the previous chunk is consumed before it is overwritten
    copy_tokens<K, Tile::kTileV, Tile::kThreads, IoT>(p, b, u0, count, st);
    __pipeline_wait_prior(0);
    __syncthreads();
    store_new_tokens<K, Tile::kTileV, Tile::kThreads, IoT>(p, b, u0, count, st);
    preprocess_tokens<K, Tile::kTileV, Tile::kThreads, IoT>(p, b, u0, count, st);
    __syncthreads();

    for (int tt = 0; tt < count; ++tt) {
      const int32_t u = u0 + tt;
      float k[kSlice], a[kSlice];
      load4(&st.k[tt][i0], k);
      load4(&st.a[tt][i0], a);
      update_state<kRows, Tile::kGroupLanes>(s, a, k, st.beta[tt], &st.v[tt][tile_row0]);
      if (u < b.r.replay) {
        if (u == b.r.replay - 1) {  // the accepted prefix is applied: the pool holds it from now on
          StateT* pool_tile = const_cast<StateT*>(seed);
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            store_slice(pool_tile + int64_t(r) * K, s[r]);
#pragma unroll
            for (int c = 0; c < kSlice; ++c) s[r][c] = stored_value<StateT>(s[r][c]);
          }
        }
        continue;
      }
      float q[kSlice], out[kRows];
      load4(&st.q[tt][i0], q);
      output_rows<kRows, Tile::kGroupLanes>(s, q, out);
      IoT* out_rows = static_cast<IoT*>(p.o) + o_tile + (u - b.r.replay) * o_stride + tile_row0;
#pragma unroll
      for (int r = 0; r < kRows; ++r)  // lane r of the group writes row r's output, one store per lane
        if (group_lane == r) out_rows[r] = math::from_f32<IoT>(out[r]);
      const int32_t write_row = st.write_row[tt];
      if (write_row >= 0) {
        StateT* post = reinterpret_cast<StateT*>(state_row(bases.scratch, p.scratch, write_row)) + slice_offset;
#pragma unroll
        for (int r = 0; r < kRows; ++r) store_slice(post + int64_t(r) * K, s[r]);
      }
    }
  }
}

template <int K, class IoT, class StateT>
cudaError_t launch_tiles(const VerifyParams& p, Launch on) {
  using Tile = VerifyTile<K, VerifyConfig<K>::kRows>;
  const int64_t blocks = int64_t(p.rows) * p.value_heads * Tile::kTilesPerHead;
  require(blocks <= int64_t(INT32_MAX), "launch_verify", "rows", [&] {
    return "= " + std::to_string(p.rows) + " with HV = " + std::to_string(p.value_heads) + " needs " +
           std::to_string(blocks) + " blocks, more than a grid holds";
  });
  return launch_kernel(verify_kernel<K, VerifyConfig<K>::kRows, IoT, StateT>, unsigned(blocks), Tile::kThreads, on, p);
}

// The one place run-time sizes and dtypes become template parameters.
template <int K>
cudaError_t dispatch_dtypes(const VerifyParams& p, Launch on) {
  const bool io_f32 = p.io_dtype == DType::f32, state_f32 = p.pool.dtype == DType::f32;
  if (io_f32 && state_f32) return launch_tiles<K, float, float>(p, on);
  if (io_f32) return launch_tiles<K, float, bf16>(p, on);
  if (state_f32) return launch_tiles<K, bf16, float>(p, on);
  return launch_tiles<K, bf16, bf16>(p, on);
}

}  // namespace

bool verify_cuda_supports(int32_t head_k, int32_t head_v) {
  return head_k == head_v && (head_k == 64 || head_k == 128);
}

cudaError_t launch_verify(const VerifyParams& p, Launch on) {
  const char* where = "launch_verify";
  require(verify_cuda_supports(p.head_k, p.head_v), where, "head_k", [&] {
    return "= " + std::to_string(p.head_k) + " with head_v = " + std::to_string(p.head_v) +
           ": the CUDA verify is built for K = V = 64 and K = V = 128 only";
  });
  require_in_range(where, "rows", p.rows, 0, INT32_MAX);
  require_in_range(where, "tokens", p.tokens, p.slot_list != nullptr ? 0 : 1, INT32_MAX);
  require(p.heads >= 1 && p.value_heads >= 1 && p.value_heads % p.heads == 0, where, "value_heads", [&] {
    return "= " + std::to_string(p.value_heads) + " is not a positive multiple of heads = " + std::to_string(p.heads);
  });
  if (p.rows == 0) return cudaSuccess;
  // q, k, g and v rows move as 16-byte cp.async, state slices as 16- (fp32) or 8-byte (bf16) words from
  // 16-byte aligned rows, the gate parameters as 4-byte cp.async; cache rows like input rows.
  if (p.tokens > 0) {
    detail::require_buffer(where, "q", p.q, 16);
    detail::require_buffer(where, "k", p.k, 16);
    detail::require_buffer(where, "v", p.v, 16);
    detail::require_buffer(where, "g", p.g, 16);
    const uintptr_t io_bytes = p.io_dtype == DType::f32 ? 4 : 2;
    detail::require_buffer(where, "o", p.o, io_bytes);
    detail::require_buffer(where, "beta", p.beta, io_bytes);
  }
  if (p.slot_list == nullptr) {
    require(p.seed_token != nullptr || p.seed_pool != nullptr || p.seed_scratch != nullptr, where, "seed_pool",
            "is null, and so are seed_scratch and seed_token: no row has a seed");
    for (const int32_t* index : {p.seed_pool, p.seed_scratch, p.seed_token})
      if (index != nullptr) detail::require_buffer(where, "indices", index, 4);
  }
  if (p.writes_scratch) detail::require_buffer(where, "write_row", p.write_row, 4);
  const bool replay = p.replay_count != nullptr || p.slot_list != nullptr;
  const int64_t state_elems = int64_t(p.value_heads) * p.head_v * p.head_k;
  detail::require_state_view(where, "pool", p.pool, p.pool.dtype, state_elems);
  if (p.writes_scratch) detail::require_state_view(where, "scratch", p.scratch, p.pool.dtype, state_elems);
  if (replay)
    detail::require_state_view(where, "token_cache", p.token_cache, p.io_dtype,
                               TokenCacheLayout{p.cache_tokens, p.heads, p.value_heads, p.head_k, p.head_v}.row_elems());
  if (p.A_log != nullptr) detail::require_buffer(where, "A_log", p.A_log, 4);
  if (p.dt_bias != nullptr) detail::require_buffer(where, "dt_bias", p.dt_bias, 4);
  return p.head_k == 128 ? dispatch_dtypes<128>(p, on) : dispatch_dtypes<64>(p, on);
}

}  // namespace kdagraph
