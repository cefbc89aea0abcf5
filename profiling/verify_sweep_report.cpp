// The sweep's shapes and its report (profiling/verify_sweep.h): host code of bench_verify_sweep.
#include <cmath>
#include <cstdio>
#include <map>
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

namespace {

std::string shape_key(const SweepShape& s) {
  return s.section + "/" + mode_label(s) + "/" + std::to_string(s.value_heads) + "/" + std::to_string(s.tokens) +
         "/" + std::to_string(s.batch) + "/" + to_string(s.state);
}

// The rows of one shape, in run order.
std::vector<const SweepRow*> rows_of(const SweepResults& sw, const SweepShape& s) {
  std::vector<const SweepRow*> out;
  for (const SweepRow& r : sw.rows)
    if (shape_key(r.shape) == shape_key(s)) out.push_back(&r);
  return out;
}

const SweepRow* find(const std::vector<const SweepRow*>& rs, const std::string& member) {
  for (const SweepRow* r : rs)
    if (r->member == member) return r;
  return nullptr;
}

// The fastest kernel that computes the verify (no probe; a member with the library's formula only if it
// gave the library's bits; not a round's two launches a layer, "unfused", which have a column of their own).
const SweepRow* fastest(const std::vector<const SweepRow*>& rs) {
  const SweepRow* best = nullptr;
  for (const SweepRow* r : rs)
    if (!r->probe && r->member != "unfused" &&
        (r->check == "library" || r->check == "bitwise" || r->check.rfind("err", 0) == 0) &&
        (best == nullptr || r->us < best->us))
      best = r;
  return best;
}

}  // namespace

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

std::string sweep_markdown(const SweepResults& sw, const SweepGrid& grid, const std::string& device) {
  const auto& [chains, modes, convs, trees, rounds] = grid;
  std::string md;
  char line[512];
  auto add = [&](const char* fmt, auto... args) {
    std::snprintf(line, sizeof line, fmt, args...);
    md += line;
  };
  add("# bench_verify_sweep: %s; cudaMemcpy D2D (read + write) %.0f GB/s; cold medians of %d runs (us)\n\n",
      device.c_str(), sw.copy_gbps, sw.runs);
  add("K = V = 128, H = HV, bf16 io, gate, beta logit and L2 norm in the kernel; each layer's parameters as a round's "
      "verify gets them in a graph. `check`: a member gave the library's bits (outputs and storage) or not."
      "\n\n");
  add("## Chains, fused accept: the library and the fastest member\n\n");
  add("| HV | T | batch | state | library us | %% copy | fastest | us | %% copy | library / fastest | narrow prologue us | "
      "narrow stores us | wide prologue us | wide stores us |\n|---:|---:|---:|---|---:|---:|---|---:|---:|---:|---:|---:|"
      "---:|---:|\n");
  const std::string narrow = "rows16-lanes32-R4-w4-b4", wide = "rows64-lanes16-R4-w8-b2";
  for (const SweepShape& s : chains) {
    const auto rs = rows_of(sw, s);
    const SweepRow* lib = find(rs, "library");
    const SweepRow* best = fastest(rs);
    if (lib == nullptr || best == nullptr) continue;
    // Prologue: the prologue probe's time; stores: the full member's time less the no-stores probe's.
    auto split = [&](const std::string& base, bool stores) {
      const SweepRow* full = find(rs, base);
      const SweepRow* probe = find(rs, base + (stores ? "-nostores" : "-prologue"));
      if (full == nullptr || probe == nullptr) return std::string("-");
      std::snprintf(line, sizeof line, "%.1f", stores ? full->us - probe->us : probe->us);
      return std::string(line);
    };
    add("| %d | %d | %d | %s | %.1f | %.0f%% | %s | %.1f | %.0f%% | %.2f | %s | %s | %s | %s |\n", s.value_heads,
        s.tokens, s.batch, to_string(s.state), lib->us, 100 * lib->gbps / sw.copy_gbps, best->member.c_str(), best->us,
        100 * best->gbps / sw.copy_gbps, lib->us / best->us, split(narrow, false).c_str(), split(narrow, true).c_str(),
        split(wide, false).c_str(), split(wide, true).c_str());
  }

  add("\n## Each member against the library over the chain grid (geometric mean of library / member)\n\n");
  add("| member | batch 1 | batch 8 | batch 32 | batch 128 | all | check |\n|---|---:|---:|---:|---:|---:|---|\n");
  std::vector<std::string> names;
  for (const SweepMember& m : sw.members)
    if (!m.conv) names.push_back(m.name);
  for (const std::string& name : names) {
    std::map<int32_t, std::pair<double, int>> by_batch;
    double all = 0;
    int n = 0, bad = 0;
    for (const SweepRow& r : sw.rows) {
      if (r.shape.section != "chain" || r.member != name) continue;
      const double x = std::log(r.library_us / r.us);
      by_batch[r.shape.batch].first += x;
      ++by_batch[r.shape.batch].second;
      all += x;
      ++n;
      bad += r.check.rfind("DIFFERS", 0) == 0;
    }
    if (n == 0) continue;
    auto mean = [&](int32_t b) {
      const auto it = by_batch.find(b);
      if (it == by_batch.end()) return std::string("-");
      std::snprintf(line, sizeof line, "%.2f", std::exp(it->second.first / it->second.second));
      return std::string(line);
    };
    add("| %s | %s | %s | %s | %s | %.2f | %s |\n", name.c_str(), mean(1).c_str(), mean(8).c_str(), mean(32).c_str(),
        mean(128).c_str(), std::exp(all / n), bad > 0 ? "DIFFERS on some shapes" : "ok");
  }

  add("\n## Modes, fp32 state (replay folds its slots' pending records first: R = 3 T, flushing at T + 1 "
      "pending, every round (flush0) or only when full (lazy))\n\n");
  add("| HV | T | batch | mode | library us | %% copy | fastest | us | fused-accept / replay, library |\n"
      "|---:|---:|---:|---|---:|---:|---|---:|---:|\n");
  for (const SweepShape& s : modes) {
    const auto rs = rows_of(sw, s);
    const SweepRow* lib = find(rs, "library");
    const SweepRow* best = fastest(rs);
    if (lib == nullptr || best == nullptr) continue;
    std::string ratio = "-";
    if (s.mode == Mode::replay) {
      SweepShape f = s;
      f.mode = Mode::fused_accept;
      if (const SweepRow* fl = find(rows_of(sw, f), "library")) {
        std::snprintf(line, sizeof line, "%.2f (aim: >= 2 at batch >= 32, T 8)", fl->us / lib->us);
        ratio = line;
      }
    }
    add("| %d | %d | %d | %s | %.1f | %.0f%% | %s | %.1f | %s |\n", s.value_heads, s.tokens, s.batch, mode_label(s).c_str(), lib->us,
        100 * lib->gbps / sw.copy_gbps, best->member.c_str(), best->us, ratio.c_str());
  }

  add("\n## The short conv fused in (HV 16, C = 6144, W 4, fp32 state): one kernel against two launches\n\n");
  add("| T | batch | unfused us | library fused us | fused / unfused (aim <= 0.85) | fastest | us |\n"
      "|---:|---:|---:|---:|---:|---|---:|\n");
  for (const SweepShape& s : convs) {
    const auto rs = rows_of(sw, s);
    const SweepRow *lib = find(rs, "library"), *unfused = find(rs, "unfused"), *best = fastest(rs);
    if (lib == nullptr || unfused == nullptr || best == nullptr) continue;
    add("| %d | %d | %.1f | %.1f | %.2f | %s | %.1f |\n", s.tokens, s.batch, unfused->us, lib->us, lib->us / unfused->us,
        best->member.c_str(), best->us);
  }

  add("\n## Top-%d token trees against chains (T 8, HV 16, fp32 state), the library's kernels\n\n", kSweepTreeTopK);
  add("| batch | chain us | tree us | tree / chain (aim <= 1.2) |\n|---:|---:|---:|---:|\n");
  for (const SweepShape& s : trees) {
    const auto rs = rows_of(sw, s);
    const SweepRow *tree = find(rs, "library"), *chain = find(rs, "chain");
    if (tree == nullptr || chain == nullptr) continue;
    add("| %d | %.1f | %.1f | %.2f |\n", s.batch, chain->us, tree->us, tree->us / chain->us);
  }
  if (!rounds.empty()) {
    add("\n## A round of %d layers at batch 1 (HV 16, fp32 state): each kernel's launches in one graph with PDL, "
        "cold medians of a replay (us)\n\n",
        kSweepRoundLayers);
    add("The verify's part of issue 31's L = 20 round, whose aim (the whole round, round_bench) is 120 us at T 2 "
        "and 150 us at T 4.\n\n");
    add("A layer of the library's round split three ways (us a layer): the floor, %d launches of the library's "
        "grid whose blocks only wait and trigger; the prologue, the 16-row tile (the library's at batch 1) cut "
        "before its token loop (-prologue), less the floor; the rest, the token loop and its stores.\n\n",
        kSweepRoundLayers);
    add("| conv | T | library us | us a layer | floor | prologue | rest | fastest | us | library / fastest | "
        "unfused us |\n"
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|\n");
    const auto per_layer = [&](const SweepRow* r, double minus) {
      if (r == nullptr) return std::string("-");
      std::snprintf(line, sizeof line, "%.2f", (r->us - minus) / kSweepRoundLayers);
      return std::string(line);
    };
    for (const SweepShape& s : rounds) {
      const auto rs = rows_of(sw, s);
      const SweepRow *lib = find(rs, "library"), *best = fastest(rs), *unfused = find(rs, "unfused");
      const SweepRow *floor_row = find(rs, "floor"), *prologue_row = nullptr;
      for (const SweepRow* r : rs)
        if (r->tile_rows == 16 && r->member.size() > 9 && r->member.compare(r->member.size() - 9, 9, "-prologue") == 0)
          prologue_row = r;
      if (lib == nullptr || best == nullptr) continue;
      std::string two = "-";
      if (unfused != nullptr) {
        std::snprintf(line, sizeof line, "%.1f", unfused->us);
        two = line;
      }
      const std::string floor_us = per_layer(floor_row, 0);
      const std::string prologue_us = floor_row != nullptr ? per_layer(prologue_row, floor_row->us) : "-";
      const std::string rest_us = prologue_row != nullptr ? per_layer(lib, prologue_row->us) : "-";
      add("| %s | %d | %.1f | %.2f | %s | %s | %s | %s | %.1f | %.2f | %s |\n", s.conv ? "fused" : "none", s.tokens,
          lib->us, lib->us / kSweepRoundLayers, floor_us.c_str(), prologue_us.c_str(), rest_us.c_str(),
          best->member.c_str(), best->us, lib->us / best->us, two.c_str());
    }
  }
  add("\n%d member run(s) with the library's formula gave other bits than the library%s\n", sw.mismatches,
      sw.mismatches > 0 ? ": a bug, fix it before reading the times" : "");
  return md;
}


}  // namespace kdagraph::profiling
