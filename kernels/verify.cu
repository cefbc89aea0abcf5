// SPEC §1, §3, §9: the T-token verify on the device, and the verify with the short convolution fused in
// (one kernel per KDA layer).
//
// One block is one unit of work: (row n, value head h, tile of kTileV consecutive V rows). Its threads
// hold that tile of the state in registers for all T tokens: a lane group of K/4 lanes shares one V
// row, each lane keeping a 4-element slice of K (16 bytes of fp32), and each group keeps kRows rows.
// The update's arithmetic is kernels/verify_update.cuh, the staging of the inputs (and of the fused
// conv) kernels/verify_staging.cuh; the seed tile is read once and every post-state written once (the
// 1 + T transfers of SPEC §7).
//
// [TAG_PDL] Before grid_dependency_wait() a block reads only what earlier rounds wrote (SPEC §5): the
// gate parameters and conv weights, and, where pre-round data says where they are, its seed tile and
// conv window. After the wait it reads the round's index arrays and inputs, and triggers its dependents.
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kdagraph/error.hpp"
#include "kernels/kda_math.h"
#include "kernels/launch.cuh"
#include "kernels/launch_checks.h"
#include "kernels/verify.h"
#include "kernels/verify_staging.cuh"
#include "kernels/verify_update.cuh"

namespace kdagraph {
namespace {

using namespace verify_detail;

// A VerifyRow in shared memory, which is never constructed: its fields, copied in and out.
struct SharedVerifyRow {
  int32_t seed_pool, seed_scratch, replay, replay_from, cache_to;
  const int32_t* path;
  __device__ void set(const VerifyRow& r) {
    seed_pool = r.seed_pool;
    seed_scratch = r.seed_scratch;
    replay = r.replay;
    replay_from = r.replay_from;
    cache_to = r.cache_to;
    path = r.path;
  }
  __device__ VerifyRow get() const { return VerifyRow{seed_pool, seed_scratch, replay, replay_from, cache_to, path}; }
};

// The fused conv's inputs of a chunk, at the conv's width: staged x convolved into q, k and v, and the
// owners' history written.
template <int K, int kTileV, int kThreads, bool kTree, class IoT>
__device__ __forceinline__ void convolve_and_store(const VerifyParams& p, const BlockRow& b, const ConvRow& cr,
                                                   const ChunkTokens& ch, StagedTokens<K, kTileV, IoT>& st,
                                                   const ConvStaging<K, kTileV, IoT>& cs) {
  switch (p.conv.width) {
    case 2: convolve_chunk<K, kTileV, kThreads, 2, kTree, IoT>(p, b, ch, st, cs); break;
    case 3: convolve_chunk<K, kTileV, kThreads, 3, kTree, IoT>(p, b, ch, st, cs); break;
    default: convolve_chunk<K, kTileV, kThreads, 4, kTree, IoT>(p, b, ch, st, cs); break;
  }
  store_conv_history<K, kTileV, kThreads, kTree, IoT>(p, b, cr, ch, cs);
}

// [TAG_TREE] SPEC §12: a token tree's branch states (VerifyParams::parent). A lane keeps its slice of the
// current state in registers as for a chain; where a later token branches from a state other than the
// one before it (tree_branch_points), that state's slice is kept aside, and the token starts from it.
// Kept in fp32 in the thread's own local memory, not reloaded from the post-state's scratch row: that
// row holds the state dtype (bf16 rounds it), replay has no scratch, and each token must continue from
// its parent's state exactly as a chain of its path would (a path of the tree is bitwise that chain, in
// every mode). Only this thread writes and reads its slice, so no barrier is needed. At most
// kMaxCudaTreeTokens new tokens (kept: 17 states of kRows x 4 floats, 1088 bytes a thread at K = 128).
template <int kRows, bool kTree>
struct TreeBranches {  // a chain: nothing kept, nothing reloaded
  __device__ void set(const VerifyParams&, int32_t, bool) {}
  __device__ void keep(int32_t, const float (&)[kRows][kSlice]) {}
  __device__ void enter(int32_t, float (&)[kRows][kSlice]) const {}
};

template <int kRows>
struct TreeBranches<kRows, true> {
  const int32_t* parent = nullptr;  // the row's [T]
  uint32_t points = 0;              // tree_branch_points: bit j kept (j = new token + 1, 0: their seed)
  float kept[kMaxCudaTreeTokens + 1][kRows][kSlice];

  __device__ void set(const VerifyParams& p, int32_t n, bool report) {
    parent = p.parent + int64_t(n) * p.tokens;
    points = tree_branch_points(parent, p.tokens);
    if (report)
      for (int32_t t = 0; t < p.tokens; ++t) checked_parent(parent, t, n, p.errors, true);
  }
  // After the state the new tokens start from (j = 0), or new token j - 1's update.
  __device__ void keep(int32_t j, const float (&s)[kRows][kSlice]) {
    if ((points >> j & 1u) == 0) return;
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int c = 0; c < kSlice; ++c) kept[j][r][c] = s[r][c];
  }
  // Before new token t's update (t >= 1): its parent's state, where that is not the state in hand.
  __device__ void enter(int32_t t, float (&s)[kRows][kSlice]) const {
    const int32_t pt = checked_parent(parent, t, 0, nullptr, false);
    if (pt == t - 1) return;
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int c = 0; c < kSlice; ++c) s[r][c] = kept[pt + 1][r][c];
  }
};

// kConv: the short conv fused in (VerifyParams::conv). kTree: the new tokens form a tree (VerifyParams::parent).
template <int K, int kRows, bool kConv, bool kTree, class IoT, class StateT>
__global__ void __launch_bounds__(VerifyTile<K, kRows>::kThreads, VerifyTile<K, kRows>::kMinBlocksPerSm)
    verify_kernel(const VerifyParams p) {
  using Tile = VerifyTile<K, kRows>;
  using Conv = ConvStaging<K, Tile::kTileV, IoT>;
  constexpr int V = K;
  auto& st = shared_object<StagedTokens<K, Tile::kTileV, IoT>>();
  Conv* cs = nullptr;
  if constexpr (kConv) cs = &shared_object<Conv>();

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

  const int lane = int(threadIdx.x) % kWarpSize, warp = int(threadIdx.x) / kWarpSize;
  const int group_lane = lane % Tile::kGroupLanes;
  const int tile_row0 = (warp * Tile::kGroupsPerWarp + lane / Tile::kGroupLanes) * kRows;  // in the tile
  const int i0 = group_lane * kSlice;  // first key channel of this lane's slice
  const int64_t slice_offset = b.h * (int64_t(V) * K) + int64_t(b.v0 + tile_row0) * K + i0;

  // The whole seed tile is in registers before any state is written: the seed may be a scratch row
  // this verify overwrites, or the pool row the replay writes back (SPEC §3). Each element is read and
  // later written by the same thread only, and no other block touches this tile. With pre-round data it
  // is loaded before the wait, from where the index build will say it is.
  float s[kRows][kSlice];
  const StateT* early_seed = nullptr;
  ConvRow early_conv;
  if (p.pre_round.slots != nullptr) {
    const RowIndices predicted = row_indices(p.pre_round, resolve_row(p.pre_round, b.n, false));
    const VerifyRow r = predicted_row(p, predicted);
    const VerifyBases bases = r.padded() ? VerifyBases{} : verify_bases(p, r, b.n, false);
    if (bases.ok) {
      early_seed = verify_seed<StateT>(p, r, bases) + slice_offset;
#pragma unroll
      for (int row = 0; row < kRows; ++row) load_slice(early_seed + int64_t(row) * K, s[row]);
    }
    if constexpr (kConv) {
      early_conv = conv_row_at(p.conv, b.n, predicted.slot, predicted.accept, predicted.parity, false);
      if (!early_conv.padded()) stage_conv_window<K, Tile::kTileV, Tile::kThreads, IoT>(p, b, early_conv, *cs);
    }
  }
  stage_layer_params<K, Tile::kTileV, Tile::kThreads, kConv, IoT>(p, b, st, cs);
  grid_dependency_wait();
  trigger_dependent_launch();

  const bool report = tile == 0 && b.h == 0 && threadIdx.x == 0;
  if (p.slot_list != nullptr) {
    // A materialize list is checked for repeats by a scan of the entries before row n: one thread
    // resolves the row and the block shares it (a block is one row's tile, so it is written once).
    auto& resolved = shared_object<SharedVerifyRow>();
    if (threadIdx.x == 0) resolved.set(verify_row(p, b.n, report));
    __syncthreads();
    b.r = resolved.get();
  } else {
    b.r = verify_row(p, b.n, report);
  }
  const VerifyBases bases = b.r.padded() ? VerifyBases{} : verify_bases(p, b.r, b.n, report);
  ConvRow cr;
  if constexpr (kConv) cr = b.r.padded() || !bases.ok ? ConvRow{} : conv_row(p.conv, b.n, report);
  if (b.r.padded() || !bases.ok || (kConv && cr.padded())) {  // padded row: zeros out, no state written
    drain_copies();
    for (int e = int(threadIdx.x); e < T * Tile::kTileV; e += Tile::kThreads)
      static_cast<IoT*>(p.o)[o_tile + e / Tile::kTileV * o_stride + e % Tile::kTileV] = math::from_f32<IoT>(0.0f);
    return;
  }
  TreeBranches<kRows, kTree> tree;
  tree.set(p, b.n, report);
  b.cache_from = b.r.replay > 0 ? state_row(bases.cache, p.token_cache, b.r.replay_from) : nullptr;
  b.cache_to = b.r.cache_to >= 0 ? state_row(bases.cache, p.token_cache, b.r.cache_to) : nullptr;
  // Loads the index arrays do not confirm are made again.
  const StateT* seed = verify_seed<StateT>(p, b.r, bases) + slice_offset;
  if (seed != early_seed) {
#pragma unroll
    for (int row = 0; row < kRows; ++row) load_slice(seed + int64_t(row) * K, s[row]);
  }
  if constexpr (kConv) {
    if (cr.state != early_conv.state || cr.read != early_conv.read) {
      drain_copies();  // the predicted window lands before its rows are copied again
      stage_conv_window<K, Tile::kTileV, Tile::kThreads, IoT>(p, b, cr, *cs);
    }
  }

  // The token list: r.replay cached accepted tokens, then the T new ones.
  const int32_t U = b.r.replay + T;
  int32_t previous_new = 0;  // new tokens of the previous chunk (fused: the conv history shifts by them)
  for (int32_t u0 = 0; u0 < U; u0 += kChunkTokens) {
    const ChunkTokens ch = chunk_tokens(b, u0, U - u0 < kChunkTokens ? U - u0 : kChunkTokens);
    if (u0 > 0) __syncthreads();  // the previous chunk is consumed before it is overwritten
    if constexpr (kConv && !kTree) {  // a tree keeps the round's window (tree_conv_input)
      if (previous_new > 0) {
        shift_conv_history<K, Tile::kTileV, Tile::kThreads, IoT>(p.conv.width, previous_new, *cs);
        __syncthreads();
      }
    }
    copy_tokens<K, Tile::kTileV, Tile::kThreads, kConv, IoT>(p, b, ch, st, cs);
    __pipeline_wait_prior(0);
    __syncthreads();
    if constexpr (kConv) {
      if (ch.n_new > 0) {
        convolve_and_store<K, Tile::kTileV, Tile::kThreads, kTree, IoT>(p, b, cr, ch, st, *cs);
        __syncthreads();
      }
    }
    previous_new = ch.n_new;
    store_new_tokens<K, Tile::kTileV, Tile::kThreads, kConv, IoT>(p, b, ch, st);
    preprocess_tokens<K, Tile::kTileV, Tile::kThreads, IoT>(p, b, ch, st);
    __syncthreads();

    if (u0 == 0 && b.r.replay == 0) tree.keep(0, s);  // the new tokens' seed
    else if (u0 > b.r.replay) tree.enter(u0 - b.r.replay, s);
    // Token u's output sum and token u + 1's projection sum both read S_u: one butterfly for both.
    float proj[kRows];
    {
      float k[kSlice], a[kSlice];
      load4(&st.k[0][i0], k);
      load4(&st.a[0][i0], a);
      decay_and_project<kRows>(s, a, k, proj);
      group_sums<Tile::kGroupLanes>(proj);
    }
    for (int tt = 0; tt < ch.count; ++tt) {
      const int32_t u = u0 + tt;
      const bool has_out = u >= b.r.replay, has_next = tt + 1 < ch.count;
      const int next = has_next ? tt + 1 : tt;
      float k[kSlice], k_next[kSlice], a_next[kSlice];
      load4(&st.k[tt][i0], k);
      load4(&st.k[next][i0], k_next);
      load4(&st.a[next][i0], a_next);
      apply_delta<kRows>(s, k, st.beta[tt], &st.v[tt][tile_row0], proj);
      if (!has_out) {
        if (u == b.r.replay - 1) {  // the accepted prefix is applied: the pool holds it from now on
          StateT* pool_tile = const_cast<StateT*>(seed);
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            store_slice(pool_tile + int64_t(r) * K, s[r]);
#pragma unroll
            for (int c = 0; c < kSlice; ++c) s[r][c] = stored_value<StateT>(s[r][c]);
          }
          tree.keep(0, s);  // the new tokens' seed
        }
      } else if (st.write_row[tt] >= 0) {
        StateT* post = reinterpret_cast<StateT*>(state_row(bases.scratch, p.scratch, st.write_row[tt])) + slice_offset;
#pragma unroll
        for (int r = 0; r < kRows; ++r) store_slice(post + int64_t(r) * K, s[r]);
      }
      float out[kRows];
      if (has_out) {
        float q[kSlice];
        load4(&st.q[tt][i0], q);
        output_partial<kRows>(s, q, out);
        tree.keep(u - b.r.replay + 1, s);
      }
      if (has_next && u + 1 > b.r.replay) tree.enter(u + 1 - b.r.replay, s);
      if (has_next) decay_and_project<kRows>(s, a_next, k_next, proj);
      if (has_out && has_next) group_sums_pair<Tile::kGroupLanes>(out, proj);
      else if (has_out) group_sums<Tile::kGroupLanes>(out);
      else if (has_next) group_sums<Tile::kGroupLanes>(proj);
      if (!has_out) continue;
      IoT* out_rows = static_cast<IoT*>(p.o) + o_tile + (u - b.r.replay) * o_stride + tile_row0;
#pragma unroll
      for (int r = 0; r < kRows; ++r)  // lane r of the group writes row r's output, one store per lane
        if (group_lane == r) out_rows[r] = math::from_f32<IoT>(out[r]);
    }
  }
}

}  // namespace

namespace verify_detail {
// The verify of a token tree (TAG_TREE), compiled in kernels/verify_tree.cu: its branch states are in
// local memory by design, which this file's ptxas check refuses (kernels/CMakeLists.txt).
template <int K, class IoT, class StateT>
cudaError_t launch_tree_tiles(const VerifyParams& p, unsigned blocks, Launch on);
}  // namespace verify_detail

#if defined(KDAGRAPH_VERIFY_TREE_UNIT)
namespace verify_detail {
template <int K, class IoT, class StateT>
cudaError_t launch_tree_tiles(const VerifyParams& p, unsigned blocks, Launch on) {
  constexpr int kRows = VerifyConfig<K>::kRows;
  if (p.conv.width > 0)
    return launch_kernel(verify_kernel<K, kRows, true, true, IoT, StateT>, blocks, VerifyTile<K, kRows>::kThreads, on,
                         p);
  return launch_kernel(verify_kernel<K, kRows, false, true, IoT, StateT>, blocks, VerifyTile<K, kRows>::kThreads, on,
                       p);
}
template cudaError_t launch_tree_tiles<128, float, float>(const VerifyParams&, unsigned, Launch);
template cudaError_t launch_tree_tiles<128, float, bf16>(const VerifyParams&, unsigned, Launch);
template cudaError_t launch_tree_tiles<128, bf16, float>(const VerifyParams&, unsigned, Launch);
template cudaError_t launch_tree_tiles<128, bf16, bf16>(const VerifyParams&, unsigned, Launch);
template cudaError_t launch_tree_tiles<64, float, float>(const VerifyParams&, unsigned, Launch);
template cudaError_t launch_tree_tiles<64, float, bf16>(const VerifyParams&, unsigned, Launch);
template cudaError_t launch_tree_tiles<64, bf16, float>(const VerifyParams&, unsigned, Launch);
template cudaError_t launch_tree_tiles<64, bf16, bf16>(const VerifyParams&, unsigned, Launch);
}  // namespace verify_detail
}  // namespace kdagraph
#else
namespace {

template <int K, class IoT, class StateT>
cudaError_t launch_tiles(const VerifyParams& p, Launch on) {
  using Tile = VerifyTile<K, VerifyConfig<K>::kRows>;
  const int64_t blocks = int64_t(p.rows) * p.value_heads * Tile::kTilesPerHead;
  require(blocks <= int64_t(INT32_MAX), "launch_verify", "rows", [&] {
    return "= " + std::to_string(p.rows) + " with HV = " + std::to_string(p.value_heads) + " needs " +
           std::to_string(blocks) + " blocks, more than a grid holds";
  });
  constexpr int kRows = VerifyConfig<K>::kRows;
  if (p.parent != nullptr) return launch_tree_tiles<K, IoT, StateT>(p, unsigned(blocks), on);
  if (p.conv.width > 0)
    return launch_kernel(verify_kernel<K, kRows, true, false, IoT, StateT>, unsigned(blocks), Tile::kThreads, on, p);
  return launch_kernel(verify_kernel<K, kRows, false, false, IoT, StateT>, unsigned(blocks), Tile::kThreads, on, p);
}

// The fused conv's parameters (VerifyParams::conv): the conv of the verify's own rows, tokens and layer,
// over a layout no block of the launch writes where another reads, x and the conv state moving in
// 16-byte vectors.
void require_fusable_conv(const char* where, const VerifyParams& p) {
  const ConvParams& c = p.conv;
  require_in_range(where, "conv.width", c.width, kMinConvWidth, kMaxConvWidth);
  require(c.layout == ConvLayout::halves || c.layout == ConvLayout::fixed_window, where, "conv.layout",
          "is in_place: blocks of one launch share a row's q and k channels, so the conv fuses only with "
          "the halves (fused-accept, replay) or the fixed window (two-phase)");
  require(c.channels == 2 * p.heads * p.head_k + p.value_heads * p.head_v, where, "conv.channels",
          [&] { return "= " + std::to_string(c.channels) + " is not 2 * H * K + HV * V"; });
  require(c.rows == p.rows && c.tokens == p.tokens && c.layer == p.layer && c.io_dtype == p.io_dtype, where, "conv",
          "describes other rows, tokens, layer or dtype than the verify's");
  require(p.slot_list == nullptr && p.seed_token == nullptr, where, "conv",
          "is fused only into a round's verify (indices from the index build)");
  detail::require_buffer(where, "conv.x", c.x, 16);
  detail::require_buffer(where, "conv.weight", c.weight, alignof(float));
  if (c.bias != nullptr) detail::require_buffer(where, "conv.bias", c.bias, alignof(float));
  detail::require_buffer(where, "conv.row_slot", c.row_slot, alignof(int32_t));
  detail::require_state_view(where, "conv.state", c.state, p.io_dtype,
                             int64_t(conv_state_columns(c.layout, c.width, c.scratch_steps)) * c.channels);
  if (c.layout == ConvLayout::halves) {
    detail::require_buffer(where, "conv.row_accept", c.row_accept, alignof(int32_t));
    detail::require_buffer(where, "conv.row_parity", c.row_parity, alignof(int32_t));
  } else {
    detail::require_buffer(where, "conv.write_row", c.write_row, alignof(int32_t));
    detail::require_state_view(where, "conv.scratch", c.scratch, p.io_dtype, int64_t(c.width - 1) * c.channels);
  }
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
  if (p.conv.width > 0) require_fusable_conv(where, p);
  if (p.parent != nullptr) {  // TAG_TREE
    require(p.conv.width == 0 || p.conv.parent == p.parent, where, "conv.parent",
            "differs from parent: the fused conv and the verify run one tree");
    require_in_range(where, "tokens", p.tokens, 1, kMaxCudaTreeTokens);
    detail::require_buffer(where, "parent", p.parent, alignof(int32_t));
  }
  if (p.tokens > 0) {
    if (p.conv.width == 0) {  // fused, the conv makes them
      detail::require_buffer(where, "q", p.q, 16);
      detail::require_buffer(where, "k", p.k, 16);
      detail::require_buffer(where, "v", p.v, 16);
    }
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
  if (p.pre_round.slots != nullptr) {
    detail::require_buffer(where, "pre_round.n_real", p.pre_round.n_real, alignof(int32_t));
    detail::require_buffer(where, "pre_round.accept_len", p.pre_round.accept_len, alignof(int32_t));
  }
  return p.head_k == 128 ? dispatch_dtypes<128>(p, on) : dispatch_dtypes<64>(p, on);
}

}  // namespace kdagraph
#endif  // KDAGRAPH_VERIFY_TREE_UNIT
