// [TAG_VERIFY_VARIANTS] The members of the verify kernel family (kernels/verify_kernel.cuh) that the sweep
// times on a GPU (profiling/bench_verify_sweep.cu, its members from profiling/verify_sweep_part.cu) and that
// tests/simt/verify_family_simt_test.cpp runs on the CPU first: every tile shape and output formula issue
// 31 asks about, and the probes that split a verify's time by difference. The library's own tiles
// (kernels/verify_shapes.cuh) are among them. One list, so nothing is timed that the SIMT tests skip.
#pragma once

#include <string>
#include <tuple>

#include "kernels/verify_update.cuh"

namespace kdagraph::verify_detail {

template <class TileT, OutputFormula kFormula_ = OutputFormula::decayed_state, VerifyProbe kProbe_ = VerifyProbe::none,
          VerifySchedule kSchedule_ = VerifySchedule::block_a_unit>
struct VerifyVariant {
  using Tile = TileT;
  static constexpr OutputFormula kFormula = kFormula_;
  static constexpr VerifyProbe kProbe = kProbe_;
  static constexpr VerifySchedule kSchedule = kSchedule_;

  // e.g. "rows64-lanes16-R4-w8-b2": V rows a block, lanes a row, rows a lane group, warps, min blocks an
  // SM; "-nostores" and "-prologue" for the probes, "-persistent" for VerifySchedule::persistent.
  static std::string name() {
    std::string n = "rows" + std::to_string(Tile::kTileV) + "-lanes" + std::to_string(Tile::kLanes) + "-R" +
                    std::to_string(Tile::kRows) + "-w" + std::to_string(Tile::kWarps) + "-b" +
                    std::to_string(Tile::kMinBlocksPerSm);
    if (kProbe == VerifyProbe::no_state_stores) n += "-nostores";
    if (kProbe == VerifyProbe::prologue_only) n += "-prologue";
    if (kSchedule == VerifySchedule::persistent) n += "-persistent";
    return n;
  }
};

template <int K, int kLanes, int kRows, int kWarps, int kMinBlocks>
using Decayed = VerifyVariant<VerifyTile<K, kLanes, kRows, kWarps, kMinBlocks>>;
template <int K, int kLanes, int kRows, int kWarps, int kMinBlocks>
using Persistent = VerifyVariant<VerifyTile<K, kLanes, kRows, kWarps, kMinBlocks>, OutputFormula::decayed_state,
                                 VerifyProbe::none, VerifySchedule::persistent>;

// K = 128 chains, one member per per-thread code (lanes a row, rows a lane group) and schedule, beside the
// library's two tiles: 16 lanes a row, R 2 (16 rows a block); 8 lanes a row in two warps (the fewest
// instructions a state element in the SASS, results/2026-12-05-sass-sm90.md, for batch 1); a whole head
// in 512 threads; the library's two tiles persistent, their next seed tile prefetched (for the batches of
// many waves: 128, replay at 64); and the narrow tile's probes. Cut 2026-12-07 (issue 47): the retired
// OutputFormula::post_state members, and those that only repeat another's per-thread code in a wider
// block (32 lanes R 4 in 8 warps, 16 lanes R 2 in 8 warps, 8 lanes R 2 in 8 warps).
using ChainVariants128 = std::tuple<
    Decayed<128, 32, 4, 4, 4>, Decayed<128, 16, 2, 4, 4>, Decayed<128, 8, 2, 2, 4>, Decayed<128, 16, 4, 8, 2>,
    Decayed<128, 16, 4, 16, 1>, Persistent<128, 32, 4, 4, 4>, Persistent<128, 16, 4, 8, 2>,
    VerifyVariant<VerifyTile<128, 32, 4, 4, 4>, OutputFormula::decayed_state, VerifyProbe::no_state_stores>,
    VerifyVariant<VerifyTile<128, 32, 4, 4, 4>, OutputFormula::decayed_state, VerifyProbe::prologue_only>>;

// K = 128 with the short conv fused in (its kernels need 136 to 144 registers a thread: at most three
// 128-thread blocks an SM, one of 256): the library's tile; 64 rows a block (a head's q and k channels
// convolved twice, not 8 times as by the library's tile; the tallest whose staging fits 48 KB with fp32
// io); and the library's tile cut after its prologue (the index reads, the conv window, the conv and its
// history, the preprocessing), which splits the batch-1 round's layer between that prologue and the
// token loop.
using ConvVariants128 = std::tuple<Decayed<128, 32, 4, 4, 3>, Decayed<128, 16, 4, 8, 1>,
                                   VerifyVariant<VerifyTile<128, 32, 4, 4, 3>, OutputFormula::decayed_state,
                                                 VerifyProbe::prologue_only>>;

// K = 64 (the SIMT tests only: the sweep's shapes are K = 128): the library's two tiles, and the smallest
// persistent member, which the ThreadSanitizer build runs.
using ChainVariants64 = std::tuple<Decayed<64, 16, 2, 4, 4>, Decayed<64, 16, 4, 8, 2>, Persistent<64, 16, 2, 4, 4>>;

}  // namespace kdagraph::verify_detail
