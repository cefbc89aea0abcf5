// `kdagraph run`: a host engine decoding R rounds (docs/cli.md): start, run_round x R, finish, each round
// timed on the host clock; with --check, the same rounds through the CPU two-phase eager reference.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "harness/host_engine.h"
#include "kernels/cpu_isa.h"
#include "kernels/stream.h"
#include "tools/check.h"
#include "tools/cli_args.h"
#include "tools/commands.h"
#include "tools/device.h"
#include "tools/engine_options.h"
#include "tools/json_writer.h"
#include "tools/progress.h"

namespace kdagraph::cli {

namespace {

struct RunOptions {
  ModelOptions model;
  BackendChoice backend = BackendChoice::automatic;
  int32_t draft = -1;  // -1: the preset's, else kDefaultDraft
  int32_t batch = 8;
  int32_t slots = 0;  // 0: 2 * batch
  int32_t rounds = 100;
  Mode mode = Mode::fused_accept;
  Exec exec = Exec::graph;
  bool sampler_outside = false;
  double accept_rate = 0.7;
  double retire_rate = 0.0;
  bool vary_batch = false;
  uint64_t seed = 1;
  bool conv = true;
  bool fuse_conv = true;
  bool pdl = true;
  int32_t tree = 0;
  ReplayRing ring;
  int32_t graph_memory_copies = 0;  // 0: not measured
  bool check = false;
  bool json = false;
  std::string json_file;
};

constexpr int32_t kMaxBatch = 4096;
constexpr int32_t kDefaultDraft = 3;

OptionTable run_options(RunOptions& o) {
  OptionTable t("kdagraph run",
                "Decodes R rounds of speculative decoding through the KDA layers with the host engine of "
                "docs/cli.md (synthetic inputs and sampler) and prints a summary.");
  add_model_options(t, o.model);
  t.value("draft", "N", "draft tokens per round, T = N + 1; 0 is plain decode (default: the preset's, else 3)",
          [&o](const std::string& n, const std::string& v) { o.draft = int32_t(parse_int(n, v, 0, 63)); });
  t.value("batch", "N", "live requests per round, 1 to 4096 (default 8)",
          [&o](const std::string& n, const std::string& v) { o.batch = int32_t(parse_int(n, v, 1, kMaxBatch)); });
  t.value("slots", "P", "state pool slots, at least --batch (default 2 x batch)",
          [&o](const std::string& n, const std::string& v) { o.slots = int32_t(parse_int(n, v, 1, 2 * kMaxBatch)); });
  t.value("rounds", "R", "rounds to run (default 100)",
          [&o](const std::string& n, const std::string& v) { o.rounds = int32_t(parse_int(n, v, 1, 100000000)); });
  t.value("mode", "two-phase|fused-accept|replay", "how the state advances between rounds (default fused-accept)",
          [&o](const std::string& n, const std::string& v) { o.mode = Mode(parse_choice(n, v, kModeNames)); });
  t.value("exec", "eager|graph", "launch each round's work, or replay its bucket's graph (default graph)",
          [&o](const std::string& n, const std::string& v) { o.exec = Exec(parse_choice(n, v, kExecNames)); });
  add_backend_option(t, o.backend);
  t.flag("sampler-outside-graph",
         "run the sampler, accept (and two-phase commit) as separate launches after the round, as engines "
         "ship it today",
         [&o] { o.sampler_outside = true; });
  t.value("accept-rate", "X", "probability that each draft token is accepted, in [0, 1] (default 0.7)",
          [&o](const std::string& n, const std::string& v) { o.accept_rate = parse_real(n, v, 0.0, 1.0); });
  t.value("retire-rate", "X", "per round, the probability that a request retires (materialize, read back) "
          "and a new one joins, in [0, 1] (default 0)",
          [&o](const std::string& n, const std::string& v) { o.retire_rate = parse_real(n, v, 0.0, 1.0); });
  t.flag("vary-batch", "each round runs a random subset of the live requests (crossing buckets)",
         [&o] { o.vary_batch = true; });
  t.value("seed", "N", "seed of the synthetic inputs, sampler and requests (default 1)",
          [&o](const std::string& n, const std::string& v) {
            o.seed = uint64_t(parse_int(n, v, 0, INT64_MAX));
          });
  add_conv_option(t, o.conv);
  add_unfused_conv_option(t, o.fuse_conv);
  add_pdl_option(t, o.pdl);
  add_tree_option(t, o.tree);
  add_ring_options(t, o.ring);
  t.value("graph-memory-copies", "N",
          "after the capture, instantiate N copies (1 to 4096) of the largest bucket's graph at once and report "
          "the device memory of one: cudaMemGetInfo moves in pages (2 MiB on an H200), which one graph's share "
          "of N copies is not rounded to (default: not measured; needs --exec graph)",
          [&o](const std::string& n, const std::string& v) { o.graph_memory_copies = int32_t(parse_int(n, v, 1, 4096)); });
  t.flag("check", "rerun the rounds through the CPU two-phase eager reference and compare every round's "
         "outputs and every retired state (bitwise on the CPU); exit 3 on a difference",
         [&o] { o.check = true; });
  t.flag("json", "print the summary as one JSON object instead of text", [&o] { o.json = true; });
  t.value("json-file", "FILE", "also write the JSON summary to FILE",
          [&o](const std::string&, const std::string& v) { o.json_file = v; });
  return t;
}

struct Timing {
  double median_ms = 0, min_ms = 0, max_ms = 0, mean_ms = 0, total_s = 0;
};

Timing summarize(std::vector<double> ms) {
  Timing t;
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  t.median_ms = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
  t.min_ms = ms.front();
  t.max_ms = ms.back();
  const double sum = std::accumulate(ms.begin(), ms.end(), 0.0);
  t.mean_ms = sum / double(n);
  t.total_s = sum * 1e-3;
  return t;
}

struct RunReport {
  RunOptions opt;
  HostEngineConfig cfg;
  std::vector<int32_t> buckets;
  int32_t graphs_captured = 0;
  double capture_ms = 0;
  int64_t graph_device_bytes = 0;            // all buckets' captures (cudaMemGetInfo; 0 on the CPU)
  std::vector<BucketCaptureStats> captures;  // per bucket, in capture order
  GraphMemoryStats graph_memory;             // copies 0: not measured (--graph-memory-copies)
  std::map<int32_t, int32_t> rounds_per_rows;  // rows a round ran with (its bucket for a replay) -> rounds
  int32_t graph_rounds = 0, eager_rounds = 0;
  int32_t rounds = 0;
  int64_t tokens_accepted = 0;
  int64_t requests_retired = 0;
  uint64_t bytes_moved = 0;  // by the rounds' kernels (Verifier::bytes_moved): states and ring records
  Timing timing;
  double tokens_per_s = 0;
  std::string timing_note;
  DeviceErrorWord device_errors;
  bool checked = false;
  CheckResult check;
  std::string comparison;
};

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string int_list(const std::vector<int32_t>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
  return out;
}

double bytes_moved_per_round(const RunReport& r) { return double(r.bytes_moved) / double(r.rounds); }

// Kernel nodes of one captured round (every bucket's graph holds the same round); 0 eagerly.
int32_t kernel_nodes(const RunReport& r) { return r.captures.empty() ? 0 : r.captures.front().kernel_nodes; }

std::string sampler_text(const RunReport& r) {
  const char* accept = mode_policy(r.cfg.verifier.mode).commit ? "sampler, accept, commit" : "sampler, accept";
  if (r.cfg.runner.sampler_in_graph)
    return std::string("inside the round") + (r.cfg.runner.exec == Exec::graph ? "'s graph" : "") + " (" + accept + ")";
  return std::string("outside the round: ") + accept + " as separate launches after it";
}

void print_text(const RunReport& r) {
  const VerifierConfig& v = r.cfg.verifier;
  std::printf("kdagraph run: preset %s (%s), T=%d (draft %d), batch %d, %d slots, io %s, state %s\n",
              r.opt.model.preset.c_str(), describe(v.model).c_str(), v.tokens, v.tokens - 1, r.cfg.batch,
              v.pool.slots, to_string(v.io_dtype), to_string(v.pool.state_dtype));
  std::printf("  backend             %s\n", to_string(v.backend));
  std::printf("  cpu kernels         %s, %d threads (%s)\n", to_string(cpu_isa()), cpu_threads(),
              v.backend == Backend::cpu ? "the backend" : "the CPU reference only");
  std::printf("  mode                %s", to_string(v.mode));
  if (mode_policy(v.mode).ring) std::printf(" (ring %s)", describe_ring(v.ring, v.tokens).c_str());
  std::printf("\n");
  if (r.cfg.runner.exec == Exec::graph)
    std::printf("  exec                graph: %d buckets (%s) captured in %s ms, %s MiB of device memory, %d kernel "
                "nodes a round\n",
                r.graphs_captured, int_list(r.buckets).c_str(), fmt("%.3g", r.capture_ms).c_str(),
                fmt("%.3g", double(r.graph_device_bytes) / (1 << 20)).c_str(), kernel_nodes(r));
  else
    std::printf("  exec                eager (buckets %s unused)\n", int_list(r.buckets).c_str());
  if (r.graph_memory.copies > 0)
    std::printf("  graph memory        %s MiB per graph (%d copies of bucket %d took %s MiB at once)\n",
                fmt("%.4g", r.graph_memory.bytes_per_graph() / (1 << 20)).c_str(), r.graph_memory.copies,
                r.graph_memory.bucket, fmt("%.4g", double(r.graph_memory.device_bytes) / (1 << 20)).c_str());
  std::printf("  sampler             %s\n", sampler_text(r).c_str());
  const ModeFootprint fp = mode_footprint(v);
  std::printf("  state traffic       %s MiB per round at batch %d (%lld state transfers per layer and head)\n",
              fmt("%.4g", fp.state_bytes_per_row * r.cfg.batch / double(1 << 20)).c_str(), r.cfg.batch,
              static_cast<long long>(fp.transfers));
  std::printf("  bytes moved         %s MiB per round, counted by the kernels: the states and ring records "
              "they read and write (not the conv state)\n",
              fmt("%.4g", bytes_moved_per_round(r) / double(1 << 20)).c_str());
  std::printf("  memory per slot     %s MiB: pool %s, scratch %s, ring %s MiB\n",
              fmt("%.4g", double(fp.pool_bytes_per_slot + fp.scratch_bytes_per_slot + fp.ring_bytes_per_slot) /
                              double(1 << 20)).c_str(),
              fmt("%.4g", double(fp.pool_bytes_per_slot) / double(1 << 20)).c_str(),
              fmt("%.4g", double(fp.scratch_bytes_per_slot) / double(1 << 20)).c_str(),
              fmt("%.4g", double(fp.ring_bytes_per_slot) / double(1 << 20)).c_str());
  std::printf("  conv                %s", describe_conv(v).c_str());
  if (v.conv.width > 0)
    std::printf(": state %s KiB per slot, scratch %s KiB", fmt("%.4g", double(fp.conv_state_bytes_per_slot) / 1024).c_str(),
                fmt("%.4g", double(fp.conv_scratch_bytes_per_slot) / 1024).c_str());
  std::printf("\n");
  std::printf("  pdl                 %s\n", describe_pdl(v.pdl, v.backend).c_str());
  if (r.cfg.tree > 0)
    std::printf("  token trees         top-%d trees of T = %d tokens, a random root-to-node path accepted\n", r.cfg.tree,
                v.tokens);
  std::string per_rows;
  for (const auto& [rows, count] : r.rounds_per_rows)
    per_rows += (per_rows.empty() ? "" : ", ") + std::to_string(rows) + " rows x" + std::to_string(count);
  std::printf("  rounds by rows      %s (graph replays %d, eager rounds %d)\n", per_rows.c_str(), r.graph_rounds,
              r.eager_rounds);
  std::printf("  rounds              %d\n", r.rounds);
  std::printf("  tokens accepted     %lld\n", static_cast<long long>(r.tokens_accepted));
  std::printf("  requests retired    %lld\n", static_cast<long long>(r.requests_retired));
  std::printf("  time per round      %s ms median (min %s, max %s, mean %s)\n", fmt("%.4g", r.timing.median_ms).c_str(),
              fmt("%.4g", r.timing.min_ms).c_str(), fmt("%.4g", r.timing.max_ms).c_str(),
              fmt("%.4g", r.timing.mean_ms).c_str());
  std::printf("  tokens per second   %s\n", fmt("%.6g", r.tokens_per_s).c_str());
  std::printf("  timing              %s\n", r.timing_note.c_str());
  std::printf("  device errors       %u\n", r.device_errors.count);
  if (r.checked)
    std::printf("  check               passed: %d rounds and %d retired requests, %s, against the CPU two-phase "
                "eager reference (max relative error %s)\n",
                r.check.rounds_compared, r.check.requests_compared, r.comparison.c_str(),
                fmt("%.3g", r.check.max_rel_error).c_str());
}

std::string to_json(const RunReport& r) {
  const VerifierConfig& v = r.cfg.verifier;
  JsonWriter j;
  j.begin_object();
  j.field("command", "run").field("preset", r.opt.model.preset);
  j.key("model").begin_object();
  j.field("layers", v.model.layers).field("heads", v.model.heads).field("value_heads", v.model.value_heads);
  j.field("head_k", v.model.head_k).field("head_v", v.model.head_v);
  j.end_object();
  j.field("tokens", v.tokens).field("draft", v.tokens - 1).field("batch", r.cfg.batch).field("slots", v.pool.slots);
  j.field("io_dtype", to_string(v.io_dtype)).field("state_dtype", to_string(v.pool.state_dtype));
  j.field("backend", to_string(v.backend)).field("mode", to_string(v.mode)).field("exec", to_string(r.cfg.runner.exec));
  j.key("ring");
  if (!mode_policy(v.mode).ring) {
    j.null();
  } else {
    const ReplayRing ring = resolved_ring(v.ring, v.tokens);
    j.begin_object().field("records", ring.records).field("flush_min", ring.flush_min).end_object();
  }
  j.field("cpu_isa", to_string(cpu_isa())).field("cpu_threads", cpu_threads());
  j.field("sampler_in_graph", r.cfg.runner.sampler_in_graph).field("pdl", v.pdl);
  const ModeFootprint fp = mode_footprint(v);
  j.field("state_transfers_per_round", fp.transfers);
  j.field("state_bytes_per_round", fp.state_bytes_per_row * r.cfg.batch);
  j.field("bytes_moved_per_round", bytes_moved_per_round(r));
  j.field("bytes_moved_counts", "states and ring records the verify, commit and materialize kernels read and "
                                "write, counted by the kernels (not the conv state)");
  j.key("bytes_per_slot").begin_object();
  j.field("pool", fp.pool_bytes_per_slot).field("scratch", fp.scratch_bytes_per_slot);
  j.field("ring", fp.ring_bytes_per_slot);
  j.field("conv_state", fp.conv_state_bytes_per_slot).field("conv_scratch", fp.conv_scratch_bytes_per_slot);
  j.end_object();
  j.key("conv");
  if (v.conv.width == 0) {
    j.null();
  } else {
    j.begin_object().field("width", v.conv.width).field("channels", v.conv.channels);
    j.field("activation", v.conv.activation == ConvActivation::silu ? "silu" : "none").field("bias", false);
    j.field("fused", v.fuse_conv);
    j.end_object();
  }
  j.key("buckets").begin_array();
  for (int32_t b : r.buckets) j.value(b);
  j.end_array();
  j.field("graphs_captured", r.graphs_captured).field("capture_ms", r.capture_ms);
  j.field("graph_device_bytes", r.graph_device_bytes);
  j.field("graph_device_bytes_per_bucket",
          r.graphs_captured > 0 ? double(r.graph_device_bytes) / double(r.graphs_captured) : 0.0);
  j.key("graph_memory");
  if (r.graph_memory.copies == 0) {
    j.null();
  } else {
    j.begin_object().field("bucket", r.graph_memory.bucket).field("copies", r.graph_memory.copies);
    j.field("device_bytes", r.graph_memory.device_bytes).field("bytes_per_graph", r.graph_memory.bytes_per_graph());
    j.end_object();
  }
  j.field("kernel_nodes_per_round", kernel_nodes(r));
  j.key("captures").begin_array();
  for (const BucketCaptureStats& c : r.captures)
    j.begin_object()
        .field("bucket", c.bucket)
        .field("capture_ms", c.capture_ms)
        .field("device_bytes", c.device_bytes)
        .field("kernel_nodes", c.kernel_nodes)
        .end_object();
  j.end_array();
  j.key("rounds_by_rows").begin_object();
  for (const auto& [rows, count] : r.rounds_per_rows) j.field(std::to_string(rows), count);
  j.end_object();
  j.field("graph_rounds", r.graph_rounds).field("eager_rounds", r.eager_rounds);
  j.field("accept_rate", r.cfg.accept_rate).field("retire_rate", r.cfg.retire_rate);
  j.field("vary_batch", r.cfg.vary_batch).field("seed", int64_t(r.cfg.seed)).field("tree", r.cfg.tree);
  j.field("rounds", r.rounds).field("tokens_accepted", r.tokens_accepted).field("requests_retired", r.requests_retired);
  j.key("round_ms").begin_object();
  j.field("median", r.timing.median_ms).field("min", r.timing.min_ms).field("max", r.timing.max_ms);
  j.field("mean", r.timing.mean_ms);
  j.end_object();
  j.field("total_s", r.timing.total_s).field("tokens_per_s", r.tokens_per_s).field("timing", r.timing_note);
  j.field("device_errors", int64_t(r.device_errors.count));
  j.key("check");
  if (!r.checked) {
    j.null();
  } else {
    j.begin_object();
    j.field("passed", true).field("comparison", r.comparison);
    j.field("rounds_compared", r.check.rounds_compared).field("requests_compared", r.check.requests_compared);
    j.field("max_rel_error", r.check.max_rel_error);
    j.end_object();
  }
  j.end_object();
  return j.str();
}

int run(const RunOptions& o) {
  if (o.graph_memory_copies > 0 && o.exec != Exec::graph)
    throw UsageError("--graph-memory-copies: measures a captured graph; --exec eager captures none");
  if (o.slots != 0 && o.slots < o.batch)
    throw UsageError("--slots: " + std::to_string(o.slots) + " is fewer than the " + std::to_string(o.batch) +
                     " requests of --batch (allowed: --batch to " + std::to_string(2 * kMaxBatch) + ")");
  EngineSetup setup;
  setup.model = o.model.shape();
  setup.backend = resolve_backend(o.backend);
  setup.io = o.model.io;
  setup.state = o.model.state;
  const Preset& preset = find_preset(o.model.preset);
  setup.tokens = (o.draft >= 0 ? o.draft : preset.draft >= 0 ? preset.draft : kDefaultDraft) + 1;
  setup.batch = o.batch;
  setup.slots = o.slots;
  setup.mode = o.mode;
  setup.exec = o.exec;
  setup.sampler_in_graph = !o.sampler_outside;
  setup.accept_rate = o.accept_rate;
  setup.retire_rate = o.retire_rate;
  setup.vary_batch = o.vary_batch;
  setup.seed = o.seed;
  setup.keep_outputs = o.check;
  setup.conv_width = o.conv ? preset.conv_width : 0;
  setup.fuse_conv = o.fuse_conv;
  setup.pdl = o.pdl;
  setup.tree = o.tree;
  setup.ring = o.ring;
  setup.count_bytes = true;  // one atomic add per unit of work, for bytes_moved_per_round

  RunReport report;
  report.opt = o;
  report.cfg = engine_config(setup);
  const auto stream = detail::StreamHandle::create(setup.backend);
  HostEngine engine(report.cfg);
  std::unique_ptr<ReferenceCheck> check;
  if (o.check) check = std::make_unique<ReferenceCheck>(report.cfg);

  engine.start(stream.get());
  stream.synchronize();
  const GraphRunner& runner = engine.runner();
  report.buckets = runner.plan().buckets();
  for (const BucketCaptureStats& s : runner.capture_stats()) {
    ++report.graphs_captured;
    report.capture_ms += s.capture_ms;
    report.graph_device_bytes += s.device_bytes;
    report.captures.push_back(s);
  }
  if (o.graph_memory_copies > 0)
    report.graph_memory =
        engine.runner().measure_graph_memory(stream.get(), runner.plan().max_bs(), o.graph_memory_copies);

  engine.verifier().clear_bytes_moved();  // the rounds' bytes only, not the prefills' or a capture's
  Progress progress(o.rounds, "round");
  std::vector<double> round_ms;
  round_ms.reserve(size_t(o.rounds));
  try {
    for (int32_t r = 0; r < o.rounds; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      engine.run_round(stream.get());
      stream.synchronize();  // on CUDA the round's end; nothing to wait for on the CPU
      round_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      const int32_t n = int32_t(engine.batch_slots().size());
      ++report.rounds_per_rows[runner.rows()];
      ++(report.cfg.runner.exec == Exec::graph && runner.plan().bucket_for(n) > 0 ? report.graph_rounds
                                                                                    : report.eager_rounds);
      if (check) check->compare_round(engine);
      progress.update(r + 1);
    }
    report.bytes_moved = engine.verifier().bytes_moved();  // before finish's retirements
    engine.finish(stream.get());
    stream.synchronize();
    if (check) check->compare_finish(engine);
  } catch (const CheckFailure& e) {
    progress.finish();
    std::fprintf(stderr, "kdagraph run --check: FAILED: %s\n", e.what());
    return 3;
  }
  progress.finish();

  report.rounds = engine.rounds_run();
  report.tokens_accepted = engine.tokens_accepted();
  report.requests_retired = int64_t(engine.retired().size());
  report.timing = summarize(round_ms);
  report.tokens_per_s = double(report.tokens_accepted) / report.timing.total_s;
  report.timing_note = setup.backend == Backend::cpu
                           ? "CPU timings: host clock around each round on the CPU backend, not a GPU"
                           : "host clock around each round, the stream synchronized at its end";
  if (o.check) report.timing_note += "; includes copying each round's outputs to the host (--check)";
  report.device_errors = engine.verifier().device_errors();
  if (check) {
    report.checked = true;
    report.check = check->result();
    report.comparison = check->comparison();
    if (report.device_errors.count != 0) {
      std::fprintf(stderr, "kdagraph run --check: FAILED: the device recorded %u errors (first: %s at row %d, value %d)\n",
                   report.device_errors.count, to_string(DeviceErrorCode(report.device_errors.code)),
                   report.device_errors.row, report.device_errors.value);
      return 3;
    }
  }

  const std::string json = to_json(report);
  if (!o.json_file.empty()) {
    std::ofstream f(o.json_file);
    f << json;
    if (!f) throw Error("--json-file: cannot write " + o.json_file);
  }
  if (o.json) std::fputs(json.c_str(), stdout);
  else print_text(report);
  return 0;
}

}  // namespace

int run_command(int argc, char** argv) {
  RunOptions o;
  if (!run_options(o).parse(argc, argv, 2)) return 0;
  return run(o);
}

}  // namespace kdagraph::cli
