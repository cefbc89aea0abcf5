// `kdagraph drift` (docs/low_precision.md): how far a KDA state stored in fp32, bf16 or fp16, rounded to nearest or
// stochastically, drifts from an fp64 recurrence of the same accepted tokens, in every mode, over many
// rounds of long-lived requests. The evidence for picking a state dtype and the default rounding.
//
// Each workload is a stream of synthetic rounds (host RNG, one per workload, shared by every
// configuration): B requests that live through every round, T tokens a round, random accept lengths in
// [1, T], L2-normalized keys, betas in (0, 1), log decays given (the precomputed gate), fp32 io. Every
// configuration runs the same rounds on the CPU backend; the reference keeps each request's state in
// fp64 and commits the accepted token's post-state. Reported: the relative error (L2 over L2) of the
// outputs of rounds (c/2, c] and of the committed states at round c, for c = 10, 100, ... up to R.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "kdagraph/verifier.hpp"
#include "kernels/kda_math.h"
#include "kernels/stream.h"
#include "tools/cli_args.h"
#include "tools/commands.h"
#include "tools/engine_options.h"
#include "tools/json_writer.h"

namespace kdagraph::cli {
namespace {

// The statistics of a workload. Chosen to bracket what a KDA layer sees, not to favour a rounding: a
// typical spread of decays; a quarter of the key channels decaying slower than 0.998 a token (where round
// to nearest stops moving a bf16 state); and those slow channels touched by a key in only 2% of tokens
// over a long life (their state changes by decay alone in between).
struct Workload {
  const char* name;
  const char* what;
  double slow_fraction;  // of the key channels, decays in (0.998, 0.9998)
  double touch;          // probability that a key touches a slow channel (1: always)
};

const std::vector<Workload>& workloads() {
  static const std::vector<Workload> kWorkloads = {
      {"typical", "log decays uniform in [-0.5, -0.01] (decays 0.61 to 0.99)", 0.0, 1.0},
      {"slow", "a quarter of the key channels with decays in (0.998, 0.9998), the rest typical", 0.25, 1.0},
      {"sparse", "the slow quarter touched by a key in 2% of tokens only", 0.25, 0.02},
  };
  return kWorkloads;
}

struct DriftOptions {
  int32_t rounds = 10000;
  int32_t batch = 4;
  int32_t draft = 3;
  int32_t head_dim = 64;
  int32_t value_heads = 2;
  uint64_t seed = 1;
  std::vector<size_t> workloads = {0, 1, 2};
  std::vector<size_t> modes = {0, 1, 2};
  std::vector<size_t> states = {0, 1, 2};
  std::vector<size_t> roundings = {0, 1};
  bool json = false;
  std::string json_file;
};

const std::vector<std::string> kRoundingNames = {"nearest", "stochastic"};

OptionTable drift_options(DriftOptions& o) {
  std::vector<std::string> workload_names;
  for (const Workload& w : workloads()) workload_names.push_back(w.name);
  OptionTable t("kdagraph drift",
                "Runs R rounds of synthetic long-lived requests through every mode x state dtype x rounding on "
                "the CPU backend beside an fp64 recurrence of the same accepted tokens (docs/low_precision.md), and prints the "
                "relative error of outputs and committed states at rounds 10, 100, ... R.");
  t.value("rounds", "R", "rounds (default 10000)",
          [&o](const std::string& n, const std::string& v) { o.rounds = int32_t(parse_int(n, v, 1, 10000000)); });
  t.value("batch", "B", "requests, each living through every round (default 4)",
          [&o](const std::string& n, const std::string& v) { o.batch = int32_t(parse_int(n, v, 1, 256)); });
  t.value("draft", "N", "draft tokens a round, T = N + 1 (default 3)",
          [&o](const std::string& n, const std::string& v) { o.draft = int32_t(parse_int(n, v, 0, 15)); });
  t.value("head-dim", "D", "K = V = D (default 64)",
          [&o](const std::string& n, const std::string& v) { o.head_dim = int32_t(parse_int(n, v, 4, 256)); });
  t.value("value-heads", "HV", "value heads of the one layer, one query/key head (default 2)",
          [&o](const std::string& n, const std::string& v) { o.value_heads = int32_t(parse_int(n, v, 1, 64)); });
  t.value("seed", "S", "the workloads' random seed (default 1)",
          [&o](const std::string& n, const std::string& v) { o.seed = uint64_t(parse_int(n, v, 0, INT64_MAX)); });
  t.value("workloads", join(workload_names, ","), "workloads to run (default all)",
          [&o, workload_names](const std::string& n, const std::string& v) { o.workloads = parse_choice_list(n, v, workload_names); });
  t.value("modes", "two-phase,fused-accept,replay", "modes to run (default all; replay with its default lazy ring)",
          [&o](const std::string& n, const std::string& v) { o.modes = parse_choice_list(n, v, kModeNames); });
  t.value("states", "f32,bf16,f16", "state dtypes (default all)",
          [&o](const std::string& n, const std::string& v) { o.states = parse_choice_list(n, v, kDTypeNames); });
  t.value("roundings", "nearest,stochastic", "roundings of a 16-bit state (default both; fp32 is exact)",
          [&o](const std::string& n, const std::string& v) { o.roundings = parse_choice_list(n, v, kRoundingNames); });
  t.flag("json", "print JSON instead of the table (every configuration's series, for plotting)", [&o] { o.json = true; });
  t.value("json-file", "PATH", "also write the JSON to PATH",
          [&o](const std::string&, const std::string& v) { o.json_file = v; });
  return t;
}

// One round's inputs for every request: q, k [B, T, 1, K], v [B, T, HV, V], g [B, T, HV, K] (log
// decays), beta [B, T, HV], and each request's accept length.
struct RoundInputs {
  std::vector<float> q, k, v, g, beta;
  std::vector<int32_t> accepted;
};

class InputStream {
 public:
  InputStream(const Workload& w, const DriftOptions& o, int32_t tokens)
      : w_(w), B_(o.batch), T_(tokens), HV_(o.value_heads), K_(o.head_dim), rng_(o.seed), slow_(size_t(K_)) {
    std::bernoulli_distribution slow(w.slow_fraction);
    for (int32_t i = 0; i < K_; ++i) slow_[size_t(i)] = slow(rng_);
  }
  void next(RoundInputs& in) {
    const size_t BT = size_t(B_) * size_t(T_), K = size_t(K_), HV = size_t(HV_);
    std::normal_distribution<float> normal;
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    std::bernoulli_distribution touch(w_.touch);
    in.q.resize(BT * K);
    in.k.resize(BT * K);
    in.v.resize(BT * HV * K);
    in.g.resize(BT * HV * K);
    in.beta.resize(BT * HV);
    in.accepted.resize(size_t(B_));
    for (size_t e = 0; e < BT * K; ++e) {
      in.q[e] = normal(rng_);
      in.k[e] = slow_[e % K] && !touch(rng_) ? 0.0f : normal(rng_);
    }
    for (float& x : in.v) x = 2.0f * unit(rng_) - 1.0f;
    for (size_t e = 0; e < in.g.size(); ++e)
      in.g[e] = slow_[e % K] ? -(0.0002f + 0.0018f * unit(rng_)) : -(0.01f + 0.49f * unit(rng_));
    for (float& x : in.beta) x = 0.05f + 0.9f * unit(rng_);
    for (int32_t& a : in.accepted) a = 1 + int32_t(rng_() % uint64_t(T_));
  }

 private:
  const Workload& w_;
  int32_t B_, T_, HV_, K_;
  std::mt19937_64 rng_;
  std::vector<bool> slow_;
};

// The fp64 recurrence (docs/math.md, the precomputed gate, L2-normalized q and k, q scaled by 1 / sqrt(K)):
// each request's committed state [HV, V, K], the round's outputs of every token, then the commit.
class Reference {
 public:
  Reference(int32_t B, int32_t T, int32_t HV, int32_t K) : B_(B), T_(T), HV_(HV), K_(K), state_(size_t(B) * HV * K * K) {}

  const std::vector<double>& state() const { return state_; }
  void set_state(const std::vector<double>& s) { state_ = s; }

  // Outputs [B, T, HV, V] into `out`, then each request's state becomes its accepted post-state.
  void round(const RoundInputs& in, std::vector<double>& out) {
    const int32_t K = K_, HV = HV_, T = T_;
    out.assign(size_t(B_) * T * HV * K, 0.0);
    const size_t dim = size_t(K);
    std::vector<double> s(dim * dim), kept(dim * dim), q(dim), k(dim), a(dim);
    const double scale = 1.0 / std::sqrt(double(K));
    for (int32_t n = 0; n < B_; ++n)
      for (int32_t h = 0; h < HV; ++h) {
        double* committed = state_.data() + (size_t(n) * HV + h) * size_t(K) * K;
        std::copy(committed, committed + size_t(K) * K, s.begin());
        for (int32_t t = 0; t < T; ++t) {
          const size_t tok = size_t(n) * T + t;
          normalized(in.q.data() + tok * K, q, scale);
          normalized(in.k.data() + tok * K, k, 1.0);
          for (int32_t i = 0; i < K; ++i) a[size_t(i)] = std::exp(double(in.g[(tok * HV + h) * K + i]));
          const double beta = in.beta[tok * HV + h];
          for (int32_t j = 0; j < K; ++j) {
            double* row = s.data() + size_t(j) * K;
            double p = 0.0;
            for (int32_t i = 0; i < K; ++i) p += (row[i] *= a[size_t(i)]) * k[size_t(i)];
            const double u = beta * (double(in.v[(tok * HV + h) * K + j]) - p);
            double o = 0.0;
            for (int32_t i = 0; i < K; ++i) o += (row[i] += k[size_t(i)] * u) * q[size_t(i)];
            out[(tok * HV + h) * K + j] = o;
          }
          if (t == in.accepted[size_t(n)] - 1) kept = s;
        }
        std::copy(kept.begin(), kept.end(), committed);
      }
  }

 private:
  void normalized(const float* x, std::vector<double>& out, double scale) const {
    double sum = 0.0;
    for (int32_t i = 0; i < K_; ++i) sum += double(x[i]) * x[i];
    const double m = scale / std::sqrt(sum + double(math::kL2NormEps));
    for (int32_t i = 0; i < K_; ++i) out[size_t(i)] = double(x[i]) * m;
  }
  int32_t B_, T_, HV_, K_;
  std::vector<double> state_;
};

// Sums of squared differences and of squared references, for a relative L2 error.
struct ErrorSum {
  double diff = 0.0, ref = 0.0;
  void add(double got, double want) {
    diff += (got - want) * (got - want);
    ref += want * want;
  }
  double relative() const { return ref > 0.0 ? std::sqrt(diff / ref) : 0.0; }
};

struct Configuration {
  Mode mode;
  DType state;
  Rounding rounding;
  std::string label() const {
    std::string s = std::string(kModeNames[size_t(mode)]) + " " + to_string(state);
    if (state != DType::f32) s += std::string(" ") + to_string(rounding);
    return s;
  }
};

struct Series {
  Configuration config;
  std::vector<int32_t> checkpoints;
  std::vector<double> output_error, state_error;  // at each checkpoint
  std::vector<std::pair<int32_t, double>> per_round;  // a round's output error, at log-spaced rounds
  double ms_per_round = 0.0;
};

// Rounds at which the table reports: 10, 100, ... below R, and R.
std::vector<int32_t> checkpoints(int32_t rounds) {
  std::vector<int32_t> c;
  for (int64_t r = 10; r < rounds; r *= 10) c.push_back(int32_t(r));
  c.push_back(rounds);
  return c;
}

bool log_spaced(int32_t r) {  // 1..10, 20..100, 200..1000, ...
  int64_t step = 1;
  while (r > 10 * step) step *= 10;
  return r % step == 0;
}

VerifierConfig drift_config(const DriftOptions& o, const Configuration& c, int32_t tokens) {
  VerifierConfig v;
  v.backend = Backend::cpu;
  v.model = ModelShape{1, 1, o.value_heads, o.head_dim, o.head_dim};
  v.pool = PoolShape{o.batch, tokens, c.state, c.rounding};
  v.max_rows = o.batch;
  v.tokens = tokens;
  v.io_dtype = DType::f32;
  v.options.l2norm_qk = true;
  v.mode = c.mode;
  return v;
}

Series run_configuration(const DriftOptions& o, const Workload& w, const Configuration& c) {
  const int32_t T = o.draft + 1, B = o.batch, HV = o.value_heads, K = o.head_dim;
  Verifier verifier(drift_config(o, c, T));
  const Stream s{Backend::cpu, nullptr};
  // The requests start from fp64 states rounded into the storage; the reference from the same values.
  std::mt19937_64 rng(o.seed ^ 0x5eedull);
  std::uniform_real_distribution<float> d(-0.5f, 0.5f);
  const size_t state_elems = size_t(HV) * K * K, es = dtype_size(c.state);
  std::vector<double> reference_state(size_t(B) * state_elems);
  std::vector<uint8_t> stored(state_elems * es);
  for (int32_t n = 0; n < B; ++n) {
    for (size_t e = 0; e < state_elems; ++e) {
      math::store_from_f32(stored.data(), c.state, int64_t(e), d(rng));
      reference_state[size_t(n) * state_elems + e] = math::load_as_f32(stored.data(), c.state, int64_t(e));
    }
    verifier.prefill(s, n, stored.data());
  }
  Reference reference(B, T, HV, K);
  reference.set_state(reference_state);
  InputStream inputs(w, o, T);

  std::vector<int32_t> slots;
  for (int32_t n = 0; n < B; ++n) slots.push_back(n);
  verifier.set_batch(s, slots.data(), B);
  RoundInputs in;
  std::vector<float> out(size_t(B) * T * HV * K);
  std::vector<double> want;
  LayerInputs layer;
  layer.o = out.data();

  Series series;
  series.config = c;
  series.checkpoints = checkpoints(o.rounds);
  ErrorSum window;
  size_t next_checkpoint = 0;
  double seconds = 0.0;
  for (int32_t r = 1; r <= o.rounds; ++r) {
    inputs.next(in);
    layer.q = in.q.data();
    layer.k = in.k.data();
    layer.v = in.v.data();
    layer.g = in.g.data();
    layer.beta = in.beta.data();
    const auto start = std::chrono::steady_clock::now();
    verifier.enqueue_round(s, &layer, B);
    verifier.enqueue_accept_from_host(s, in.accepted.data(), B);
    if (c.mode == Mode::two_phase) verifier.enqueue_commit(s, B);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    reference.round(in, want);
    ErrorSum round_error;
    for (size_t e = 0; e < out.size(); ++e) round_error.add(out[e], want[e]);
    if (2 * r > series.checkpoints[next_checkpoint]) {
      window.diff += round_error.diff;
      window.ref += round_error.ref;
    }
    if (log_spaced(r)) series.per_round.emplace_back(r, round_error.relative());
    if (r != series.checkpoints[next_checkpoint]) continue;
    // The committed states: materialize moves each request's into its pool row (fused-accept copies it;
    // replay folds its pending records and writes its checkpoint, a flush the run would otherwise make
    // later), then the pool is read back.
    if (c.mode != Mode::two_phase) verifier.enqueue_materialize(s, slots.data(), B);
    ErrorSum state_error;
    for (int32_t n = 0; n < B; ++n) {
      verifier.read_pool(s, n, stored.data());
      for (size_t e = 0; e < state_elems; ++e)
        state_error.add(math::load_as_f32(stored.data(), c.state, int64_t(e)), reference.state()[size_t(n) * state_elems + e]);
    }
    series.output_error.push_back(window.relative());
    series.state_error.push_back(state_error.relative());
    window = ErrorSum{};
    ++next_checkpoint;
  }
  series.ms_per_round = 1e3 * seconds / o.rounds;
  return series;
}

std::string scientific(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2e", x);
  return text;
}

void print_table(const Workload& w, const std::vector<Series>& all) {
  std::printf("\n## %s: %s\n\n", w.name, w.what);
  const Series& first = all.front();
  std::printf("| configuration | ms/round |");
  for (int32_t c : first.checkpoints) std::printf(" output @%d |", c);
  for (int32_t c : first.checkpoints) std::printf(" state @%d |", c);
  std::printf("\n|---|---:|");
  for (size_t i = 0; i < 2 * first.checkpoints.size(); ++i) std::printf("---:|");
  std::printf("\n");
  for (const Series& s : all) {
    std::printf("| %s | %.3f |", s.config.label().c_str(), s.ms_per_round);
    for (double e : s.output_error) std::printf(" %s |", scientific(e).c_str());
    for (double e : s.state_error) std::printf(" %s |", scientific(e).c_str());
    std::printf("\n");
  }
}

void write_json(JsonWriter& j, const DriftOptions& o, const std::vector<std::pair<const Workload*, std::vector<Series>>>& runs) {
  j.begin_object();
  j.field("command", "drift").field("rounds", o.rounds).field("batch", o.batch).field("tokens", o.draft + 1);
  j.field("head_dim", o.head_dim).field("value_heads", o.value_heads).field("seed", int64_t(o.seed));
  j.key("workloads").begin_array();
  for (const auto& [w, series] : runs) {
    j.begin_object().field("name", w->name).field("what", w->what).key("configurations").begin_array();
    for (const Series& s : series) {
      j.begin_object().field("label", s.config.label()).field("mode", kModeNames[size_t(s.config.mode)]);
      j.field("state", to_string(s.config.state)).field("rounding", to_string(s.config.rounding));
      j.field("ms_per_round", s.ms_per_round);
      j.key("checkpoints").begin_array();
      for (size_t i = 0; i < s.checkpoints.size(); ++i)
        j.begin_object()
            .field("round", s.checkpoints[i])
            .field("output_error", s.output_error[i])
            .field("state_error", s.state_error[i])
            .end_object();
      j.end_array().key("per_round_output_error").begin_array();
      for (const auto& [r, e] : s.per_round) j.begin_array().value(r).value(e).end_array();
      j.end_array().end_object();
    }
    j.end_array().end_object();
  }
  j.end_array().end_object();
}

}  // namespace

int drift_command(int argc, char** argv) {
  DriftOptions o;
  if (!drift_options(o).parse(argc, argv, 2)) return 0;
  std::vector<Configuration> configs;
  for (size_t m : o.modes)
    for (size_t st : o.states)
      for (size_t r : o.roundings) {
        const DType state = DType(st);
        if (state == DType::f32 && r != o.roundings.front()) continue;  // an fp32 state is stored exactly
        configs.push_back(Configuration{Mode(m), state, state == DType::f32 ? Rounding::nearest : Rounding(r)});
      }
  std::vector<std::pair<const Workload*, std::vector<Series>>> runs;
  for (size_t wi : o.workloads) {
    const Workload& w = workloads()[wi];
    std::vector<Series> series;
    for (const Configuration& c : configs) {
      if (!o.json) std::fprintf(stderr, "drift: %s, %s ...\n", w.name, c.label().c_str());
      series.push_back(run_configuration(o, w, c));
    }
    if (!o.json) print_table(w, series);
    runs.emplace_back(&w, std::move(series));
  }
  JsonWriter j;
  write_json(j, o, runs);
  if (o.json) std::printf("%s\n", j.str().c_str());
  if (!o.json_file.empty()) {
    std::ofstream f(o.json_file);
    f << j.str() << "\n";
    if (!f) throw std::runtime_error("cannot write " + o.json_file);
  }
  return 0;
}

}  // namespace kdagraph::cli
