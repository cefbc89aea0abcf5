// The sweep's shapes and its CSV (profiling/verify_sweep.h): host code of bench_verify_sweep. The CSV's
// tables and issue 31's aims are profiling/sweep_report.py's.
#include <cstdio>
#include <string>
#include <vector>

#include "kdagraph/error.hpp"
#include "profiling/verify_sweep.h"

namespace kdagraph::profiling {
namespace {

std::vector<SweepShape> chain_shapes() {
  std::vector<SweepShape> out;
  for (DType state : {DType::f32, DType::bf16})
    for (int32_t hv : {16, 32})
      for (int32_t t : {2, 4, 8})
        for (int32_t b : {1, 8, 32, 128}) out.push_back(SweepShape{"chain", Mode::fused_accept, hv, t, b, state});
  return out;
}

std::vector<SweepShape> mode_shapes() {
  std::vector<SweepShape> out;
  for (int32_t hv : {16, 32})
    for (int32_t b : {1, 64})
      for (Mode m : {Mode::two_phase, Mode::fused_accept, Mode::replay}) out.push_back(SweepShape{"modes", m, hv, 4, b});
  // Kimi-K3 at TP 8 (HV 12, T 8, docs/shapes.md): fused accept against the ring flushing every round, at
  // T + 1 pending records, and only when full (issue 48's members).
  for (int32_t b : {1, 32, 64}) {
    out.push_back(SweepShape{"modes", Mode::fused_accept, 12, 8, b});
    for (int32_t flush_min : {0, -1, 16}) {
      SweepShape s{"modes", Mode::replay, 12, 8, b};
      s.flush_min = flush_min;
      out.push_back(s);
    }
  }
  return out;
}

}  // namespace

std::string mode_label(const SweepShape& s) {
  if (s.mode != Mode::replay || s.flush_min == -1) return to_string(s.mode);
  return s.flush_min == 0 ? "replay-flush0" : "replay-lazy";
}

SweepGrid sweep_grid() {
  SweepGrid g{chain_shapes(), mode_shapes(), {}, {}, {}};
  for (int32_t t : {2, 4})
    for (int32_t b : {1, 8}) {
      SweepShape s{"conv", Mode::fused_accept, 16, t, b};
      s.conv = true;
      g.convs.push_back(s);
    }
  for (int32_t b : {1, 16}) {
    SweepShape s{"tree", Mode::fused_accept, 16, 8, b};
    s.tree = true;
    g.trees.push_back(s);
  }
  for (bool conv : {true, false})
    for (int32_t t : {2, 4}) {
      SweepShape s{conv ? "round-conv" : "round", Mode::fused_accept, 16, t, 1};
      s.conv = conv;
      g.rounds.push_back(s);
    }
  return g;
}

SweepGrid check_grid() {
  SweepGrid g;
  for (DType state : {DType::f32, DType::bf16}) g.chains.push_back(SweepShape{"chain", Mode::fused_accept, 16, 4, 32, state});
  for (Mode m : {Mode::two_phase, Mode::replay}) g.modes.push_back(SweepShape{"modes", m, 16, 4, 32});
  SweepShape conv{"conv", Mode::fused_accept, 16, 4, 8};
  conv.conv = true;
  g.convs.push_back(conv);
  return g;
}

SweepGrid aims_grid() {
  SweepGrid g;
  g.chains = {SweepShape{"chain", Mode::fused_accept, 32, 4, 32}, SweepShape{"chain", Mode::fused_accept, 16, 2, 1}};
  for (Mode m : {Mode::fused_accept, Mode::replay}) g.modes.push_back(SweepShape{"modes", m, 16, 4, 64});
  SweepShape conv{"conv", Mode::fused_accept, 16, 2, 1};
  conv.conv = true;
  g.convs.push_back(conv);
  return g;
}

SweepCsv::SweepCsv(const std::string& path) : file_(path.empty() ? nullptr : std::fopen(path.c_str(), "w")) {
  if (path.empty()) return;
  if (file_ == nullptr) throw Error("bench_verify_sweep: cannot write " + path);
  std::fprintf(file_, "section,mode,value_heads,tokens,batch,state,member,tile_rows,us,gbps,copy_gbps,fraction_of_copy,"
                      "library_us,speedup_vs_library,check\n");
  std::fflush(file_);
}

SweepCsv::~SweepCsv() {
  if (file_ != nullptr) std::fclose(file_);
}

void SweepCsv::add(const SweepRow& r, double copy_gbps) {
  if (file_ == nullptr) return;
  std::fprintf(file_, "%s,%s,%d,%d,%d,%s,%s,%d,%.3f,%.1f,%.1f,%.3f,%.3f,%.3f,%s\n", r.shape.section.c_str(),
               mode_label(r.shape).c_str(), r.shape.value_heads, r.shape.tokens, r.shape.batch, to_string(r.shape.state),
               r.member.c_str(), r.tile_rows, r.us, r.gbps, copy_gbps, r.gbps / copy_gbps, r.library_us,
               r.library_us / r.us, r.check.c_str());
  std::fflush(file_);
}

void SweepCsv::finish() {
  if (file_ == nullptr) return;
  std::fprintf(file_, "end,,,,,,,,,,,,,,complete\n");
  std::fflush(file_);
}

}  // namespace kdagraph::profiling
