// The members of the verify kernel family the sweep times (bench_verify_sweep.cu), each with its
// launchers for bf16 inputs and fp32 or bf16 state (the sweep's dtypes): compiled in kSweepParts units
// (profiling/verify_sweep_part.cu) so a build compiles them side by side. The list itself is
// profiling/verify_variants.cuh [TAG_VERIFY_VARIANTS].
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "kdagraph/types.hpp"
#include "kernels/launch.h"
#include "kernels/verify.h"

namespace kdagraph::profiling {

using SweepLauncher = cudaError_t (*)(const VerifyParams&, Launch);

struct SweepMember {
  std::string name;
  bool conv = false;     // from the fused conv's list (the conv is fused in), else a chain
  bool exact = false;    // the library's formula and no probe: its bits are the library's
  bool probe = false;    // a probe: leaves work out, its results are not the verify's
  int tile_rows = 0, threads = 0;
  SweepLauncher f32_state = nullptr, bf16_state = nullptr;  // bf16 inputs and outputs
};

inline constexpr int kSweepParts = 4;

// Appends part kPart's members (every kSweepParts-th of each list, from kPart on).
template <int kPart>
void add_sweep_members(std::vector<SweepMember>& out);
template <>
void add_sweep_members<0>(std::vector<SweepMember>& out);
template <>
void add_sweep_members<1>(std::vector<SweepMember>& out);
template <>
void add_sweep_members<2>(std::vector<SweepMember>& out);
template <>
void add_sweep_members<3>(std::vector<SweepMember>& out);

// Every member: chains, then the conv's, each by rows and threads a block.
inline std::vector<SweepMember> sweep_members() {
  std::vector<SweepMember> all;
  add_sweep_members<0>(all);
  add_sweep_members<1>(all);
  add_sweep_members<2>(all);
  add_sweep_members<3>(all);
  static_assert(kSweepParts == 4, "one call a part");
  std::stable_sort(all.begin(), all.end(), [](const SweepMember& a, const SweepMember& b) {
    return a.conv != b.conv ? b.conv : a.tile_rows != b.tile_rows ? a.tile_rows < b.tile_rows : a.threads < b.threads;
  });
  return all;
}

// One shape the sweep runs: a Kimi-Linear layer (H = HV, K = V = 128, bf16 io) in `mode`.
struct SweepShape {
  std::string section;  // chain, modes, conv, tree, round, round-conv (the CSV's first column)
  Mode mode = Mode::fused_accept;
  int32_t value_heads = 16, tokens = 4, batch = 1;
  DType state = DType::f32;
  bool conv = false, tree = false;
  // Replay's ring (R = 3 T): its flush_min, -1 the default T + 1, 0 a flush every round, 2 T (R - T)
  // the laziest. The slots' pending records are spread as that ring keeps them.
  int32_t flush_min = -1;
};

// The CSV's and the tables' name of a shape's mode: replay with its ring's flushing where it is not
// the default ("replay-flush0", "replay-lazy").
std::string mode_label(const SweepShape& s);

// The shapes of a run, by section (profiling/verify_sweep.cpp).
struct SweepGrid {
  std::vector<SweepShape> chains, modes, convs, trees, rounds;
};
SweepGrid sweep_grid();
// The shapes of `bench_verify_sweep --check` (each member once, untimed, for compute-sanitizer): chains
// and two-phase and replay at batch 32, HV 16, T 4, where every persistent member's blocks take several
// units (an H200's 132 SMs: 528 or 264 blocks for 4096 or 1024 units), and the conv at batch 8.
SweepGrid check_grid();
// One shape for each of issue 31's aims, where a profiler says why one is missed: chains at HV 32, T 4,
// batch 32 (bandwidth; the smallest batch of that aim keeps the storage a profiler saves and restores
// for each of its passes near 1 GB) and HV 16, T 2, batch 1 (a round at batch 1); fused accept and
// replay at batch 64, T 4; the conv fused in at batch 1, T 2.
SweepGrid aims_grid();
inline constexpr int32_t kSweepTreeTopK = 4;
// The layers of a round shape: issue 31's L = 20 round (Kimi-Linear-48B at TP 2).
inline constexpr int32_t kSweepRoundLayers = 20;

struct SweepRow {
  SweepShape shape;
  // "library", a member's name, the conv's "unfused", the trees' "chain", a round's "floor"
  std::string member;
  int tile_rows = 0;
  double us = 0, gbps = 0, library_us = 0;  // a round's: us for all its layers
  std::string check;  // "library", "bitwise", "DIFFERS (n words)", "err 1e-3", "probe", "floor", "-"
  bool exact = false, probe = false;        // probe: a probe or a round's floor, never the fastest
};

struct SweepResults {
  int runs = 0;
  double copy_gbps = 0;
  std::vector<SweepMember> members;
  std::vector<SweepRow> rows;
  int mismatches = 0;  // members with the library's formula that gave other bits
};

// The run's rows as CSV, each written (and flushed) as it is measured, so that a run stopped at its cap
// (gpu_check.sh) leaves the rows it measured for sweep_report.py; finish() writes the last row, section
// "end", which tells sweep_report.py the run was whole. An empty path writes nothing.
class SweepCsv {
 public:
  explicit SweepCsv(const std::string& path);
  ~SweepCsv();
  SweepCsv(const SweepCsv&) = delete;  // owns an open file that must be closed exactly once
  SweepCsv& operator=(const SweepCsv&) = delete;
  void add(const SweepRow& row, double copy_gbps);
  void finish();

 private:
  std::FILE* file_;
};

}  // namespace kdagraph::profiling
