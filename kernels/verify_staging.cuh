// docs/math.md, docs/modes.md, docs/conv.md on the device: how a verify block (kernels/verify_kernel.cuh) brings its tokens' inputs
// into shared memory, kChunkTokens tokens at a time. Each warp preprocesses whole tokens (L2 norm and
// scale of q and k, their dot product, the gate's decay of every key channel) from its own loads, once
// per block: with a head-wide tile, once per head. The tile's v rows come by cp.async, beta and the
// post-state rows by plain loads; one barrier then hands the chunk to the token loop.
//
// With the short convolution fused in (ConvStaging), a new token's q, k and v are not read: the block
// stages x for its channels (the q and k channels of its query/key head and the v channels of its tile)
// after the W - 1 inputs of its conv window, convolves them with conv_output_value of kernels/conv.h,
// and rounds y to the io dtype where the preprocessing and the token loop read it, so the rest of the
// verify sees bitwise what the conv operation followed by the verify sees. The owner of a channel
// writes its history [TAG_CONV_LAYOUT].
#pragma once

#include <cuda_pipeline.h>

#include <cstdint>
#include <cstring>

#include "kernels/conv.h"
#include "kernels/kda_math.h"
#include "kernels/verify.h"
#include "kernels/verify_update.cuh"

namespace kdagraph::verify_detail {

constexpr int kChunkTokens = 8;  // tokens staged in shared memory at a time
constexpr int kVecBytes = 16;    // one cp.async

// A chunk's inputs as the token loop reads them: q and k times their qk_multiplier, their dot product
// (OutputFormula::decayed_state), a the per-channel decay factor, the tile's v rows in the io dtype.
template <int K, int kTileV, class IoT>
struct alignas(kVecBytes) StagedTokens {
  IoT v[kChunkTokens][kTileV];
  float q[kChunkTokens][K];
  float k[kChunkTokens][K];
  float a[kChunkTokens][K];
  float kq[kChunkTokens];
  float beta[kChunkTokens];
  int32_t write_row[kChunkTokens];
  static_assert(kTileV * sizeof(IoT) % kVecBytes == 0, "v rows copy in whole 16-byte vectors");
};

// One 16-byte vector of io elements, from shared to global memory.
template <class IoT>
__device__ __forceinline__ void copy16(IoT* dst, const IoT* src) {
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
}

// The fused conv's inputs: the block's kChannels channels are three runs of x and of the conv state,
// the K q channels and the K k channels of its query/key head and the kTileV v channels of its tile.
// history row i holds the input W - 1 - i tokens before the chunk's first new token (rows [0, W - 1):
// its conv window), then the chunk's new tokens' x. y_q and y_k are the conv's q and k of the chunk's
// new tokens (its v goes to StagedTokens::v).
template <int K, int kTileV, class IoT>
struct alignas(kVecBytes) ConvStaging {
  static constexpr int kChannels = 2 * K + kTileV;
  IoT history[kMaxConvWidth - 1 + kChunkTokens][kChannels];
  IoT y_q[kChunkTokens][K];
  IoT y_k[kChunkTokens][K];
  float weight[kChannels][kMaxConvWidth];
  float bias[kChannels];
  int8_t tree_source[kChunkTokens][kMaxConvWidth];  // a token tree's window, by stage_tree_conv_sources
  static_assert(kChannels * sizeof(IoT) % kVecBytes == 0, "history rows copy in whole 16-byte vectors");
};

// The row a block works on: its launch row, value head, its query/key head, the tile's first V row,
// what the row does (verify_row) and where its inputs come from.
struct BlockRow {
  int32_t n, h, hq, v0;
  VerifyRow r;
  char* ring_kg = nullptr;  // the slot's ring rows of the layer (replay), or null
  float* ring_u = nullptr;
  // The ring record of token u of the list: the records to fold, then the new tokens' (docs/modes.md).
  __device__ __forceinline__ int32_t record(const VerifyParams& p, int32_t u) const {
    return ring_record(r.ring_start, u, p.ring_records);
  }
};

// Where the block's conv channels are among x's C: the first channel of each run (q, k, v).
struct ConvRuns {
  int32_t q, k, v;
};

__device__ __forceinline__ ConvRuns conv_runs(const VerifyParams& p, const BlockRow& b) {
  const int32_t HK = p.heads * p.head_k;
  return ConvRuns{b.hq * p.head_k, HK + b.hq * p.head_k, 2 * HK + b.h * p.head_v + b.v0};
}

// Which run (0 q, 1 k, 2 v) the block's conv channel lc is in, and its x channel.
template <int K>
__device__ __forceinline__ int conv_run(int lc) {
  return lc < K ? 0 : lc < 2 * K ? 1 : 2;
}
template <int K>
__device__ __forceinline__ int64_t conv_channel_of(const ConvRuns& runs, int lc) {
  return lc < K ? runs.q + lc : lc < 2 * K ? runs.k + (lc - K) : runs.v + (lc - 2 * K);
}

// Token u of a block's token list, as pointers to its (head's) vectors: the first r.replay tokens are
// ring records (k and g; their u is read in the token loop) [TAG_RING_LAYOUT], the rest the layer's
// inputs. q, v and beta are null for records; q, k and v are null for new tokens when the conv is fused
// (kConv): the conv makes them. g and beta are in the io dtype, or in fp32 when `gate_f32` (a new token's
// with VerifyParams::gate_f32; a record keeps g in the io dtype).
template <class IoT>
struct TokenPtrs {
  const IoT *q, *k;
  const void* g;
  const IoT* v;
  const void* beta;
  bool gate_f32;
};

template <int K, bool kConv, class IoT>
__device__ __forceinline__ TokenPtrs<IoT> token_ptrs(const VerifyParams& p, const BlockRow& b, int32_t u) {
  constexpr int V = K;
  const int32_t HV = p.value_heads;
  if (u < b.r.replay) {
    const RingLayout ring{p.ring_records, p.heads, HV, K, V};
    const IoT* row = reinterpret_cast<const IoT*>(b.ring_kg);
    const int32_t record = b.record(p, u);
    return {nullptr, row + ring.k_offset(record, b.hq), row + ring.g_offset(record, b.h), nullptr, nullptr, false};
  }
  const int64_t t = u - b.r.replay, tok = int64_t(b.n) * p.tokens + t;
  const int64_t gate_bytes = p.gate_f32 ? int64_t(sizeof(float)) : int64_t(sizeof(IoT));
  const void* g = static_cast<const char*>(p.g) + (tok * HV + b.h) * K * gate_bytes;
  const void* beta = static_cast<const char*>(p.beta) + (tok * HV + b.h) * gate_bytes;
  if (kConv) return {nullptr, nullptr, g, nullptr, beta, p.gate_f32};
  return {static_cast<const IoT*>(p.q) + q_offset(p, b.n, t, b.hq), static_cast<const IoT*>(p.k) + k_offset(p, b.n, t, b.hq),
          g, static_cast<const IoT*>(p.v) + v_offset(p, b.n, t, b.h) + b.v0, beta, p.gate_f32};
}

// N consecutive io values from global memory, as fp32, in one vector load where they fill one (the
// verify only reads them: the read-only path may serve them).
template <int N, class IoT>
__device__ __forceinline__ void load_lane(const IoT* src, float (&x)[N]) {
  constexpr int kBytes = N * int(sizeof(IoT));
  IoT v[N];
  if constexpr (kBytes == 16) {
    const uint4 w = __ldg(reinterpret_cast<const uint4*>(src));
    std::memcpy(v, &w, sizeof w);
  } else if constexpr (kBytes == 8) {
    const uint2 w = __ldg(reinterpret_cast<const uint2*>(src));
    std::memcpy(v, &w, sizeof w);
  } else if constexpr (kBytes == 4) {
    const unsigned w = __ldg(reinterpret_cast<const unsigned*>(src));
    std::memcpy(v, &w, sizeof w);
  } else {
    for (int e = 0; e < N; ++e) v[e] = src[e];
  }
#pragma unroll
  for (int e = 0; e < N; ++e) x[e] = math::to_f32(v[e]);
}

// A token's g (gate_f32: fp32) of N key channels, from global memory.
template <int N, class IoT>
__device__ __forceinline__ void load_gate_lane(const TokenPtrs<IoT>& src, int e0, float (&x)[N]) {
  if constexpr (sizeof(IoT) < sizeof(float)) {
    if (src.gate_f32) {
      load_lane<N, float>(static_cast<const float*>(src.g) + e0, x);
      return;
    }
  }
  load_lane<N, IoT>(static_cast<const IoT*>(src.g) + e0, x);
}

// A new token's beta input (gate_f32: fp32), before beta_value.
template <class IoT>
__device__ __forceinline__ float beta_input(const TokenPtrs<IoT>& src) {
  if (src.gate_f32) return *static_cast<const float*>(src.beta);
  return math::to_f32(*static_cast<const IoT*>(src.beta));
}

// The same from shared memory (the fused conv's y).
template <int N, class IoT>
__device__ __forceinline__ void load_lane_shared(const IoT* src, float (&x)[N]) {
#pragma unroll
  for (int e = 0; e < N; ++e) x[e] = math::to_f32(src[e]);
}

// N consecutive io values to global memory, rounded from fp32, in 16-byte vector stores where they fill
// them, else in one of 8 or 4 bytes: `dst` is aligned to that width.
template <int N, class IoT>
__device__ __forceinline__ void store_lane(IoT* dst, const float (&x)[N]) {
  constexpr int kBytes = N * int(sizeof(IoT));
  IoT v[N];
#pragma unroll
  for (int e = 0; e < N; ++e) v[e] = math::from_f32<IoT>(x[e]);
  if constexpr (kBytes % 16 == 0) {
#pragma unroll
    for (int i = 0; i < kBytes / 16; ++i) {
      uint4 w;
      std::memcpy(&w, reinterpret_cast<const char*>(v) + 16 * i, sizeof w);
      __stcg(reinterpret_cast<uint4*>(dst) + i, w);
    }
  } else if constexpr (kBytes == 8) {
    uint2 w;
    std::memcpy(&w, v, sizeof w);
    __stcg(reinterpret_cast<uint2*>(dst), w);
  } else if constexpr (kBytes == 4) {
    unsigned w;
    std::memcpy(&w, v, sizeof w);
    __stcg(reinterpret_cast<unsigned*>(dst), w);
  } else {
    for (int e = 0; e < N; ++e) dst[e] = v[e];
  }
}

// The fused conv's weights and bias of the block's channels, which no kernel of the round writes: copied
// before the grid dependency wait, as cp.async; the first chunk's wait covers them.
template <int K, int kTileV, int kThreads, class IoT>
__device__ __forceinline__ void stage_conv_params(const VerifyParams& p, const BlockRow& b,
                                                  ConvStaging<K, kTileV, IoT>& cs) {
  constexpr int kChannels = ConvStaging<K, kTileV, IoT>::kChannels;
  const int tid = int(threadIdx.x);
  const ConvRuns runs = conv_runs(p, b);
  const int32_t W = p.conv.width;
  for (int e = tid; e < kChannels * W; e += kThreads) {
    const int lc = e / W, j = e % W;
    __pipeline_memcpy_async(&cs.weight[lc][j], p.conv.weight + conv_channel_of<K>(runs, lc) * W + j, sizeof(float));
  }
  if (p.conv.bias != nullptr)
    for (int lc = tid; lc < kChannels; lc += kThreads)
      __pipeline_memcpy_async(&cs.bias[lc], p.conv.bias + conv_channel_of<K>(runs, lc), sizeof(float));
  __pipeline_commit();
}

// Starts the copy of the conv window of row `r` (W - 1 columns from r.read) into history rows
// [0, W - 1): what earlier rounds wrote, so it may run before the grid dependency wait.
template <int K, int kTileV, int kThreads, class IoT>
__device__ __forceinline__ void stage_conv_window(const VerifyParams& p, const BlockRow& b, const ConvRow& r,
                                                  ConvStaging<K, kTileV, IoT>& cs) {
  constexpr int kElemsPerVec = kVecBytes / int(sizeof(IoT));
  constexpr int kVecs = ConvStaging<K, kTileV, IoT>::kChannels / kElemsPerVec;
  const ConvRuns runs = conv_runs(p, b);
  const IoT* state = reinterpret_cast<const IoT*>(r.state);
  const int64_t C = p.conv.channels;
  for (int e = int(threadIdx.x); e < (p.conv.width - 1) * kVecs; e += kThreads) {
    const int j = e / kVecs, lc = e % kVecs * kElemsPerVec;
    __pipeline_memcpy_async(&cs.history[j][lc], state + int64_t(conv_history_column(r, p.conv.width, j)) * C +
                                                     conv_channel_of<K>(runs, lc),
                            kVecBytes);
  }
  __pipeline_commit();
}

// Chunk [u0, u0 + count) of the block's token list holds `n_new` new tokens from new token `t_first` on
// (none while the list still folds records).
struct ChunkTokens {
  int32_t u0, count, first, t_first, n_new;  // first: the list index of the first new token
};

__device__ __forceinline__ ChunkTokens chunk_tokens(const BlockRow& b, int32_t u0, int32_t count) {
  const int32_t first = u0 > b.r.replay ? u0 : b.r.replay;
  const int32_t n_new = u0 + count > first ? u0 + count - first : 0;
  return ChunkTokens{u0, count, first, first - b.r.replay, n_new};
}

// Starts the copies of a chunk's tile inputs into shared memory: the new tokens' v rows of the tile
// (not fused: the conv makes them) as 16-byte cp.async, and, fused, the new tokens' x rows of the
// block's conv channels after the conv window. Nothing here reads the index arrays or waits for a
// load: with no records to fold it may run before them (verify_unit's inputs first).
template <int K, int kTileV, int kThreads, bool kConv, class IoT>
__device__ __forceinline__ void start_input_copies(const VerifyParams& p, const BlockRow& b, const ChunkTokens& ch,
                                                   StagedTokens<K, kTileV, IoT>& st, ConvStaging<K, kTileV, IoT>* cs) {
  constexpr int kElemsPerVec = kVecBytes / int(sizeof(IoT));
  constexpr int kTileVecs = kTileV / kElemsPerVec;  // 16-byte vectors in the tile's part of one v row
  const int tid = int(threadIdx.x);
  for (int c = tid; c < ch.count * kTileVecs; c += kThreads) {
    const int tt = c / kTileVecs, e = c % kTileVecs * kElemsPerVec;
    const IoT* v = token_ptrs<K, kConv, IoT>(p, b, ch.u0 + tt).v;
    if (v != nullptr) __pipeline_memcpy_async(&st.v[tt][e], v + e, kVecBytes);
  }
  if constexpr (kConv) {
    constexpr int kVecs = ConvStaging<K, kTileV, IoT>::kChannels / kElemsPerVec;
    const ConvRuns runs = conv_runs(p, b);
    const int64_t C = p.conv.channels;
    const IoT* x = static_cast<const IoT*>(p.conv.x) + (int64_t(b.n) * p.tokens + ch.t_first) * C;
    for (int c = tid; c < ch.n_new * kVecs; c += kThreads) {
      const int i = c / kVecs, lc = c % kVecs * kElemsPerVec;
      __pipeline_memcpy_async(&cs->history[p.conv.width - 1 + i][lc], x + i * C + conv_channel_of<K>(runs, lc),
                              kVecBytes);
    }
  }
  __pipeline_commit();
}

// A chunk's per-token scalars, with plain loads: beta, and the scratch rows its post-states go to (the
// index build's write rows; -1 for a record).
template <int K, int kTileV, int kThreads, bool kConv, class IoT>
__device__ __forceinline__ void stage_token_scalars(const VerifyParams& p, const BlockRow& b, const ChunkTokens& ch,
                                                    StagedTokens<K, kTileV, IoT>& st) {
  const int tid = int(threadIdx.x);
  if (tid < ch.count) {
    const int32_t u = ch.u0 + tid;
    const bool is_new = u >= b.r.replay, report = b.h == 0 && b.v0 == 0;
    st.beta[tid] = is_new ? math::beta_value(p.options, beta_input(token_ptrs<K, kConv, IoT>(p, b, u))) : 0.0f;
    st.write_row[tid] = is_new ? post_state_row(p, b.n, u - b.r.replay, report) : -1;
  }
}

// Both: a chunk's input copies started, then its scalars staged.
template <int K, int kTileV, int kThreads, bool kConv, class IoT>
__device__ __forceinline__ void copy_tile_inputs(const VerifyParams& p, const BlockRow& b, const ChunkTokens& ch,
                                                 StagedTokens<K, kTileV, IoT>& st, ConvStaging<K, kTileV, IoT>* cs) {
  start_input_copies<K, kTileV, kThreads, kConv, IoT>(p, b, ch, st, cs);
  stage_token_scalars<K, kTileV, kThreads, kConv, IoT>(p, b, ch, st);
}

// Asks L1 for the line holding `at` (prefetch.global.L1): nothing waits for it and nothing is written,
// so a load after it finds the line there or goes on to L2 as it would have. No-op off the device.
__device__ __forceinline__ void prefetch_line(const void* at) {
#if defined(__CUDA_ARCH__)
  asm volatile("prefetch.global.L1 [%0];" ::"l"(at));
#else
  (void)at;
#endif
}

// The lines a chunk's new tokens' preprocessing and scalars will read, asked of L1 (prefetch_line): q
// and k (not with the conv, which makes them), g, and beta, 128 bytes a request, each row's last byte
// too (a row need not start on a line; an fp32 g beside 16-bit io is twice the row, its middle lines not
// asked for), and the row's write rows (an index array, which the scalars
// read after the seed's). verify_unit's inputs first issues them before the index reads, so those round
// trips overlap.
template <int K, int kThreads, bool kConv, class IoT>
__device__ __forceinline__ void prefetch_token_inputs(const VerifyParams& p, const BlockRow& b, const ChunkTokens& ch) {
  constexpr int kLine = 128, kRowBytes = K * int(sizeof(IoT));
  constexpr int kRowRequests = (kRowBytes + kLine - 1) / kLine + 1;  // the last byte's line, maybe again
  constexpr int kRows = kConv ? 1 : 3;                                  // g, or q, k and g
  constexpr int kPerToken = kRows * kRowRequests + 1;                   // and beta
  if (p.writes_scratch && threadIdx.x < 2) {  // the row's T entries, first and last
    const int32_t* rows = p.write_row + int64_t(b.n) * p.tokens;
    prefetch_line(threadIdx.x == 0 ? rows : rows + p.tokens - 1);
  }
  for (int e = int(threadIdx.x); e < ch.n_new * kPerToken; e += kThreads) {
    const int i = e / kPerToken, j = e % kPerToken;
    const TokenPtrs<IoT> src = token_ptrs<K, kConv, IoT>(p, b, ch.first + i);
    if (j == kPerToken - 1) {
      prefetch_line(src.beta);
      continue;
    }
    const int row = j / kRowRequests, request = j % kRowRequests;
    const char* at = static_cast<const char*>(row == kRows - 1 ? src.g : row == 0 ? src.q : src.k);
    prefetch_line(at + (request == kRowRequests - 1 ? kRowBytes - 1 : request * kLine));
  }
}

// Each warp's tokens of the chunk (token tt to warp tt % warps), from the warp's own loads (the gate
// parameters' among them: weights, which no kernel of the round writes, read here in the shadow of the
// inputs' loads rather than held in registers from before the grid dependency wait): q (new tokens
// only) and k times their qk_multiplier (the L2 norm's sums of squares warp-wide reductions), their dot
// product, and the decay factor of every key channel. Replay mode: the new tokens' k and g as given
// (fused: k as the conv made it) to their ring records, for the rounds that fold them; k and g are
// shared by the tiles of a value head (and k by the G value heads of a query head), so one block writes
// each (no block of the launch reads a record it writes: docs/modes.md).
// Fused (kConv), a new token's q and k come from the conv's y in shared memory, after a barrier.
template <int K, int kTileV, int kThreads, bool kConv, class IoT>
__device__ __forceinline__ void preprocess_tokens(const VerifyParams& p, const BlockRow& b, const ChunkTokens& ch,
                                                  StagedTokens<K, kTileV, IoT>& st, const ConvStaging<K, kTileV, IoT>* cs) {
  constexpr int kPerLane = K / kWarpSize;
  constexpr int kWarps = kThreads / kWarpSize;
  const int warp = int(threadIdx.x) / kWarpSize, lane = int(threadIdx.x) % kWarpSize;
  const int e0 = lane * kPerLane;
  const float q_scale = math::query_scale(p.options, K);
  // The gate parameters of the lane's key channels (dt_bias is 4-byte aligned: scalar loads), with the
  // head's gate scale (the exp of A_log) computed once, not per channel.
  const int32_t gh = gate_head(p, b.h);
  const float gate_scale = math::gate_scale(p.options, p.A_log != nullptr ? __ldg(p.A_log + gh) : 0.0f);
  float dt_bias[kPerLane];
#pragma unroll
  for (int e = 0; e < kPerLane; ++e)
    dt_bias[e] = p.dt_bias != nullptr ? __ldg(&p.dt_bias[int64_t(gh) * K + e0 + e]) : 0.0f;
  const RingLayout ring{p.ring_records, p.heads, p.value_heads, K, K};
  IoT* ring_kg = b.r.records ? reinterpret_cast<IoT*>(b.ring_kg) : nullptr;
  const bool first_tile = b.v0 == 0, writes_k = first_tile && b.h % (p.value_heads / p.heads) == 0;
  for (int tt = warp; tt < ch.count; tt += kWarps) {  // warp-uniform
    const int32_t u = ch.u0 + tt;
    const bool has_q = u >= b.r.replay;
    const TokenPtrs<IoT> src = token_ptrs<K, kConv, IoT>(p, b, u);
    float q[kPerLane], k[kPerLane], g[kPerLane];
    if (kConv && has_q) {
      load_lane_shared<kPerLane, IoT>(cs->y_k[tt] + e0, k);
      load_lane_shared<kPerLane, IoT>(cs->y_q[tt] + e0, q);
    } else {
      load_lane<kPerLane, IoT>(src.k + e0, k);
      if (has_q) load_lane<kPerLane, IoT>(src.q + e0, q);
    }
    load_gate_lane<kPerLane, IoT>(src, e0, g);
    if (ring_kg != nullptr && has_q) {
      const int32_t record = b.record(p, u);
      if (writes_k) store_lane<kPerLane, IoT>(ring_kg + ring.k_offset(record, b.hq) + e0, k);
      if (first_tile) store_lane<kPerLane, IoT>(ring_kg + ring.g_offset(record, b.h) + e0, g);
    }
    float sum_sq[2] = {0.0f, 0.0f};  // k's, q's
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      sum_sq[0] = math::accumulate(sum_sq[0], k[e], k[e]);
      if (has_q) sum_sq[1] = math::accumulate(sum_sq[1], q[e], q[e]);
    }
    if (p.options.l2norm_qk) group_sums<kWarpSize, 2>(sum_sq);
    const float k_mult = math::qk_multiplier(p.options.l2norm_qk, sum_sq[0], 1.0f);
    const float q_mult = math::qk_multiplier(p.options.l2norm_qk, sum_sq[1], q_scale);
    float kq[1] = {0.0f};
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      k[e] = k[e] * k_mult;
      st.k[tt][e0 + e] = k[e];
      if (has_q) {
        q[e] = q[e] * q_mult;
        st.q[tt][e0 + e] = q[e];
        kq[0] = math::accumulate(kq[0], k[e], q[e]);
      }
      st.a[tt][e0 + e] = math::decay_factor(math::log_decay_scaled(p.options, g[e], gate_scale, dt_bias[e]));
    }
    if (has_q) {
      group_sums<kWarpSize, 1>(kq);
      if (lane == 0) st.kq[tt] = kq[0];
    }
  }
}

// docs/trees.md, the fused conv of a token tree (kTree): where the inputs of each new token's window lie,
// resolved once a chunk, one walk up the tree per (new token, step back), so that the conv and the
// history stores look each input up in shared memory instead of walking the parents in global memory per
// element. tree_source[i][k], k steps back from the chunk's new token i along its ancestors (k = 0: its
// own input): a history row (>= 0; with a tree the rows [0, W - 1) keep the round's window for every
// chunk, the chunk's x follows), or -1 - node for an ancestor of an earlier chunk, whose x is read from
// global memory again. Parents are the index build's checked ones. Written before the barrier that
// hands the chunk's x to the conv.
template <int K, int kTileV, int kThreads, class IoT>
__device__ __forceinline__ void stage_tree_conv_sources(const VerifyParams& p, const BlockRow& b, const ChunkTokens& ch,
                                                        ConvStaging<K, kTileV, IoT>& cs) {
  static_assert(kThreads >= kChunkTokens * kMaxConvWidth, "a thread an entry");
  const int32_t W = p.conv.width;
  const int e = int(threadIdx.x);
  if (e >= ch.n_new * W) return;
  const int32_t* parent = p.conv.parent + int64_t(b.n) * p.tokens;
  const int32_t i = e / W, k = e % W;
  int32_t node = ch.t_first + i, steps = 0;
  for (; steps < k && node >= 0; ++steps) node = parent[node];
  int32_t source;
  if (node < 0) source = W - 1 - (k - steps + 1);  // into the round's window
  else if (node >= ch.t_first) source = W - 1 + (node - ch.t_first);
  else source = -1 - node;
  cs.tree_source[i][k] = int8_t(source);
}

// The input k steps back from the chunk's new token i along its ancestors, for the block's conv
// channel lc (stage_tree_conv_sources says where it lies).
template <int K, int kTileV, class IoT>
__device__ __forceinline__ IoT tree_conv_input(const VerifyParams& p, const BlockRow& b,
                                               const ConvStaging<K, kTileV, IoT>& cs, int i, int lc, int k) {
  const int32_t source = cs.tree_source[i][k];
  if (source >= 0) return cs.history[source][lc];
  const IoT* x = static_cast<const IoT*>(p.conv.x);
  return x[(int64_t(b.n) * p.tokens + (-1 - source)) * p.conv.channels + conv_channel_of<K>(conv_runs(p, b), lc)];
}

// Once a chunk's x has landed: y of each (new token, conv channel) from its W inputs in the history,
// rounded to the io dtype, where the preprocessing (q, k) and the token loop (v) read it.
template <int K, int kTileV, int kThreads, int W, bool kTree, class IoT>
__device__ __forceinline__ void convolve_chunk(const VerifyParams& p, const BlockRow& b, const ChunkTokens& ch,
                                               StagedTokens<K, kTileV, IoT>& st, ConvStaging<K, kTileV, IoT>& cs) {
  constexpr int kChannels = ConvStaging<K, kTileV, IoT>::kChannels;
  for (int e = int(threadIdx.x); e < ch.n_new * kChannels; e += kThreads) {
    const int i = e / kChannels, lc = e % kChannels;
    float w[W], window[W - 1];
#pragma unroll
    for (int j = 0; j < W; ++j) w[j] = cs.weight[lc][j];
#pragma unroll
    for (int j = 0; j < W - 1; ++j)
      window[j] = math::to_f32(kTree ? tree_conv_input<K, kTileV, IoT>(p, b, cs, i, lc, W - 1 - j) : cs.history[i + j][lc]);
    const float bias = p.conv.bias != nullptr ? cs.bias[lc] : 0.0f;
    const IoT y = math::from_f32<IoT>(conv_output_value<W>(p.conv, w, window, math::to_f32(cs.history[i + W - 1][lc]), bias));
    const int tt = ch.first - ch.u0 + i;
    const int run = conv_run<K>(lc);
    if (run == 0) cs.y_q[tt][lc] = y;
    else if (run == 1) cs.y_k[tt][lc - K] = y;
    else st.v[tt][lc - 2 * K] = y;
  }
}

// The chunk's conv history, by the owners of its channels: the block of tile 0 of the first value head
// of a group owns the q and k channels of its query/key head, each block its tile's v channels. halves:
// base <- the window (with the first new token), new[t] <- x_t, in the half row `r` writes; fixed_window:
// the window after each new token to its conv scratch row. Columns are 16-byte vectors per run.
template <int K, int kTileV, int kThreads, bool kTree, class IoT>
__device__ __forceinline__ void store_conv_history(const VerifyParams& p, const BlockRow& b, const ConvRow& r,
                                                   const ChunkTokens& ch, const ConvStaging<K, kTileV, IoT>& cs) {
  constexpr int kElemsPerVec = kVecBytes / int(sizeof(IoT));
  constexpr int kVecs = ConvStaging<K, kTileV, IoT>::kChannels / kElemsPerVec;
  const ConvParams& c = p.conv;
  const int32_t W = c.width;
  const int64_t C = c.channels;
  const bool owns_qk = b.v0 == 0 && b.h % (p.value_heads / p.heads) == 0;
  const int first_vec = owns_qk ? 0 : 2 * K / kElemsPerVec, vecs = kVecs - first_vec;
  const ConvRuns runs = conv_runs(p, b);
  const bool halves = c.layout == ConvLayout::halves;
  // halves: columns (base with the first chunk) and their history rows; fixed_window: W - 1 per token.
  const int32_t base = halves && ch.t_first == 0 ? W - 1 : 0;
  const int32_t columns = halves ? base + ch.n_new : ch.n_new * (W - 1);
  for (int e = int(threadIdx.x); e < columns * vecs; e += kThreads) {
    const int col = e / vecs, lc = (first_vec + e % vecs) * kElemsPerVec;
    IoT* dst;
    int history_row;
    if (halves) {
      history_row = col + (W - 1 - base);  // the base's W - 1 rows, then the new tokens'
      dst = reinterpret_cast<IoT*>(r.state) + (r.write + ch.t_first + history_row) * C;
    } else {
      const int i = col / (W - 1), j = col % (W - 1);
      const int32_t row = c.write_row[(int64_t(b.n) * p.tokens + ch.t_first + i)];
      if (row < 0) continue;
      history_row = i + 1 + j;  // the window after new token i
      dst = reinterpret_cast<IoT*>(state_row(r.scratch, c.scratch, row)) + j * C;
      if (kTree) {  // along the tree: the window its children read, element by element
        for (int m = 0; m < kElemsPerVec; ++m)
          dst[conv_channel_of<K>(runs, lc + m)] = tree_conv_input<K, kTileV, IoT>(p, b, cs, i, lc + m, W - 2 - j);
        continue;
      }
    }
    copy16(dst + conv_channel_of<K>(runs, lc), &cs.history[history_row][lc]);
  }
}

// Before a later chunk's x lands: its window is the last W - 1 inputs of the previous chunk's rows.
// Each thread moves whole channels upwards, reading a row before any thread could overwrite it.
template <int K, int kTileV, int kThreads, class IoT>
__device__ __forceinline__ void shift_conv_history(int32_t W, int32_t previous_new, ConvStaging<K, kTileV, IoT>& cs) {
  for (int lc = int(threadIdx.x); lc < ConvStaging<K, kTileV, IoT>::kChannels; lc += kThreads)
    for (int j = 0; j < W - 1; ++j) cs.history[j][lc] = cs.history[previous_new + j][lc];
}

// Waits for every copy this thread started: a block that leaves early still waits for its copies to
// land in the shared memory it is about to give up.
__device__ __forceinline__ void drain_copies() { __pipeline_wait_prior(0); }

}  // namespace kdagraph::verify_detail
