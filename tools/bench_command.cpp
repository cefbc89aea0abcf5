// `kdagraph bench`: rounds of the host engine timed over {two-phase, fused-accept} x {eager, graph} x
// {sampler in the round, outside it} x batch sizes x T, in one place. Per point: medians of host time per
// round and, on CUDA, device time per round (CUDA events); the state bytes docs/shapes.md says a round moves,
// divided by that time, against the measured copy ceiling. With --node-trace (CUDA, CUPTI), as many
// rounds again are traced per graph point for the device's idle share between the nodes of a replayed
// round. Writes CSV and a markdown table, then the graphs issue's aims judged on these numbers.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "harness/host_engine.h"
#include "kernels/cpu_isa.h"
#include "kernels/stream.h"
#include "profiling/launch_gate.h"
#include "profiling/node_timeline.h"
#if defined(KDAGRAPH_WITH_CUPTI)
#include "profiling/node_trace.h"
#endif
#include "tools/cli_args.h"
#include "tools/commands.h"
#include "tools/device.h"
#include "tools/engine_options.h"
#include "tools/progress.h"

namespace kdagraph::cli {

namespace {

struct BenchOptions {
  ModelOptions model;
  BackendChoice backend = BackendChoice::automatic;
  std::vector<int64_t> batches, drafts;  // empty: the backend's defaults
  std::vector<size_t> modes = {0, 1, 2};  // indices into kModeNames
  std::vector<size_t> execs = {0, 1};    // indices into kExecNames
  std::vector<size_t> samplers = {0, 1};  // indices into kSamplerNames
  int32_t rounds = 0;                    // 0: the backend's default
  int32_t warmup = 3;
  double accept_rate = 0.7;
  uint64_t seed = 1;
  bool conv = true;
  bool fuse_conv = true;
  bool pdl = true;
  int32_t tree = 0;
  ReplayRing ring;
  bool node_trace = false;
  std::string csv, md;
};

const std::vector<std::string> kSamplerNames = {"in", "out"};

OptionTable bench_options(BenchOptions& o) {
  OptionTable t("kdagraph bench",
                "Times rounds of the host engine over modes, executions, sampler placement, batch sizes and "
                "draft lengths; prints a markdown table. Defaults: on the CPU the tiny preset over batches "
                "1,2,4,8,16 and drafts 0,3 (seconds); on CUDA batches 1,4,16,64 and drafts 0,3,7; a preset "
                "with a draft length of its own (kimi-k3-tp8: 7) runs that one alone.");
  add_model_options(t, o.model);
  add_backend_option(t, o.backend);
  t.value("batches", "N,N,...", "batch sizes (each run in a bucket of exactly that size)",
          [&o](const std::string& n, const std::string& v) { o.batches = parse_int_list(n, v, 1, 4096); });
  t.value("drafts", "N,N,...", "draft lengths, T = N + 1 (default: the preset's, else the backend's)",
          [&o](const std::string& n, const std::string& v) { o.drafts = parse_int_list(n, v, 0, 63); });
  t.value("modes", "LIST", "of two-phase,fused-accept,replay (default all)",
          [&o](const std::string& n, const std::string& v) { o.modes = parse_choice_list(n, v, kModeNames); });
  t.value("execs", "LIST", "of eager,graph (default both)",
          [&o](const std::string& n, const std::string& v) { o.execs = parse_choice_list(n, v, kExecNames); });
  t.value("sampler", "LIST",
          "of in,out: sampler, accept (and two-phase commit) inside the round, or as separate launches "
          "after it as engines ship it today (default both)",
          [&o](const std::string& n, const std::string& v) { o.samplers = parse_choice_list(n, v, kSamplerNames); });
  t.value("rounds", "N", "timed rounds per point (default 20 on the CPU, 50 on CUDA)",
          [&o](const std::string& n, const std::string& v) { o.rounds = int32_t(parse_int(n, v, 1, 1000000)); });
  t.value("warmup", "N", "untimed rounds per point first (default 3)",
          [&o](const std::string& n, const std::string& v) { o.warmup = int32_t(parse_int(n, v, 0, 1000000)); });
  t.value("accept-rate", "X", "probability that each draft token is accepted, in [0, 1] (default 0.7)",
          [&o](const std::string& n, const std::string& v) { o.accept_rate = parse_real(n, v, 0.0, 1.0); });
  t.value("seed", "N", "seed of the synthetic inputs and sampler (default 1)",
          [&o](const std::string& n, const std::string& v) { o.seed = uint64_t(parse_int(n, v, 0, INT64_MAX)); });
  add_conv_option(t, o.conv);
  add_unfused_conv_option(t, o.fuse_conv);
  add_pdl_option(t, o.pdl);
  add_tree_option(t, o.tree);
  add_ring_options(t, o.ring);
  t.value("csv", "FILE", "write the results as CSV",
          [&o](const std::string&, const std::string& v) { o.csv = v; });
  t.value("md", "FILE", "also write the markdown table to FILE",
          [&o](const std::string&, const std::string& v) { o.md = v; });
  t.flag("node-trace",
         "CUDA graph points: trace as many rounds again with CUPTI and report the nodes of a replayed round, "
         "its span and the device's idle share between nodes (aim: under 5%)",
         [&o] {
#if defined(KDAGRAPH_WITH_CUPTI)
           o.node_trace = true;
#else
           (void)o;
           throw UsageError("--node-trace: this build has no CUPTI (it needs the CUDA toolkit's CUPTI library)");
#endif
         });
  return t;
}

struct Point {
  Mode mode;
  Exec exec;
  bool sampler_in;
  int32_t tokens, batch;
};

struct Result {
  Point p;
  int32_t bucket = 0, rounds = 0;
  double host_ms = 0, device_ms = NAN;  // medians per round; device time on CUDA only
  double tokens_per_s = 0;
  int32_t kernel_nodes = 0;  // of one captured round (graph points)
  double state_bytes = 0;  // per round, docs/shapes.md
  double bandwidth_gbs = 0;
  // --node-trace, graph points: medians over the traced replays of the graph's nodes.
  double graph_nodes = NAN, graph_us = NAN, idle_pct = NAN, largest_gap_us = NAN;
};

using profiling::median;

#if defined(KDAGRAPH_WITH_CUPTI)
// The per-point medians of the traced rounds' graph timelines. Each traced round launched one graph, so
// anything but `launches` timelines of one node count means the trace cannot be trusted here.
void add_timelines(Result& res, const std::vector<profiling::LaunchTimeline>& timelines, int32_t launches) {
  if (timelines.size() != size_t(launches))
    throw Error("--node-trace: the trace holds " + std::to_string(timelines.size()) +
                " graph launches, not the " + std::to_string(launches) + " launched");
  std::vector<double> nodes, span, idle, gap;
  for (const profiling::LaunchTimeline& t : timelines) {
    if (t.nodes != timelines.front().nodes)
      throw Error("--node-trace: launches of one graph ran " + std::to_string(timelines.front().nodes) +
                  " and " + std::to_string(t.nodes) + " nodes");
    nodes.push_back(t.nodes);
    span.push_back(t.span_us);
    idle.push_back(100.0 * t.idle_fraction());
    gap.push_back(t.largest_gap_us);
  }
  res.graph_nodes = median(nodes);
  res.graph_us = median(span);
  res.idle_pct = median(idle);
  res.largest_gap_us = median(gap);
}

void trace_off(std::string& trace_problem, const Error& failure) {
  trace_problem = failure.what();
  std::fprintf(stderr, "kdagraph bench: node trace off for the rest of the sweep: %s\n", failure.what());
}
#endif


// The engine of one point: its one bucket is exactly the batch.
EngineSetup point_setup(const Point& p, const EngineSetup& base) {
  EngineSetup e = base;
  e.mode = p.mode;
  e.exec = p.exec;
  e.sampler_in_graph = p.sampler_in;
  e.tokens = p.tokens;
  e.batch = p.batch;
  e.slots = p.batch;
  e.buckets = {p.batch};
  return e;
}

// `trace_problem`: empty while node tracing works; the first failure's message turns it off for the rest
// of the sweep, so a machine where CUPTI cannot trace still gets its timings.
Result run_point(const Point& p, const EngineSetup& base, const BenchOptions& o, int32_t rounds,
                 std::string& trace_problem) {
  const EngineSetup e = point_setup(p, base);
  const HostEngineConfig cfg = engine_config(e);
  const auto stream = detail::StreamHandle::create(e.backend);
  // On CUDA each round is timed by events; on the CPU, where work runs as it is enqueued, by the host clock.
  const bool device_timing = e.backend == Backend::cuda;
  detail::Event round_start(e.backend), round_end(e.backend);
  HostEngine engine(cfg);
  engine.start(stream.get());
  for (int32_t r = 0; r < o.warmup; ++r) engine.run_round(stream.get());
  stream.synchronize();
  const int64_t tokens_before = engine.tokens_accepted();
  std::vector<double> host, device;
  for (int32_t r = 0; r < rounds; ++r) {
    // The round's device time alone: the stream waits at the gate until the whole round is enqueued, so
    // the host's launch latency counts in the host time, not in the device time.
    profiling::LaunchGate gate(stream.get());
    round_start.record(stream.get());
    const auto t0 = std::chrono::steady_clock::now();
    engine.run_round(stream.get());
    host.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    round_end.record(stream.get());
    gate.open();
    if (!device_timing) continue;
    device.push_back(round_end.elapsed_ms_since(round_start));  // waits for the round's end
    if (gate.timed_out())
      throw Error("a timed round waited on its own stream behind the launch gate; its device time is not valid");
  }
  Result res;
  res.p = p;
  res.bucket = engine.runner().rows();
  if (p.exec == Exec::graph) res.kernel_nodes = engine.runner().capture_stats().front().kernel_nodes;
  res.rounds = rounds;
  res.host_ms = median(host);
  const std::vector<double>& per_round = device.empty() ? host : device;
  double total_ms = 0;
  for (double ms : per_round) total_ms += ms;
  if (!device.empty()) res.device_ms = median(device);
  const double ms = device.empty() ? res.host_ms : res.device_ms;
  res.tokens_per_s = double(engine.tokens_accepted() - tokens_before) / (total_ms * 1e-3);
  res.state_bytes = mode_footprint(cfg.verifier).state_bytes_per_row * p.batch;  // docs/shapes.md
  res.bandwidth_gbs = res.state_bytes / (ms * 1e-3) / 1e9;
#if defined(KDAGRAPH_WITH_CUPTI)
  // After the timed rounds, as many again under the trace (tracing slows each node down). Only the
  // trace's own failures turn it off; an engine error still ends the sweep.
  if (o.node_trace && trace_problem.empty() && p.exec == Exec::graph) {
    std::unique_ptr<profiling::NodeTrace> trace;
    try {
      trace = std::make_unique<profiling::NodeTrace>();
    } catch (const Error& failure) {
      trace_off(trace_problem, failure);
    }
    if (trace) {
      for (int32_t r = 0; r < rounds; ++r) engine.run_round(stream.get());
      stream.synchronize();
      try {
        add_timelines(res, trace->take(), rounds);
      } catch (const Error& failure) {
        trace_off(trace_problem, failure);
      }
    }
  }
#else
  (void)trace_problem;
#endif
  engine.finish(stream.get());
  return res;
}

std::string fmt(const char* format, double v) {
  if (std::isnan(v)) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string csv_text(const std::vector<Result>& results, const EngineSetup& base, double ceiling) {
  std::string out =
      "backend,mode,exec,sampler,layers,heads,value_heads,head_k,head_v,io_dtype,state_dtype,tokens,batch,"
      "bucket,rounds,host_ms,device_ms,tokens_per_s,state_bytes_per_round,bandwidth_gbs,copy_ceiling_gbs,"
      "graph_nodes,graph_us_traced,idle_pct,largest_gap_us,conv_width,cpu_isa,ring_records,ring_flush_min\n";
  const ModelShape& m = base.model;
  for (const Result& r : results) {
    // Replay's ring with its defaults filled in for the point's T; empty for the other modes.
    const ReplayRing ring = resolved_ring(base.ring, r.p.tokens);
    const bool replay = mode_policy(r.p.mode).ring;
    out += std::string(to_string(base.backend)) + "," + to_string(r.p.mode) + "," + to_string(r.p.exec) +
           "," + kSamplerNames[r.p.sampler_in ? 0 : 1] + "," + std::to_string(m.layers) + "," +
           std::to_string(m.heads) + "," + std::to_string(m.value_heads) + "," + std::to_string(m.head_k) +
           "," + std::to_string(m.head_v) + "," + to_string(base.io) + "," + to_string(base.state) + "," +
           std::to_string(r.p.tokens) + "," + std::to_string(r.p.batch) + "," + std::to_string(r.bucket) +
           "," + std::to_string(r.rounds) + "," + fmt("%.6g", r.host_ms) + "," + fmt("%.6g", r.device_ms) +
           "," + fmt("%.6g", r.tokens_per_s) + "," + fmt("%.0f", r.state_bytes) + "," +
           fmt("%.6g", r.bandwidth_gbs) + "," + fmt("%.6g", ceiling) + "," + fmt("%.6g", r.graph_nodes) +
           "," + fmt("%.6g", r.graph_us) + "," + fmt("%.6g", r.idle_pct) + "," +
           fmt("%.6g", r.largest_gap_us) + "," + std::to_string(engine_config(base).verifier.conv.width) + "," +
           to_string(cpu_isa()) + "," + (replay ? std::to_string(ring.records) : "") + "," +
           (replay ? std::to_string(ring.flush_min) : "") + "\n";
  }
  return out;
}

const Result* find_point(const std::vector<Result>& results, Mode mode, bool sampler_in, int32_t tokens,
                         int32_t batch) {
  for (const Result& r : results)
    if (r.p.mode == mode && r.p.exec == Exec::graph && r.p.sampler_in == sampler_in && r.p.tokens == tokens &&
        r.p.batch == batch)
      return &r;
  return nullptr;
}

// The replay issue's aims, judged on this run's numbers: replay against fused-accept, both as whole rounds
// in a graph, at least 2x at batch >= 32 and T = 4 (the traffic bound (1 + T) / 2 is 2.5x), and no slower
// at batch 1.
std::string replay_aims_markdown(const std::vector<Result>& results, bool cuda) {
  std::string rows;
  for (const Result& replay : results) {
    if (replay.p.mode != Mode::replay || replay.p.exec != Exec::graph || !replay.p.sampler_in) continue;
    const Result* fused = find_point(results, Mode::fused_accept, true, replay.p.tokens, replay.p.batch);
    if (fused == nullptr) continue;
    const double ms_fused = cuda ? fused->device_ms : fused->host_ms;
    const double ms_replay = cuda ? replay.device_ms : replay.host_ms;
    const double speedup = ms_fused / ms_replay, bound = double(1 + replay.p.tokens) / 2.0;
    const bool at_one = replay.p.batch == 1, at_large = replay.p.batch >= 32 && replay.p.tokens == 4;
    const double aim = at_one ? 1.0 : at_large ? 2.0 : 0.0;
    rows += "| " + std::to_string(replay.p.tokens) + " | " + std::to_string(replay.p.batch) + " | " +
            fmt("%.4g", ms_fused) + " | " + fmt("%.4g", ms_replay) + " | " + fmt("%.4g", speedup) + " | " +
            fmt("%.3f", bound) + " | " + (aim > 0 ? fmt("%.1f", aim) : std::string("-")) + " | " +
            (aim > 0 ? (speedup >= aim ? "pass" : "miss") : std::string("-")) + " |\n";
  }
  if (rows.empty()) return "\nReplay against fused-accept: needs both modes, the graph execution and the sampler in the graph.\n";
  return std::string("\nReplay against fused-accept, whole round in the graph, ms per round (") +
         (cuda ? "device" : "host") +
         " time). Aim: speedup >= 2 at batch >= 32 and T = 4, >= 1 at batch 1; bound: the state traffic "
         "(1 + T) / 2.\n\n| T | batch | fused ms | replay ms | speedup | bound | aim | verdict |\n"
         "|---:|---:|---:|---:|---:|---:|---:|---|\n" +
         rows;
}

// The graphs issue's aims, judged on this run's numbers: at batch 1, fused-accept under a graph against
// the two-phase baseline (verify graph, then accept and commit as separate launches) within 5% of the
// byte bound (1 + T + 2) / (1 + T); and, traced, under 5% idle between the nodes of a replayed round.
std::string aims_markdown(const std::vector<Result>& results, bool cuda, const std::string& trace_problem) {
  std::string out = "\n## Aims\n\n";
  if (!cuda) out += "CPU timings: informational; the aims are for the GPU.\n\n";
  std::vector<int32_t> tokens;
  for (const Result& r : results)
    if (std::find(tokens.begin(), tokens.end(), r.p.tokens) == tokens.end()) tokens.push_back(r.p.tokens);
  std::string rows;
  for (int32_t T : tokens) {
    const Result* base = find_point(results, Mode::two_phase, false, T, 1);
    const Result* fused_out = find_point(results, Mode::fused_accept, false, T, 1);
    const Result* fused_in = find_point(results, Mode::fused_accept, true, T, 1);
    if (base == nullptr || fused_out == nullptr || fused_in == nullptr) continue;
    const auto round_ms = [cuda](const Result* r) { return cuda ? r->device_ms : r->host_ms; };
    const double bound = double(1 + T + 2) / double(1 + T);
    const auto judged = [&](const Result* fused) {
      const double speedup = round_ms(base) / round_ms(fused);
      return fmt("%.4g", round_ms(fused)) + " | " + fmt("%.4g", speedup) + " | " +
             (speedup >= 0.95 * bound ? "pass" : "miss");
    };
    rows += "| " + std::to_string(T) + " | " + fmt("%.4g", round_ms(base)) + " | " + judged(fused_out) +
            " | " + judged(fused_in) + " | " + fmt("%.3f", bound) + " |\n";
  }
  if (rows.empty()) {
    out +=
        "Fused-accept against two-phase: needs batch 1, both modes, the graph execution and both sampler "
        "placements in the sweep.\n";
  } else {
    out +=
        std::string("Batch 1, ms per round (") + (cuda ? "device" : "host") +
        " time). Baseline: two-phase, verify graph, then accept and commit launched separately. Fused-accept "
        "graph with the sampler outside the graph (same launches, no commit), and with the whole round in "
        "the graph. Aim: speedup >= 95% of the byte bound (1 + T + 2) / (1 + T).\n\n";
    out +=
        "| T | two-phase ms | fused, sampler out ms | speedup | aim | fused, whole round ms | speedup | aim | "
        "bound |\n";
    out += "|---:|---:|---:|---:|---|---:|---:|---|---:|\n";
    out += rows;
  }
  out += replay_aims_markdown(results, cuda);
  int traced = 0, under = 0;
  const Result* worst = nullptr;
  for (const Result& r : results) {
    if (std::isnan(r.idle_pct)) continue;
    ++traced;
    under += r.idle_pct < 5.0;
    if (worst == nullptr || r.idle_pct > worst->idle_pct) worst = &r;
  }
  if (worst != nullptr) {
    out += "\nIdle between the nodes of a replayed round (aim: under 5%): " + std::to_string(under) + " of " +
           std::to_string(traced) + " traced graph points meet it; the worst is " +
           fmt("%.2f", worst->idle_pct) + "% (" + to_string(worst->p.mode) + ", sampler " +
           kSamplerNames[worst->p.sampler_in ? 0 : 1] + ", T " + std::to_string(worst->p.tokens) +
           ", batch " + std::to_string(worst->p.batch) +
           "), measured under CUPTI tracing, which slows each node.\n";
  }
  if (!trace_problem.empty())
    out += "\nIdle between the nodes of a replayed round: not measured (" + trace_problem + ").\n";
  return out;
}

// "R=3T, flush at T+1 (or R-T where less) pending records", the defaults of a sweep over T, or the
// values given.
std::string ring_text(const ReplayRing& ring) {
  return "R=" + (ring.records > 0 ? std::to_string(ring.records) : std::string("3T")) + ", flush at " +
         (ring.flush_min >= 0 ? std::to_string(ring.flush_min) : std::string("T+1 (or R-T where less)")) +
         " pending records";
}

std::string markdown(const std::vector<Result>& results, const EngineSetup& base, const std::string& preset,
                     double ceiling, const std::string& trace_problem) {
  const bool cuda = base.backend == Backend::cuda;
  const bool traced =
      std::any_of(results.begin(), results.end(), [](const Result& r) { return !std::isnan(r.graph_us); });
  const bool replay =
      std::any_of(results.begin(), results.end(), [](const Result& r) { return r.p.mode == Mode::replay; });
  std::string out = "# kdagraph bench: " + std::string(to_string(base.backend)) + ", preset " + preset + " (" +
                    describe(base.model) + "), io " + to_string(base.io) + ", state " + to_string(base.state) +
                    ", conv " + describe_conv(engine_config(base).verifier) + ", pdl " +
                    describe_pdl(base.pdl, base.backend) +
                    (base.tree > 0 ? ", top-" + std::to_string(base.tree) + " token trees (docs/trees.md)" : "") +
                    (replay ? ", replay ring " + ring_text(base.ring) : "") + "\n\n";
  out +=
      "Copy ceiling " + fmt("%.4g", ceiling) + " GB/s (" +
      (cuda ? "device-to-device cudaMemcpy" : "memcpy on the CPU cores") +
      ", bytes read + written). State GB/s: the bytes docs/shapes.md says a round moves over " +
      (cuda ? "the device time" : "the host time") + ". " +
      (cuda ? "Device time from CUDA events around the round, with every launch of the round queued before "
              "the first event fires (the stream is held until then), so it is the device's time alone; host "
              "time is the launch cost of the round."
            : "CPU timings: the CPU backend on this machine, not a GPU; its kernels ran " +
                  std::string(to_string(cpu_isa())) + " on " + std::to_string(cpu_threads()) + " threads.") +
      " Sampler `in`: sampler, accept (and the two-phase commit) inside the round; `out`: separate launches "
      "after it. Kernel nodes: of one captured round (graph points), the engine's input kernel of each layer "
      "included.";
  if (traced)
    out +=
        " Traced (graph points, separate rounds under CUPTI): the nodes of one replayed graph, its span "
        "from the first node's start to the last node's end, the share of that span with no node running, "
        "and the longest such gap; medians over the replays.";
  out += "\n\n";
  out +=
      "| mode | exec | sampler | T | batch | kernel nodes | host ms/round | device ms/round | tokens/s | "
      "state GB/s | % of copy |";
  out += traced ? " nodes | graph us (traced) | idle % | longest gap us |\n" : "\n";
  out += "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|";
  out += traced ? "---:|---:|---:|---:|\n" : "\n";
  for (const Result& r : results) {
    out += "| " + std::string(to_string(r.p.mode)) + " | " + to_string(r.p.exec) + " | " +
           kSamplerNames[r.p.sampler_in ? 0 : 1] + " | " + std::to_string(r.p.tokens) + " | " +
           std::to_string(r.p.batch) + " | " + (r.p.exec == Exec::graph ? std::to_string(r.kernel_nodes) : "-") +
           " | " + fmt("%.4g", r.host_ms) + " | " +
           (cuda ? fmt("%.4g", r.device_ms) : "-") + " | " + fmt("%.4g", r.tokens_per_s) + " | " +
           fmt("%.4g", r.bandwidth_gbs) + " | " + fmt("%.1f", 100.0 * r.bandwidth_gbs / ceiling) + " |";
    if (traced)
      out += " " + fmt("%.0f", r.graph_nodes) + " | " + fmt("%.1f", r.graph_us) + " | " +
             fmt("%.2f", r.idle_pct) + " | " + fmt("%.2f", r.largest_gap_us) + " |";
    out += "\n";
  }
  out += aims_markdown(results, cuda, trace_problem);
  return out;
}

void write_file(const std::string& option, const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  if (!f) throw Error(option + ": cannot write " + path);
}

int bench(BenchOptions o) {
  const Preset& preset = find_preset(o.model.preset);
  EngineSetup base;
  base.model = o.model.shape();
  base.backend = resolve_backend(o.backend);
  base.io = o.model.io;
  base.state = o.model.state;
  base.accept_rate = o.accept_rate;
  base.seed = o.seed;
  base.conv_width = o.conv ? preset.conv_width : 0;
  base.fuse_conv = o.fuse_conv;
  base.pdl = o.pdl;
  base.tree = o.tree;
  base.ring = o.ring;
  const bool cuda = base.backend == Backend::cuda;
  if (o.node_trace && !cuda) throw UsageError("--node-trace: traces CUDA graphs, but the backend is the CPU");
  if (o.node_trace && std::find(o.execs.begin(), o.execs.end(), size_t(Exec::graph)) == o.execs.end())
    throw UsageError("--node-trace: traces graph points, but --execs has no graph");
  if (o.batches.empty()) o.batches = cuda ? std::vector<int64_t>{1, 4, 16, 64} : std::vector<int64_t>{1, 2, 4, 8, 16};
  if (o.drafts.empty())
    o.drafts = preset.draft >= 0 ? std::vector<int64_t>{preset.draft}
               : cuda            ? std::vector<int64_t>{0, 3, 7}
                                 : std::vector<int64_t>{0, 3};
  const int32_t rounds = o.rounds > 0 ? o.rounds : cuda ? 50 : 20;

  std::vector<Point> points;
  for (int64_t draft : o.drafts)
    for (int64_t batch : o.batches)
      for (size_t mode : o.modes)
        for (size_t exec : o.execs)
          for (size_t sampler : o.samplers)
            points.push_back(Point{Mode(mode), Exec(exec), sampler == 0, int32_t(draft + 1), int32_t(batch)});
  // Every point's configuration is checked before the first is timed: a ring that cannot hold a T of the
  // sweep is refused at once, by name, not after minutes of other points.
  for (const Point& p : points) validate(engine_config(point_setup(p, base)));

  const double ceiling = copy_ceiling_gbs(base.backend);
  std::vector<Result> results;
  std::string trace_problem;
#if defined(KDAGRAPH_WITH_CUPTI)
  // CUPTI stays attached once it has traced; attach it before the first timed point, so every point is
  // timed in the same condition (and a machine where it cannot trace is known at once).
  if (o.node_trace) {
    try {
      profiling::NodeTrace attach;
    } catch (const Error& failure) {
      trace_off(trace_problem, failure);
    }
  }
#endif
  Progress progress(int64_t(points.size()), "point");
  // The files are rewritten after every point, so a sweep stopped by a time limit keeps what it measured.
  const auto write_files = [&] {
    if (!o.md.empty())
      write_file("--md", o.md, markdown(results, base, o.model.preset, ceiling, trace_problem));
    if (!o.csv.empty()) write_file("--csv", o.csv, csv_text(results, base, ceiling));
  };
  for (const Point& p : points) {
    results.push_back(run_point(p, base, o, rounds, trace_problem));
    write_files();
    progress.update(int64_t(results.size()));
  }
  progress.finish();
  std::fputs(markdown(results, base, o.model.preset, ceiling, trace_problem).c_str(), stdout);
  return 0;
}

}  // namespace

int bench_command(int argc, char** argv) {
  BenchOptions o;
  if (!bench_options(o).parse(argc, argv, 2)) return 0;
  return bench(o);
}

}  // namespace kdagraph::cli
