// docs/math.md, docs/modes.md, docs/conv.md, docs/trees.md: the verify kernel family. One kernel template, whose tile shape (VerifyTile,
// kernels/verify_update.cuh [TAG_VERIFY_TILE]), output formula and probe are compile-time choices; the
// library's launcher picks among its shapes in kernels/verify.cu [TAG_VERIFY_SHAPES], the sweep
// (profiling/bench_verify_sweep.cu) times the others, and tests/simt/verify_family_simt_test.cpp runs
// every one of them on the CPU. Every shape computes the same bits.
//
// A unit of work is (row n, value head h, tile of kTileV consecutive V rows; a head-wide tile is the
// whole head): a block per unit, or, VerifySchedule::persistent (the sweep's), a block for every
// gridDim.x-th unit. The block's threads hold the unit's tile of the state in registers for all T
// tokens: a lane group of kLanes lanes shares kRows V rows, each lane keeping kChunks chunks of 4 key
// channels of each (16 bytes of fp32 a chunk). The update's arithmetic is kernels/verify_update.cuh, the
// staging of the inputs (and of the fused conv) kernels/verify_staging.cuh, the seed tile's loads and
// stores kernels/verify_units.cuh, a token tree's branch states kernels/verify_tree_branches.cuh; the
// seed tile is read once and every post-state written once (the 1 + T transfers of docs/shapes.md).
//
// [TAG_PDL] Before grid_dependency_wait() a block reads only what earlier rounds wrote (docs/graphs.md): the
// conv weights, and, where pre-round data says where they are, its first unit's seed tile and conv
// window. After the wait it reads the round's index arrays and inputs, and triggers its dependents.
//
// Each unit that includes this file instantiates its own kernels (they have internal linkage), so the
// library's units, the sweep's and the tests' broken copies (tests/simt/CMakeLists.txt) never meet.
#pragma once

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
#include "kernels/verify_tree_branches.cuh"
#include "kernels/verify_units.cuh"
#include "kernels/verify_update.cuh"

namespace kdagraph {
namespace {

using namespace verify_detail;

// A VerifyRow in shared memory, which is never constructed: its fields, copied in and out.
struct SharedVerifyRow {
  int32_t seed_pool, seed_scratch, replay, ring_start;
  bool records, flush;
  __device__ void set(const VerifyRow& r) {
    seed_pool = r.seed_pool;
    seed_scratch = r.seed_scratch;
    replay = r.replay;
    ring_start = r.ring_start;
    records = r.records;
    flush = r.flush;
  }
  __device__ VerifyRow get() const { return VerifyRow{seed_pool, seed_scratch, replay, ring_start, records, flush}; }
};

// Whether a tile's staging, with the fused conv's when kConv, fits the 48 KB of static shared memory a
// block has (kernels/verify.cu launches a tile where it does).
template <class Tile, bool kConv, class IoT>
constexpr bool kFitsSharedMemory = sizeof(StagedTokens<Tile::kHeadDim, Tile::kTileV, IoT>) +
                                       (kConv ? sizeof(ConvStaging<Tile::kHeadDim, Tile::kTileV, IoT>) : 0) +
                                       sizeof(SharedVerifyRow) <=
                                   48 * 1024;

// The fused conv's inputs of a chunk, at the conv's width: staged x convolved into q, k and v, and the
// owners' history written.
template <int K, int kTileV, int kThreads, bool kTree, class IoT>
__device__ __forceinline__ void convolve_and_store(const VerifyParams& p, const BlockRow& b, const ConvRow& cr,
                                                   const ChunkTokens& ch, StagedTokens<K, kTileV, IoT>& st,
                                                   ConvStaging<K, kTileV, IoT>& cs) {
  switch (p.conv.width) {
    case 2: convolve_chunk<K, kTileV, kThreads, 2, kTree, IoT>(p, b, ch, st, cs); break;
    case 3: convolve_chunk<K, kTileV, kThreads, 3, kTree, IoT>(p, b, ch, st, cs); break;
    default: convolve_chunk<K, kTileV, kThreads, 4, kTree, IoT>(p, b, ch, st, cs); break;
  }
  store_conv_history<K, kTileV, kThreads, kTree, IoT>(p, b, cr, ch, cs);
}

// A group's outputs of one token: kRows consecutive values, written by the group's first lane in
// vectors when `vectors` (the output buffer is 16-byte aligned, so every group's rows are aligned to
// what they fill), else one by one.
template <int kRows, class IoT>
__device__ __forceinline__ void store_outputs(IoT* dst, const float (&out)[kRows], bool vectors) {
  if (vectors) {
    store_lane<kRows, IoT>(dst, out);
    return;
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) dst[r] = math::from_f32<IoT>(out[r]);
}

// A new token's u of the lane group's rows, into its ring record (fp32, as computed).
template <int kRows>
__device__ __forceinline__ void store_record_u(float* dst, const float (&u)[kRows]) {
#pragma unroll
  for (int r = 0; r < kRows; ++r) dst[r] = u[r];
}

// The bytes of state and ring records a unit reads and writes (VerifyParams::bytes_moved), as the CPU
// counts its units (kernels/verify_cpu.cpp, unit_bytes): the seed tile, its post-state tiles, the
// folded records (k and g, and u of the tile's rows), the checkpoint on a flush, and its records' u
// (the head's first tile: their k and g too, k by the group's first value head).
template <class Tile, class IoT, class StateT>
__device__ int64_t unit_bytes(const VerifyParams& p, const BlockRow& b) {
  constexpr int64_t K = Tile::kHeadDim, kTile = int64_t(Tile::kTileV) * K * int64_t(sizeof(StateT));
  constexpr int64_t kKg = K * int64_t(sizeof(IoT)), kU = int64_t(Tile::kTileV) * int64_t(sizeof(float));
  int64_t posts = 0;
  for (int32_t t = 0; t < p.tokens; ++t) posts += post_state_row(p, b.n, t, false) >= 0;
  int64_t bytes = kTile * (1 + posts + (b.r.flush ? 1 : 0)) + b.r.replay * (2 * kKg + kU);
  if (b.r.records) {
    bytes += int64_t(p.tokens) * kU;
    if (b.v0 == 0) bytes += int64_t(p.tokens) * kKg * (b.h % (p.value_heads / p.heads) == 0 ? 2 : 1);
  }
  return bytes;
}

// One unit of a launch, after the grid dependency wait: its row resolved, its seed tile in the lanes'
// registers (from where `ahead` read it, or read now), its tokens (r.replay ring records, then the T
// new ones) staged a chunk at a time, and its post-states, outputs and new records written. Persistent, the seed of
// unit `next` is found as the unit starts and prefetched during its last chunk's token loop.
// `early_conv`: the conv window staged before the wait (the first unit's only).
template <class Tile, OutputFormula kFormula, VerifyProbe kProbe, bool kConv, bool kTree, VerifySchedule kSchedule,
          bool kStochastic, class IoT, class StateT>
__device__ __forceinline__ void verify_unit(const VerifyParams& p, int32_t unit, int64_t next, int64_t units,
                                            StateSlice<Tile>& s, SeedAhead<StateT>& ahead, const ConvRow& early_conv,
                                            StagedTokens<Tile::kHeadDim, Tile::kTileV, IoT>& st,
                                            ConvStaging<Tile::kHeadDim, Tile::kTileV, IoT>* cs) {
  constexpr int K = Tile::kHeadDim, V = K, R = Tile::kRows, kTileV = Tile::kTileV, kThreads = Tile::kThreads;
  BlockRow b = unit_row<Tile>(p, unit);
  const LaneRows<Tile> at = lane_rows<Tile>(b);
  const SeedAhead<StateT> held = ahead;
  ahead = {};
  const int32_t T = p.tokens, HV = p.value_heads;
  // Where the tile's outputs start at new token 0, as an offset: with no new tokens (replay's
  // materialize) p.o is null, and offsetting a null pointer is undefined. Tokens are HV * V apart.
  const int64_t o_tile = (int64_t(b.n) * T * HV + b.h) * V + b.v0;
  const int32_t o_stride = HV * V;
  const bool o_vectors = reinterpret_cast<uintptr_t>(p.o) % kVecBytes == 0;

  const bool report = b.v0 == 0 && b.h == 0 && threadIdx.x == 0;
  // Inputs first (a block a unit, tiles of at most 32 rows): with no records to fold (no materialize
  // list, no ring) the token list is the T new tokens whatever the index arrays say, so the
  // first chunk's input copies start, and the lines its preprocessing and scalars will load are asked of
  // L1, before the index reads below: their round trips overlap instead of following each other (at
  // batch 1, where the library runs its 16-row tiles, a layer is such a chain). Nothing here waits for a
  // load. The taller tiles and the persistent schedule, for batches of many blocks an SM, keep the order:
  // the wide tile holds its state in all 128 registers a thread, and the persistent 16-row one, with
  // its prefetch's bookkeeping, spilled with it. A padded row's block reads these inputs (in bounds) and
  // only waits for its copies.
  constexpr bool kInputsFirst = kTileV <= 32 && kSchedule == VerifySchedule::block_a_unit;
  const bool inputs_first = kInputsFirst && p.slot_list == nullptr && p.ring_pending == nullptr && T > 0;
  if (inputs_first) {
    const ChunkTokens first = chunk_tokens(b, 0, T < kChunkTokens ? T : kChunkTokens);  // b.r: no prefix
    start_input_copies<K, kTileV, kThreads, kConv, IoT>(p, b, first, st, cs);
    prefetch_token_inputs<K, kThreads, kConv, IoT>(p, b, first);
  }
  // The conv's row entries are loaded beside the verify's (not after them, as conv_row would when the
  // row turns out not padded); their checks, and what they record, still wait for that.
  ConvRowIndices conv_at;
  if constexpr (kConv) conv_at = conv_row_indices(p.conv, b.n);
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
  if constexpr (kConv) cr = b.r.padded() || !bases.ok ? ConvRow{} : conv_row_at(p.conv, b.n, conv_at, report);
  if (b.r.padded() || !bases.ok || (kConv && cr.padded())) {  // padded row: zeros out, no state written
    drain_copies();
    for (int e = int(threadIdx.x); e < T * kTileV; e += kThreads)
      static_cast<IoT*>(p.o)[o_tile + e / kTileV * o_stride + e % kTileV] = math::from_f32<IoT>(0.0f);
    return;
  }
  TreeBranches<Tile, kTree> tree;
  tree.set(p, b.n, report);
  if (b.r.replay > 0 || b.r.records) {  // the slot's ring rows of this layer
    b.ring_kg = state_row(bases.ring_kg, p.ring_kg, b.r.seed_pool);
    b.ring_u = reinterpret_cast<float*>(state_row(bases.ring_u, p.ring_u, b.r.seed_pool));
  }
  // The whole seed tile is in registers before any state is written: the seed may be a scratch row
  // this verify overwrites, or the checkpoint a flush writes back (docs/modes.md). Each element is read and
  // later written by the same thread only, and no other block touches this tile. Reads the index
  // arrays do not confirm are made again.
  const StateT* seed = verify_seed<StateT>(p, b.r, bases) + at.state_rows;
  if (seed != held.from) load_state<Tile>(seed, at.group_lane, s);
  else if (held.in_shared) load_prefetched<Tile, StateT>(s);
  if constexpr (kConv) {
    if (cr.state != early_conv.state || cr.read != early_conv.read) {
      drain_copies();  // the predicted window lands before its rows are copied again
      stage_conv_window<K, kTileV, kThreads, IoT>(p, b, cr, *cs);
    }
  }
  const StateT* const next_rows =
      kSchedule == VerifySchedule::persistent ? next_seed_rows<Tile, StateT>(p, next, units) : nullptr;
  StateT* const pool_rows = const_cast<StateT*>(seed);  // a flush writes the folded state back here
  const math::StoreDraws draws = kStochastic ? row_store_draws(p, b.n, b.h) : math::StoreDraws{};
  const int row0 = b.v0 + at.tile_row0;  // the lane group's first V row in the head (the draws' elements)
  const RingLayout ring{p.ring_records, p.heads, HV, K, V};
  // The lane group's rows of a record's u (the records of the row's ring, docs/modes.md).
  const auto record_u = [&](int32_t u) { return b.ring_u + ring.u_offset(b.record(p, u), b.h) + b.v0 + at.tile_row0; };
  const auto post_rows = [&](int32_t write_row) {
    return reinterpret_cast<StateT*>(state_row(bases.scratch, p.scratch, write_row)) + at.state_rows;
  };
  const auto output_rows = [&](int32_t t) {
    return static_cast<IoT*>(p.o) + o_tile + int64_t(t) * o_stride + at.tile_row0;
  };

  // The token list: r.replay ring records to fold, then the T new tokens.
  const int32_t U = b.r.replay + T;
  int32_t previous_new = 0;  // new tokens of the previous chunk (fused: the conv history shifts by them)
  for (int32_t u0 = 0; u0 < U; u0 += kChunkTokens) {
    const ChunkTokens ch = chunk_tokens(b, u0, U - u0 < kChunkTokens ? U - u0 : kChunkTokens);
    if (u0 > 0) __syncthreads();  // the previous chunk is consumed before it is overwritten
    if constexpr (kConv && !kTree) {  // a tree keeps the round's window (tree_conv_input)
      if (previous_new > 0) {
        shift_conv_history<K, kTileV, kThreads, IoT>(p.conv.width, previous_new, *cs);
        __syncthreads();
      }
    }
    if (inputs_first && u0 == 0) stage_token_scalars<K, kTileV, kThreads, kConv, IoT>(p, b, ch, st);  // copies above
    else copy_tile_inputs<K, kTileV, kThreads, kConv, IoT>(p, b, ch, st, cs);
    if constexpr (kConv && kTree) stage_tree_conv_sources<K, kTileV, kThreads, IoT>(p, b, ch, *cs);
    if constexpr (kConv) {
      __pipeline_wait_prior(0);
      __syncthreads();
      if (ch.n_new > 0) {
        convolve_and_store<K, kTileV, kThreads, kTree, IoT>(p, b, cr, ch, st, *cs);
        __syncthreads();
      }
    }
    previous_new = ch.n_new;
    preprocess_tokens<K, kTileV, kThreads, kConv, IoT>(p, b, ch, st, cs);
    __pipeline_wait_prior(0);
    __syncthreads();
    // After the last chunk's wait, so that no wait before the next unit holds the token loop up for it.
    if (next_rows != nullptr && u0 + kChunkTokens >= U) ahead = prefetch_seed<Tile>(next_rows, at.group_lane);

    if constexpr (kProbe == VerifyProbe::prologue_only) {
      // The seed and the staged inputs are used, so their loads are made; their sum is never this NaN.
      float sum = st.kq[0] + st.a[ch.count - 1][K - 1];
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int c = 0; c < Tile::kChunks; ++c)
#pragma unroll
          for (int e = 0; e < kSlice; ++e) sum += s[r][c][e];
      if (math::float_to_bits(sum) == 0x7fc0dead) static_cast<IoT*>(p.o)[o_tile] = math::from_f32<IoT>(sum);
      continue;
    }
    constexpr bool kStoresState = kProbe != VerifyProbe::no_state_stores;
    for (int tt = 0; tt < ch.count; ++tt) {
      const int32_t u = u0 + tt, t = u - b.r.replay;  // t < 0: a record to fold
      if (t < 0) {
        float ru[R];
#pragma unroll
        for (int r = 0; r < R; ++r) ru[r] = record_u(u)[r];
        fold_record<Tile>(s, st.a[tt], st.k[tt], ru, at.group_lane);
        if (kStoresState && b.r.flush && u == b.r.replay - 1)
          write_back_prefix<Tile, kStochastic>(pool_rows, at.group_lane, s, for_store(draws, flush_store(p)), row0);
        continue;
      }
      if (t == 0) tree.keep(0, s);
      else tree.enter(t, s);
      float proj[R], qproj[R], du[R];
      decay_and_project<Tile>(s, st.a[tt], st.k[tt], st.q[tt], at.group_lane, proj, qproj);
      group_sums_pair<Tile::kLanes, R>(proj, qproj);
      apply_delta<Tile, IoT>(s, st.k[tt], st.beta[tt], &st.v[tt][at.tile_row0], proj, at.group_lane, du);
      if (kStoresState && st.write_row[tt] >= 0)
        store_state<Tile, kStochastic>(post_rows(st.write_row[tt]), at.group_lane, s, true, for_store(draws, uint32_t(t)),
                                       row0);
      tree.keep(t + 1, s);
      float out[R];
#pragma unroll
      for (int r = 0; r < R; ++r) out[r] = math::fmadd(du[r], st.kq[tt], qproj[r]);  // o = S'q + u (k . q)
      if (at.group_lane == 0) {
        store_outputs<R, IoT>(output_rows(t), out, o_vectors);
        if (b.r.records) store_record_u<R>(record_u(u), du);
      }
    }
  }
  if (p.bytes_moved != nullptr && threadIdx.x == 0) count_bytes(p.bytes_moved, unit_bytes<Tile, IoT, StateT>(p, b));
}

// kConv: the short conv fused in (VerifyParams::conv). kTree: the new tokens form a tree (VerifyParams::parent).
// kStochastic: the state stores round stochastically (docs/low_precision.md, VerifyParams::rounding).
// A block works on unit blockIdx.x, and, persistent, on every gridDim.x-th unit after it.
template <class Tile, OutputFormula kFormula, VerifyProbe kProbe, bool kConv, bool kTree, class IoT, class StateT,
          VerifySchedule kSchedule, bool kStochastic>
__global__ void __launch_bounds__(Tile::kThreads, Tile::kMinBlocksPerSm) verify_kernel(const VerifyParams p) {
  constexpr int K = Tile::kHeadDim, kTileV = Tile::kTileV, kThreads = Tile::kThreads;
  using Staged = StagedTokens<K, kTileV, IoT>;
  using Conv = ConvStaging<K, kTileV, IoT>;
  static_assert(kFitsSharedMemory<Tile, kConv, IoT>,
                "a block's static shared memory is at most 48 KB: this tile is too tall for these dtypes");
  static_assert(!(kTree || kConv) || kSchedule == VerifySchedule::block_a_unit,
                "persistent blocks are for chains of many waves: a tree's branch slots would share the prefetch "
                "buffer's dynamic shared memory, and the fused conv's batches (1 to 8) fit one wave");
  auto& st = shared_object<Staged>();
  Conv* cs = nullptr;
  if constexpr (kConv) cs = &shared_object<Conv>();
  const int64_t units = int64_t(p.rows) * p.value_heads * Tile::kTilesPerHead;

  // With pre-round data the first unit's seed tile (and conv window) is loaded before the wait, from
  // where the index build will say it is.
  StateSlice<Tile> s;
  SeedAhead<StateT> ahead;
  ConvRow early_conv;
  const BlockRow first = unit_row<Tile>(p, int32_t(blockIdx.x));
  if (p.pre_round.slots != nullptr) {
    const RowIndices predicted = row_indices(p.pre_round, resolve_row(p.pre_round, first.n, false));
    const VerifyRow r = predicted_row(p, predicted);
    const VerifyBases bases = r.padded() ? VerifyBases{} : verify_bases(p, r, first.n, false);
    if (bases.ok) {
      const LaneRows<Tile> at = lane_rows<Tile>(first);
      ahead.from = verify_seed<StateT>(p, r, bases) + at.state_rows;
      load_state<Tile>(ahead.from, at.group_lane, s);
    }
    if constexpr (kConv) {
      early_conv = conv_row_at(p.conv, first.n, predicted.slot, predicted.accept, predicted.parity, false);
      if (!early_conv.padded()) stage_conv_window<K, kTileV, kThreads, IoT>(p, first, early_conv, *cs);
    }
  }
  if constexpr (kConv) stage_conv_params<K, kTileV, kThreads, IoT>(p, first, *cs);
  grid_dependency_wait();
  trigger_dependent_launch();

  if constexpr (kSchedule == VerifySchedule::block_a_unit) {
    verify_unit<Tile, kFormula, kProbe, kConv, kTree, kSchedule, kStochastic>(p, int32_t(blockIdx.x), units, units, s,
                                                                              ahead, early_conv, st, cs);
  } else {
    for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
      if (unit != int64_t(blockIdx.x)) __syncthreads();  // the previous unit's staging is consumed first
      verify_unit<Tile, kFormula, kProbe, kConv, kTree, kSchedule, kStochastic>(p, int32_t(unit), unit + gridDim.x, units,
                                                                                s, ahead, early_conv, st, cs);
    }
  }
}

// Enqueues one variant of the family over p's rows: a block per (row, value head, tile), or, persistent,
// as many as the device holds at once by the tile's launch bounds (its multiprocessors times
// Tile::kMinBlocksPerSm, at most a block a unit), each with its prefetch buffer.
template <class Tile, OutputFormula kFormula, VerifyProbe kProbe, bool kConv, bool kTree, class IoT, class StateT,
          VerifySchedule kSchedule = VerifySchedule::block_a_unit, bool kStochastic = false>
cudaError_t launch_verify_tiles(const VerifyParams& p, Launch on) {
  const int64_t units = int64_t(p.rows) * p.value_heads * Tile::kTilesPerHead;
  require(units <= int64_t(INT32_MAX), "launch_verify", "rows", [&] {
    return "= " + std::to_string(p.rows) + " with HV = " + std::to_string(p.value_heads) + " needs " +
           std::to_string(units) + " blocks, more than a grid holds";
  });
  const auto kernel = verify_kernel<Tile, kFormula, kProbe, kConv, kTree, IoT, StateT, kSchedule, kStochastic>;
  if constexpr (kSchedule == VerifySchedule::persistent) {
    const int64_t resident = int64_t(detail::device_multiprocessors()) * Tile::kMinBlocksPerSm;
    return launch_kernel_shared(kernel, unsigned(units < resident ? units : resident), Tile::kThreads,
                                kPrefetchBytes<Tile, StateT>, on, p);
  }
  return launch_kernel_shared(kernel, unsigned(units), Tile::kThreads, kTree ? tree_branch_bytes<Tile>(p.tokens) : 0,
                              on, p);
}

}  // namespace
}  // namespace kdagraph
