// The host engine of docs/cli.md. Host decisions (who joins, retires, is batched) come from a std RNG seeded
// with the config's seed; every number the device sees comes from harness/synthetic.h.
#include "harness/host_engine.h"

#include <algorithm>
#include <random>
#include <string>

#include "graph/dispatch.h"
#include "graph/validate.h"
#include "harness/synthetic.h"
#include "kernels/memory.h"

namespace kdagraph {

using detail::Buffer;

void validate(const HostEngineConfig& c) {
  const char* where = "HostEngineConfig";
  validate(c.verifier);
  require_in_range(where, "batch", c.batch, 1, c.verifier.max_rows);
  require(c.accept_rate >= 0.0 && c.accept_rate <= 1.0, where, "accept_rate",
          "= " + std::to_string(c.accept_rate) + " is outside the allowed range [0, 1]");
  require(c.retire_rate >= 0.0 && c.retire_rate <= 1.0, where, "retire_rate",
          "= " + std::to_string(c.retire_rate) + " is outside the allowed range [0, 1]");
  require_in_range(where, "tree", c.tree, 0, c.verifier.tokens);
  if (c.tree > 0) {
    VerifierConfig with_trees = c.verifier;
    with_trees.trees = true;
    validate(with_trees);  // what trees ask of the rest (docs/trees.md)
  }
}

namespace {

struct Request {
  uint64_t id;
  int32_t slot;
  int32_t rounds;
};

}  // namespace

struct HostEngine::Impl {
  HostEngineConfig cfg;
  Verifier verifier;
  // Inputs are shared by the layers (regenerated before each layer's verify); outputs are per layer.
  Buffer q, k, v, g, beta, outputs, gate_params, round_counter, accepted, join_state;
  Buffer accept_index;  // with a tree: the sampler's paths [N, T]
  Buffer x, conv_weights, join_window;  // with a conv: pre-conv projections, [L, C, W] weights, a join's window
  std::unique_ptr<GraphRunner> runner;
  std::mt19937_64 rng;
  std::vector<Request> live;
  std::vector<int32_t> free_slots;
  std::vector<int32_t> batch;
  uint64_t next_request = 0;
  int32_t rounds_run = 0;
  int64_t tokens_accepted = 0;
  std::vector<RoundRecord> records;
  std::vector<RetiredRequest> retired;

  // The config as run: with a tree, its verifier has trees.
  static HostEngineConfig validated(const HostEngineConfig& c) {
    validate(c);
    HostEngineConfig out = c;
    out.verifier.trees = out.verifier.trees || c.tree > 0;
    return out;
  }

  explicit Impl(const HostEngineConfig& c) : cfg(validated(c)), verifier(cfg.verifier), rng(c.seed) {
    const VerifierConfig& vc = cfg.verifier;
    const Backend b = vc.backend;
    const size_t N = size_t(vc.max_rows), T = size_t(vc.tokens), H = size_t(vc.model.heads);
    const size_t HV = size_t(vc.model.value_heads), K = size_t(vc.model.head_k), V = size_t(vc.model.head_v);
    const size_t L = size_t(vc.model.layers), es = dtype_size(vc.io_dtype);
    q = Buffer(b, N * T * H * K * es);
    k = Buffer(b, N * T * H * K * es);
    v = Buffer(b, N * T * HV * V * es);
    g = Buffer(b, N * T * HV * K * es);
    beta = Buffer(b, N * T * HV * es);
    outputs = Buffer(b, L * N * T * HV * V * es);
    round_counter = Buffer(b, sizeof(int64_t));
    accepted = Buffer(b, N * sizeof(int32_t));
    join_state = Buffer(b, verifier.slot_state_bytes() * L);
    outputs.fill(0);
    round_counter.fill(0);
    accepted.fill(0);
    if (cfg.tree > 0) {
      accept_index = Buffer(b, N * T * sizeof(int32_t));
      accept_index.fill(0xff);
    }
    // Gate parameters per layer: A_log [HV] then dt_bias [HV * K].
    std::vector<float> gate(L * (HV + HV * K));
    for (size_t l = 0; l < L; ++l) {
      float* a_log = gate.data() + l * (HV + HV * K);
      for (size_t h = 0; h < HV; ++h) a_log[h] = synthetic_a_log(cfg.seed, uint32_t(l), uint32_t(h));
      for (size_t e = 0; e < HV * K; ++e) a_log[HV + e] = synthetic_dt_bias(cfg.seed, uint32_t(l), uint32_t(e));
    }
    gate_params = Buffer(b, gate.size() * sizeof(float));
    gate_params.upload(gate.data(), gate.size() * sizeof(float));
    if (vc.conv.width > 0) allocate_conv();
    for (int32_t s = vc.pool.slots - 1; s >= 0; --s) free_slots.push_back(s);

    RoundHooks hooks;
    hooks.before_layer = [this](const Stream& s, int32_t layer, int32_t rows) { generate_inputs(s, layer, rows); };
    hooks.layer_inputs = [this](int32_t layer) { return layer_inputs(layer); };
    if (vc.conv.width > 0) hooks.conv_inputs = [this](int32_t layer) { return conv_inputs(layer); };
    if (cfg.tree > 0) {
      hooks.before_round = [this](const Stream& s, int32_t rows) { draft_trees(s, rows); };
      hooks.path_sampler = [this](const Stream& s, int32_t rows) { return sample(s, rows); };
    } else {
      hooks.sampler = [this](const Stream& s, int32_t rows) { return sample(s, rows); };
    }
    runner = std::make_unique<GraphRunner>(verifier, std::move(hooks), cfg.runner);
  }

  Verifier::BatchBuffers bb() const { return verifier.batch_buffers(); }

  // docs/conv.md: x [N, T, C] each round, the layers' weights [C, W] (hashed, no bias, as Kimi-Linear), and
  // the window a joining request brings.
  void allocate_conv() {
    const VerifierConfig& vc = cfg.verifier;
    const size_t C = size_t(vc.conv.channels), W = size_t(vc.conv.width), L = size_t(vc.model.layers);
    const size_t es = dtype_size(vc.io_dtype);
    x = Buffer(vc.backend, size_t(vc.max_rows) * size_t(vc.tokens) * C * es);
    std::vector<float> w(L * C * W);
    for (size_t l = 0; l < L; ++l)
      for (size_t e = 0; e < C * W; ++e) w[l * C * W + e] = synthetic_conv_weight(cfg.seed, uint32_t(l), uint32_t(e));
    conv_weights = Buffer::copy_of(vc.backend, w);
    join_window = Buffer(vc.backend, verifier.conv_window_bytes() * L);
  }

  ConvLayerInputs conv_inputs(int32_t layer) const {
    const ConvShape& conv = cfg.verifier.conv;
    const float* weight = conv_weights.as<float>() + size_t(layer) * size_t(conv.channels) * size_t(conv.width);
    return conv_into_verify_inputs(verifier.spec(), x.data(), weight, nullptr, q.data(), k.data(), v.data());
  }

  void generate_inputs(const Stream& s, int32_t layer, int32_t rows) {
    const VerifierConfig& vc = cfg.verifier;
    SyntheticInputParams p;
    p.seed = cfg.seed;
    p.round = round_counter.as<int64_t>();
    p.slots = bb().slots;
    p.n_real = bb().n_real;
    p.rows = rows;
    p.tokens = vc.tokens;
    p.heads = vc.model.heads;
    p.value_heads = vc.model.value_heads;
    p.head_k = vc.model.head_k;
    p.head_v = vc.model.head_v;
    p.layer = layer;
    p.io_dtype = vc.io_dtype;
    p.raw_gate = vc.options.gate != GateMode::precomputed;
    p.beta_logit = vc.options.beta_is_logit;
    p.q = q.data();
    p.k = k.data();
    p.v = v.data();
    p.g = g.data();
    p.beta = beta.data();
    p.x = x.data();  // null without a conv
    detail::enqueue<SyntheticInputsOp>(s, p, verifier.spec().pdl);
  }

  LayerInputs layer_inputs(int32_t layer) const {
    const VerifierConfig& vc = cfg.verifier;
    const size_t HV = size_t(vc.model.value_heads), K = size_t(vc.model.head_k);
    const size_t layer_out = size_t(vc.max_rows) * vc.tokens * HV * vc.model.head_v * dtype_size(vc.io_dtype);
    LayerInputs in;
    in.q = q.data();
    in.k = k.data();
    in.v = v.data();
    in.g = g.data();
    in.beta = beta.data();
    in.o = outputs.as<char>() + size_t(layer) * layer_out;
    const float* gate = gate_params.as<float>() + size_t(layer) * (HV + HV * K);
    in.A_log = gate;
    in.dt_bias = gate + HV;
    return in;
  }

  const int32_t* sample(const Stream& s, int32_t rows) {
    SyntheticSamplerParams p;
    p.seed = cfg.seed;
    p.round = round_counter.as<int64_t>();
    p.slots = bb().slots;
    p.n_real = bb().n_real;
    p.rows = rows;
    p.tokens = cfg.verifier.tokens;
    p.accept_rate = float(cfg.accept_rate);
    p.accepted = accepted.as<int32_t>();
    if (cfg.tree > 0) {
      p.parent = bb().parent;
      p.accept_index = accept_index.as<int32_t>();
    }
    detail::enqueue<SyntheticSamplerOp>(s, p, verifier.spec().pdl);
    return cfg.tree > 0 ? accept_index.as<int32_t>() : accepted.as<int32_t>();
  }

  // docs/trees.md: the round's trees, written where the index build reads them.
  void draft_trees(const Stream& s, int32_t rows) {
    SyntheticTreeParams p;
    p.seed = cfg.seed;
    p.round = round_counter.as<int64_t>();
    p.slots = bb().slots;
    p.n_real = bb().n_real;
    p.rows = rows;
    p.tokens = cfg.verifier.tokens;
    p.top_k = cfg.tree;
    p.parent = bb().parent;
    detail::enqueue<SyntheticTreeOp>(s, p, verifier.spec().pdl);
  }

  // Tokens the sampler accepts for `slot` at `round`, from the same hashes.
  int32_t accepted_tokens(uint32_t round, int32_t slot) const {
    const VerifierConfig& vc = cfg.verifier;
    if (cfg.tree == 0) return synthetic_accept_length(cfg.seed, round, slot, vc.tokens, float(cfg.accept_rate));
    int32_t parent[kMaxSyntheticTree], path[kMaxSyntheticTree];
    synthetic_tree(cfg.seed, round, slot, vc.tokens, cfg.tree, parent);
    return synthetic_path(cfg.seed, round, slot, vc.tokens, float(cfg.accept_rate), parent, path);
  }

  // A request joins: its seeded state is generated on the backend and prefilled from there, so a
  // join costs no host work proportional to the state (40 MiB per request at the Kimi shapes).
  void join(const Stream& s, int32_t count) {
    const VerifierConfig& vc = cfg.verifier;
    SyntheticStateParams p;
    p.seed = cfg.seed;
    p.layers = vc.model.layers;
    p.slot_elems = int64_t(vc.model.value_heads) * vc.model.head_v * vc.model.head_k;
    p.state_dtype = vc.pool.state_dtype;
    p.out = join_state.data();
    p.window_elems = int64_t(verifier.conv_window_bytes() / dtype_size(vc.io_dtype));
    p.io_dtype = vc.io_dtype;
    p.conv_window = join_window.data();
    for (int32_t i = 0; i < count && !free_slots.empty(); ++i) {
      const Request r{next_request++, free_slots.back(), 0};
      free_slots.pop_back();
      p.request = uint32_t(r.id);
      detail::enqueue<SyntheticStateOp>(s, p, /*pdl=*/false);  // a join, between rounds
      verifier.enqueue_prefill(s, r.slot, join_state.data(), join_window.data());  // ordered before the next reuse
      live.push_back(r);
    }
  }

  void retire(const Stream& s, const std::vector<size_t>& which) {
    if (which.empty()) return;
    std::vector<int32_t> slots;
    for (size_t i : which) slots.push_back(live[i].slot);
    verifier.enqueue_materialize(s, slots.data(), int32_t(slots.size()));
    for (size_t i : which) {
      RetiredRequest out;
      out.request = live[i].id;
      out.slot = live[i].slot;
      out.rounds = live[i].rounds;
      out.state.resize(verifier.slot_state_bytes() * size_t(cfg.verifier.model.layers));
      verifier.read_pool(s, out.slot, out.state.data());  // waits for the materialize
      if (cfg.verifier.conv.width > 0) {
        out.conv_window.resize(verifier.conv_window_bytes() * size_t(cfg.verifier.model.layers));
        verifier.read_conv_window(s, out.slot, out.conv_window.data());
      }
      retired.push_back(std::move(out));
      free_slots.push_back(live[i].slot);
    }
    std::vector<Request> keep;
    for (size_t i = 0; i < live.size(); ++i)
      if (std::find(which.begin(), which.end(), i) == which.end()) keep.push_back(live[i]);
    live = std::move(keep);
  }

  void between_rounds(const Stream& s) {
    if (rounds_run > 0 && cfg.retire_rate > 0.0) {
      std::bernoulli_distribution leave(cfg.retire_rate);
      std::vector<size_t> which;
      for (size_t i = 0; i < live.size(); ++i)
        if (leave(rng)) which.push_back(i);
      retire(s, which);
    }
    join(s, cfg.batch - int32_t(live.size()));
    std::vector<int32_t> next;
    for (const Request& r : live) next.push_back(r.slot);
    if (cfg.vary_batch) {
      std::shuffle(next.begin(), next.end(), rng);
      next.resize(std::uniform_int_distribution<size_t>(1, next.size())(rng));
    }
    if (next != batch) {
      batch = next;
      runner->set_batch(s, batch.data(), int32_t(batch.size()));
    }
  }

  void record_round(const Stream& s) {
    const VerifierConfig& vc = cfg.verifier;
    const uint32_t round = uint32_t(rounds_run);
    for (int32_t slot : batch) {
      tokens_accepted += accepted_tokens(round, slot);
      for (Request& r : live)
        if (r.slot == slot) ++r.rounds;
    }
    if (!cfg.keep_outputs) return;
    RoundRecord rec;
    rec.slots = batch;
    const size_t row_bytes = size_t(vc.tokens) * vc.model.value_heads * vc.model.head_v * dtype_size(vc.io_dtype);
    const size_t n = batch.size(), layer_bytes = size_t(vc.max_rows) * row_bytes;
    rec.outputs.resize(size_t(vc.model.layers) * n * row_bytes);
    for (int32_t l = 0; l < vc.model.layers; ++l)
      detail::copy_to_host(vc.backend, rec.outputs.data() + size_t(l) * n * row_bytes,
                           outputs.as<char>() + size_t(l) * layer_bytes, n * row_bytes, s.stream);
    records.push_back(std::move(rec));
  }
};

HostEngine::HostEngine(const HostEngineConfig& config) : impl_(std::make_unique<Impl>(config)) {}
HostEngine::~HostEngine() = default;

void HostEngine::start(const Stream& s) {
  impl_->join(s, impl_->cfg.batch);
  impl_->runner->capture(s);
}

void HostEngine::run_round(const Stream& s) {
  Impl& m = *impl_;
  m.between_rounds(s);
  m.runner->run_round(s);
  if (!m.runner->sampler_in_round()) {
    if (m.cfg.tree > 0) m.runner->accept_path(s, m.sample(s, m.runner->rows()));
    else m.runner->accept(s, m.sample(s, m.runner->rows()));
  }
  m.record_round(s);
  ++m.rounds_run;
}

void HostEngine::finish(const Stream& s) {
  std::vector<size_t> all(impl_->live.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  impl_->retire(s, all);
  impl_->batch.clear();
}

int32_t HostEngine::rounds_run() const { return impl_->rounds_run; }
int64_t HostEngine::tokens_accepted() const { return impl_->tokens_accepted; }
const std::vector<RoundRecord>& HostEngine::rounds() const { return impl_->records; }
const std::vector<RetiredRequest>& HostEngine::retired() const { return impl_->retired; }
const std::vector<int32_t>& HostEngine::batch_slots() const { return impl_->batch; }
Verifier& HostEngine::verifier() { return impl_->verifier; }
GraphRunner& HostEngine::runner() { return *impl_->runner; }
const HostEngineConfig& HostEngine::config() const { return impl_->cfg; }

}  // namespace kdagraph
