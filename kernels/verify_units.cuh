// docs/modes.md on the device: where a verify block's unit (row, value head, tile) lies, and its seed tile's
// movement between the state rows and the lanes' registers (kernels/verify_kernel.cuh): loads, the
// post-state and write-back stores, and VerifySchedule::persistent's prefetch of the next unit's seed.
#pragma once

#include <cuda_pipeline.h>

#include <cstdint>

#include "kernels/launch.cuh"
#include "kernels/verify.h"
#include "kernels/verify_staging.cuh"
#include "kernels/verify_update.cuh"

namespace kdagraph::verify_detail {

// The unit `unit` of a launch (tiles fastest, then value heads, then rows), as a block works on it.
template <class Tile>
__device__ __forceinline__ BlockRow unit_row(const VerifyParams& p, int32_t unit) {
  BlockRow b;
  const int32_t head_unit = unit / Tile::kTilesPerHead;
  b.h = head_unit % p.value_heads;
  b.n = head_unit / p.value_heads;
  b.hq = b.h / (p.value_heads / p.heads);  // grouped heads: value head h reads q/k head h / G
  b.v0 = unit % Tile::kTilesPerHead * Tile::kTileV;
  return b;
}

// Where the lane's work lies in its block's tile and in the row's state and outputs.
template <class Tile>
struct LaneRows {
  int group_lane;      // the lane's place in its group
  int tile_row0;       // the group's first V row in the tile
  int64_t state_rows;  // the group's first row in a (row, all heads) state: h * V * K + (v0 + tile_row0) * K
};

template <class Tile>
__device__ __forceinline__ LaneRows<Tile> lane_rows(const BlockRow& b) {
  constexpr int K = Tile::kHeadDim;
  const int lane = int(threadIdx.x) % kWarpSize, warp = int(threadIdx.x) / kWarpSize;
  LaneRows<Tile> at;
  at.group_lane = lane % Tile::kLanes;
  at.tile_row0 = (warp * Tile::kGroupsPerWarp + lane / Tile::kLanes) * Tile::kRows;
  at.state_rows = b.h * (int64_t(K) * K) + int64_t(b.v0 + at.tile_row0) * K;
  return at;
}

// The seed tile a block has read ahead for its unit, and from where: into the lanes' registers (the
// loads before the grid dependency wait, from pre-round data) or, persistent, into the prefetch buffer.
// The unit compares `from` with the seed its index arrays name, and reads again where they differ.
template <class StateT>
struct SeedAhead {
  const StateT* from = nullptr;
  bool in_shared = false;
};

// VerifySchedule::persistent's prefetch buffer (dynamic shared memory): each thread's own chunks of a
// seed tile, [row][chunk][thread], so that a warp's copies and loads fill whole lines. Only the thread
// that copied a chunk reads it, after its own wait: no barrier.
template <class Tile, class StateT>
constexpr size_t kPrefetchBytes = size_t(Tile::kTileV) * Tile::kHeadDim * sizeof(StateT);

template <class Tile, class StateT>
__device__ __forceinline__ StateT* prefetched_chunk(int r, int j) {
  return dynamic_shared<StateT>() + ((r * Tile::kChunks + j) * Tile::kThreads + int(threadIdx.x)) * kSlice;
}

// The lane's first seed row of the block's next unit, from the index arrays (after the wait), or null
// where there is none to prefetch: no next unit, a padded one, or a materialize list (slot_list: one
// thread resolves a row there, with a scan for repeats; those units read their seeds as they start).
// Asked as a unit starts, so that its index loads overlap the unit's own.
template <class Tile, class StateT>
__device__ __forceinline__ const StateT* next_seed_rows(const VerifyParams& p, int64_t unit, int64_t units) {
  if (unit >= units || p.slot_list != nullptr) return nullptr;
  const BlockRow b = unit_row<Tile>(p, int32_t(unit));
  const VerifyRow r = verify_row(p, b.n, false);
  if (r.padded()) return nullptr;
  const VerifyBases bases = verify_bases(p, r, b.n, false);
  if (!bases.ok) return nullptr;
  return verify_seed<StateT>(p, r, bases) + lane_rows<Tile>(b).state_rows;
}

// The lane's chunks of a seed tile (next_seed_rows) into the prefetch buffer, as one batch of cp.async.
// The tile lies in another (row, head, tile) than any this launch writes before its unit starts. A
// 16-byte copy (fp32) goes through L2 only, an 8-byte one (bf16) may be cached in L1 (cp.async.ca):
// either is fresh, since no block writes the tile before its own unit has read it.
template <class Tile, class StateT>
__device__ __forceinline__ SeedAhead<StateT> prefetch_seed(const StateT* rows, int group_lane) {
#pragma unroll
  for (int i = 0; i < Tile::kRows; ++i)
#pragma unroll
    for (int j = 0; j < Tile::kChunks; ++j)
      __pipeline_memcpy_async(prefetched_chunk<Tile, StateT>(i, j),
                              rows + int64_t(i) * Tile::kHeadDim + chunk_channel<Tile>(group_lane, j),
                              kSlice * sizeof(StateT));
  __pipeline_commit();
  return {rows, true};
}

// The lane's slice as prefetch_seed copied it, once its copies have landed.
template <class Tile, class StateT>
__device__ __forceinline__ void load_prefetched(StateSlice<Tile>& s) {
  __pipeline_wait_prior(0);
#pragma unroll
  for (int r = 0; r < Tile::kRows; ++r)
#pragma unroll
    for (int j = 0; j < Tile::kChunks; ++j) load_staged_slice(prefetched_chunk<Tile, StateT>(r, j), s[r][j]);
}

// The lane's slice of kRows state rows (K apart, from the group's first row), in and out.
template <class Tile, class StateT>
__device__ __forceinline__ void load_state(const StateT* rows, int group_lane, StateSlice<Tile>& s) {
#pragma unroll
  for (int r = 0; r < Tile::kRows; ++r)
#pragma unroll
    for (int j = 0; j < Tile::kChunks; ++j)
      load_slice(rows + int64_t(r) * Tile::kHeadDim + chunk_channel<Tile>(group_lane, j), s[r][j]);
}

// A store of the lane's slice, rounded as `draws` say; `row0` is the group's first V row in the head
// (the draws' element index). `keep`: the slice becomes the values stored.
template <class Tile, bool kStochastic, class StateT>
__device__ __forceinline__ void store_state(StateT* rows, int group_lane, StateSlice<Tile>& s, bool streaming,
                                            const math::StoreDraws& draws, int row0, bool keep = false) {
  constexpr int K = Tile::kHeadDim;
#pragma unroll
  for (int r = 0; r < Tile::kRows; ++r)
#pragma unroll
    for (int j = 0; j < Tile::kChunks; ++j) {
      const int channel = chunk_channel<Tile>(group_lane, j);
      store_slice<kStochastic>(rows + int64_t(r) * K + channel, s[r][j], streaming, draws,
                               uint32_t(((row0 + r) * K + channel) / kSlice), keep);
    }
}

// The replayed prefix is applied: the pool holds it from now on, and the new tokens go on from the
// state as it reads back (bit for bit what the other modes seed from, each element as it was rounded).
template <class Tile, bool kStochastic, class StateT>
__device__ __forceinline__ void write_back_prefix(StateT* pool_rows, int group_lane, StateSlice<Tile>& s,
                                                  const math::StoreDraws& draws, int row0) {
  store_state<Tile, kStochastic>(pool_rows, group_lane, s, false, draws, row0, true);
}

}  // namespace kdagraph::verify_detail
