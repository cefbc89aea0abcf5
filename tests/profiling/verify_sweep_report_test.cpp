// The sweep's markdown (profiling/verify_sweep_report.cpp, host code of bench_verify_sweep) on made-up
// rows: the batch-1 round's table splits the library's layer into the floor, the 16-row tile's prologue
// and the rest, never names the floor, a probe, the two launches or a member that differs as the fastest,
// and leaves a column it has no row for as "-".
#include <gtest/gtest.h>

#include <string>

#include "profiling/verify_sweep.h"

namespace kdagraph::profiling {
namespace {

SweepShape round_shape(bool conv, int32_t tokens) {
  SweepShape s{conv ? "round-conv" : "round", Mode::fused_accept, 16, tokens, 1};
  s.conv = conv;
  return s;
}

SweepRow row(const SweepShape& s, const std::string& member, int tile_rows, double us, const std::string& check,
             bool probe = false) {
  // Rounds' rows: the rounds table reads neither gbps nor library_us.
  return SweepRow{s, member, tile_rows, us, /*gbps=*/0, /*library_us=*/0, check, check == "bitwise", probe};
}

TEST(SweepMarkdown, TheRoundTableSplitsALayerIntoFloorPrologueAndRest) {
  const SweepShape conv = round_shape(true, 2), plain = round_shape(false, 4);
  SweepGrid grid;
  grid.rounds = {conv, plain};
  SweepResults r;
  r.rows = {
      row(conv, "library", 0, 170.0, "library"),
      row(conv, "rows16-lanes16-R2-w4-b3", 16, 100.0, "bitwise"),
      row(conv, "rows16-broken", 16, 50.0, "DIFFERS (9 words)"),
      row(conv, "unfused", 0, 90.0, "bitwise"),
      row(conv, "rows64-lanes16-R4-w8-b1-prologue", 64, 30.0, "probe", true),  // not the library's batch-1 tile
      row(conv, "rows16-lanes32-R4-w4-b3-prologue", 16, 60.0, "probe", true),
      row(conv, "floor", 0, 40.0, "floor", true),
      row(plain, "library", 0, 160.0, "library"),
  };
  const std::string md = sweep_markdown(r, grid, "test device");
  // 170 / 20 = 8.5 a layer: the floor 40 / 20, the prologue (60 - 40) / 20, the rest (170 - 60) / 20.
  const std::string conv_line =
      "| fused | 2 | 170.0 | 8.50 | 2.00 | 1.00 | 5.50 | rows16-lanes16-R2-w4-b3 | 100.0 | 1.70 | 90.0 |";
  EXPECT_NE(md.find(conv_line), std::string::npos) << md;
  EXPECT_NE(md.find("| none | 4 | 160.0 | 8.00 | - | - | - | library | 160.0 | 1.00 | - |"), std::string::npos)
      << "no floor or prologue rows: their columns say so\n"
      << md;
}

}  // namespace
}  // namespace kdagraph::profiling
