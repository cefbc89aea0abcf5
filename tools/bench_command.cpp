// `kdagraph bench`: rounds of the host engine timed over {two-phase, fused-accept} x {eager, graph} x
// {sampler in the round, outside it} x batch sizes x T, in one place. Per point: medians of host time per
// round and, on CUDA, device time per round (CUDA events); the state bytes SPEC §7 says a round moves,
// divided by that time, against the measured copy ceiling. Writes CSV and a markdown table.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "kdagraph/host_engine.hpp"
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
  std::vector<size_t> modes = {0, 1};    // indices into kModeNames
  std::vector<size_t> execs = {0, 1};    // indices into kExecNames
  std::vector<size_t> samplers = {0, 1};  // indices into kSamplerNames
  int32_t rounds = 0;                    // 0: the backend's default
  int32_t warmup = 3;
  double accept_rate = 0.7;
  uint64_t seed = 1;
  std::string csv, md;
};

const std::vector<std::string> kSamplerNames = {"in", "out"};

OptionTable bench_options(BenchOptions& o) {
  OptionTable t("kdagraph bench",
                "Times rounds of the host engine over modes, executions, sampler placement, batch sizes and "
                "draft lengths; prints a markdown table. Defaults: on the CPU the tiny preset over batches "
                "1,2,4,8,16 and drafts 0,3 (seconds); on CUDA batches 1,4,16,64 and drafts 0,3,7.");
  add_model_options(t, o.model);
  add_backend_option(t, o.backend);
  t.value("batches", "N,N,...", "batch sizes (each run in a bucket of exactly that size)",
          [&o](const std::string& n, const std::string& v) { o.batches = parse_int_list(n, v, 1, 4096); });
  t.value("drafts", "N,N,...", "draft lengths, T = N + 1",
          [&o](const std::string& n, const std::string& v) { o.drafts = parse_int_list(n, v, 0, 63); });
  t.value("modes", "LIST", "of two-phase,fused-accept (default both)",
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
  t.value("csv", "FILE", "write the results as CSV (profiling/plot.py draws them)",
          [&o](const std::string&, const std::string& v) { o.csv = v; });
  t.value("md", "FILE", "also write the markdown table to FILE",
          [&o](const std::string&, const std::string& v) { o.md = v; });
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
  double state_bytes = 0;  // per round, SPEC §7
  double bandwidth_gbs = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// SPEC §7: state-sized transfers per layer and request: 1 + T in verify, 2 more in the two-phase commit.
double state_bytes_per_round(const HostEngineConfig& c, int32_t rows) {
  const VerifierConfig& v = c.verifier;
  const double state = double(v.model.value_heads) * v.model.head_v * v.model.head_k * dtype_size(v.pool.state_dtype);
  const int32_t transfers = 1 + v.tokens + (v.mode == Mode::two_phase ? 2 : 0);
  return state * transfers * v.model.layers * rows;
}

Result run_point(const Point& p, const EngineSetup& base, const BenchOptions& o, int32_t rounds) {
  EngineSetup e = base;
  e.mode = p.mode;
  e.exec = p.exec;
  e.sampler_in_graph = p.sampler_in;
  e.tokens = p.tokens;
  e.batch = p.batch;
  e.slots = p.batch;
  e.buckets = {p.batch};
  const HostEngineConfig cfg = engine_config(e);
  const RunStream stream(e.backend);
  DeviceTimer timer(e.backend);
  HostEngine engine(cfg);
  engine.start(stream.get());
  for (int32_t r = 0; r < o.warmup; ++r) engine.run_round(stream.get());
  stream.synchronize();
  const int64_t tokens_before = engine.tokens_accepted();
  std::vector<double> host, device;
  for (int32_t r = 0; r < rounds; ++r) {
    timer.start(stream.get());
    const auto t0 = std::chrono::steady_clock::now();
    engine.run_round(stream.get());
    host.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    timer.stop(stream.get());
    if (timer.available()) device.push_back(timer.elapsed_ms());  // waits for the round's end
  }
  Result res;
  res.p = p;
  res.bucket = engine.runner().rows();
  res.rounds = rounds;
  res.host_ms = median(host);
  const std::vector<double>& per_round = device.empty() ? host : device;
  double total_ms = 0;
  for (double ms : per_round) total_ms += ms;
  if (!device.empty()) res.device_ms = median(device);
  const double ms = device.empty() ? res.host_ms : res.device_ms;
  res.tokens_per_s = double(engine.tokens_accepted() - tokens_before) / (total_ms * 1e-3);
  res.state_bytes = state_bytes_per_round(cfg, p.batch);
  res.bandwidth_gbs = res.state_bytes / (ms * 1e-3) / 1e9;
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
      "backend,mode,exec,sampler,layers,heads,value_heads,head_k,head_v,io_dtype,state_dtype,tokens,batch,bucket,"
      "rounds,host_ms,device_ms,tokens_per_s,state_bytes_per_round,bandwidth_gbs,copy_ceiling_gbs\n";
  const ModelShape& m = base.model;
  for (const Result& r : results) {
    out += std::string(to_string(base.backend)) + "," + to_string(r.p.mode) + "," + to_string(r.p.exec) + "," +
           kSamplerNames[r.p.sampler_in ? 0 : 1] + "," + std::to_string(m.layers) + "," + std::to_string(m.heads) +
           "," + std::to_string(m.value_heads) + "," + std::to_string(m.head_k) + "," + std::to_string(m.head_v) +
           "," + to_string(base.io) + "," + to_string(base.state) + "," + std::to_string(r.p.tokens) + "," +
           std::to_string(r.p.batch) + "," + std::to_string(r.bucket) + "," + std::to_string(r.rounds) + "," +
           fmt("%.6g", r.host_ms) + "," + fmt("%.6g", r.device_ms) + "," + fmt("%.6g", r.tokens_per_s) + "," +
           fmt("%.0f", r.state_bytes) + "," + fmt("%.6g", r.bandwidth_gbs) + "," + fmt("%.6g", ceiling) + "\n";
  }
  return out;
}

std::string markdown(const std::vector<Result>& results, const EngineSetup& base, const std::string& preset,
                     double ceiling) {
  const bool cuda = base.backend == Backend::cuda;
  std::string out = "# kdagraph bench: " + std::string(to_string(base.backend)) + ", preset " + preset + " (" +
                    describe(base.model) + "), io " + to_string(base.io) + ", state " + to_string(base.state) + "\n\n";
  out += "Copy ceiling " + fmt("%.4g", ceiling) + " GB/s (" +
         (cuda ? "device-to-device cudaMemcpy" : "memcpy on the CPU cores") +
         ", bytes read + written). State GB/s: the bytes SPEC 7 says a round moves over " +
         (cuda ? "the device time" : "the host time") + ". " +
         (cuda ? "Device time from CUDA events; host time is the launch cost of the round."
               : "CPU timings: the CPU backend on this machine, not a GPU.") +
         " Sampler `in`: sampler, accept (and the two-phase commit) inside the round; `out`: separate launches "
         "after it.\n\n";
  out += "| mode | exec | sampler | T | batch | host ms/round | device ms/round | tokens/s | state GB/s | % of copy |\n";
  out += "|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const Result& r : results) {
    out += "| " + std::string(to_string(r.p.mode)) + " | " + to_string(r.p.exec) + " | " +
           kSamplerNames[r.p.sampler_in ? 0 : 1] + " | " + std::to_string(r.p.tokens) + " | " +
           std::to_string(r.p.batch) + " | " + fmt("%.4g", r.host_ms) + " | " +
           (cuda ? fmt("%.4g", r.device_ms) : "-") + " | " + fmt("%.4g", r.tokens_per_s) + " | " +
           fmt("%.4g", r.bandwidth_gbs) + " | " + fmt("%.1f", 100.0 * r.bandwidth_gbs / ceiling) + " |\n";
  }
  return out;
}

void write_file(const std::string& option, const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  if (!f) throw Error(option + ": cannot write " + path);
}

int bench(BenchOptions o) {
  EngineSetup base;
  base.model = o.model.shape();
  base.backend = resolve_backend(o.backend);
  base.io = o.model.io;
  base.state = o.model.state;
  base.accept_rate = o.accept_rate;
  base.seed = o.seed;
  const bool cuda = base.backend == Backend::cuda;
  if (o.batches.empty()) o.batches = cuda ? std::vector<int64_t>{1, 4, 16, 64} : std::vector<int64_t>{1, 2, 4, 8, 16};
  if (o.drafts.empty()) o.drafts = cuda ? std::vector<int64_t>{0, 3, 7} : std::vector<int64_t>{0, 3};
  const int32_t rounds = o.rounds > 0 ? o.rounds : cuda ? 50 : 20;

  std::vector<Point> points;
  for (int64_t draft : o.drafts)
    for (int64_t batch : o.batches)
      for (size_t mode : o.modes)
        for (size_t exec : o.execs)
          for (size_t sampler : o.samplers)
            points.push_back(Point{Mode(mode), Exec(exec), sampler == 0, int32_t(draft + 1), int32_t(batch)});

  const double ceiling = copy_ceiling_gbs(base.backend);
  std::vector<Result> results;
  Progress progress(int64_t(points.size()), "point");
  for (const Point& p : points) {
    results.push_back(run_point(p, base, o, rounds));
    progress.update(int64_t(results.size()));
  }
  progress.finish();

  const std::string md = markdown(results, base, o.model.preset, ceiling);
  std::fputs(md.c_str(), stdout);
  if (!o.md.empty()) write_file("--md", o.md, md);
  if (!o.csv.empty()) write_file("--csv", o.csv, csv_text(results, base, ceiling));
  return 0;
}

}  // namespace

int bench_command(int argc, char** argv) {
  BenchOptions o;
  if (!bench_options(o).parse(argc, argv, 2)) return 0;
  return bench(o);
}

}  // namespace kdagraph::cli
