// One kernel per KDA layer (issue 21): the short conv fused into the verify (ops::conv_verify_layer)
// against the conv and the verify as two launches (ops::conv_layer, then ops::verify_layer), on one
// Kimi-Linear-48B TP2 layer shape (H = HV = 16, K = V = 128, C = 6144, W = 4, SiLU, no bias), bf16 inputs,
// fp32 state, fused-accept, every slot mid-stream (accept lengths 1 to T, both conv halves in use):
//   per layer   the layer's launch(es) alone, batch 1 to 8, T = 2 and 4;
//   round       the whole round at L layers (default 20) as the GraphRunner replays it: the index build
//               and every layer, captured once per bucket (a CUDA graph; the CPU twin on the CPU).
// Medians over --runs calls after one warm-up, the variants taking turns. On CUDA by events, on the CPU
// by the host clock.
// Programmatic dependent launch (docs/graphs.md) on, as the Verifier has it by default; --no-pdl turns it off.
//   bench_conv_verify [--backend cpu|cuda] [--batches 1,2,4,8] [--tokens 2,4] [--layers 20] [--runs N] [--no-pdl]
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kdagraph/graph_runner.hpp"
#include "kdagraph/ops.hpp"
#include "kdagraph/verifier.hpp"
#include "kernels/layout.h"
#include "kernels/memory.h"
#include "kernels/stream.h"
#include "profiling/bench_ops.h"

namespace kdagraph {
namespace {

using detail::Buffer;
using profiling::random_buffer;

constexpr int32_t kWidth = 4;

VerifierConfig layer_config(Backend b, int32_t layers, int32_t tokens, int32_t batch, bool pdl) {
  VerifierConfig c;
  c.backend = b;
  c.pdl = pdl;
  c.model = ModelShape{layers, 16, 16, 128, 128};
  c.pool = PoolShape{batch, tokens, DType::f32};
  c.max_rows = batch;
  c.tokens = tokens;
  c.io_dtype = DType::bf16;
  c.mode = Mode::fused_accept;
  c.options.l2norm_qk = true;
  c.options.gate = GateMode::softplus;
  c.options.beta_is_logit = true;
  c.conv = ConvShape{conv_channels(c.model), kWidth, ConvActivation::silu};
  return c;
}

// One round's inputs for every layer, shared by all layers (the kernels do not care whose they are):
// x, q, k, v (the unfused conv's outputs), g, beta, o and the gate parameters.
struct RoundInputs {
  Buffer x, q, k, v, g, beta, o, weight, gate;
  RoundInputs(const VerifierConfig& c, std::mt19937& rng) {
    const Backend b = c.backend;
    const ModelShape& m = c.model;
    const size_t N = size_t(c.max_rows), T = size_t(c.tokens), HK = size_t(m.heads) * size_t(m.head_k);
    const size_t HV = size_t(m.value_heads), HVV = HV * size_t(m.head_v), C = size_t(c.conv.channels);
    x = random_buffer(b, N * T * C, DType::bf16, rng, -1.0f, 1.0f);
    q = Buffer(b, N * T * HK * 2);
    k = Buffer(b, N * T * HK * 2);
    v = Buffer(b, N * T * HVV * 2);
    o = Buffer(b, N * T * HVV * 2);
    g = random_buffer(b, N * T * HV * size_t(m.head_k), DType::bf16, rng, -3.0f, 3.0f);
    beta = random_buffer(b, N * T * HV, DType::bf16, rng, -3.0f, 3.0f);
    weight = random_buffer(b, C * kWidth, DType::f32, rng, -0.6f, 0.6f);
    gate = random_buffer(b, HV * (1 + size_t(m.head_k)), DType::f32, rng, -0.5f, 0.5f);
  }
  ConvLayerInputs conv(const RoundSpec& spec) const {
    return conv_into_verify_inputs(spec, x.data(), weight.as<float>(), nullptr, q.data(), k.data(), v.data());
  }
  LayerInputs layer(const RoundSpec& spec) const {
    LayerInputs in;
    in.q = q.data();
    in.k = k.data();
    in.v = v.data();
    in.g = g.data();
    in.beta = beta.data();
    in.o = o.data();
    in.A_log = gate.as<float>();
    in.dt_bias = gate.as<float>() + spec.model.value_heads;
    return in;
  }
};

// A Verifier of `c` whose slots are all mid-stream: random states and conv state, accept lengths 1 to T
// and both round parities, and the batch 0..N-1 set.
void start_mid_stream(Verifier& v, const Stream& s, std::mt19937& rng) {
  const VerifierConfig& c = v.config();
  profiling::fill_random(c.backend, v.pool(), v.pool_bytes() / 4, DType::f32, rng, -0.5f, 0.5f);
  profiling::fill_random(c.backend, v.scratch(), v.scratch_bytes() / 4, DType::f32, rng, -0.5f, 0.5f);
  profiling::fill_random(c.backend, v.conv_state(), v.conv_state_bytes() / 2, DType::bf16, rng, -1.0f, 1.0f);
  std::vector<int32_t> slots(size_t(c.max_rows)), accept(size_t(c.pool.slots)), parity(size_t(c.pool.slots));
  for (int32_t i = 0; i < c.max_rows; ++i) slots[size_t(i)] = i;
  for (int32_t i = 0; i < c.pool.slots; ++i) {
    accept[size_t(i)] = 1 + i % c.tokens;
    parity[size_t(i)] = i % 2;
  }
  detail::copy_to_backend(c.backend, v.accept_len(), accept.data(), accept.size() * sizeof(int32_t));
  detail::copy_to_backend(c.backend, v.storage().round_parity, parity.data(), parity.size() * sizeof(int32_t));
  v.set_batch(s, slots.data(), c.max_rows);
  detail::StreamHandle::view(s).synchronize();
}

// Medians of one layer's two launches and its one fused kernel, taking turns.
std::vector<double> time_layer(Backend b, int32_t tokens, int32_t batch, bool pdl, int runs, const Stream& s) {
  std::mt19937 rng(7);
  const VerifierConfig c = layer_config(b, 1, tokens, batch, pdl);
  Verifier v(c);
  start_mid_stream(v, s, rng);
  const RoundInputs in(c, rng);
  const RoundSpec& spec = v.spec();
  v.enqueue_indices(s, batch);
  return profiling::interleaved_medians_ms(
      s, runs,
      {[&] {
         v.enqueue_conv(s, 0, in.conv(spec), batch);
         v.enqueue_verify(s, 0, in.layer(spec), batch);
       },
       [&] { v.enqueue_conv_verify(s, 0, in.conv(spec), in.layer(spec), batch); }});
}

// The round of L layers as a runner replays its captured graph (no sampler: the engine's), unfused or
// fused; each its own Verifier and inputs.
struct Round {
  VerifierConfig config;
  Verifier verifier;
  RoundInputs in;
  GraphRunner runner;
  Round(Backend b, int32_t layers, int32_t tokens, int32_t batch, bool pdl, bool fused, const Stream& s,
        std::mt19937& rng)
      : config(fused_config(layer_config(b, layers, tokens, batch, pdl), fused)),
        verifier(config),
        in(config, rng),
        runner(verifier, hooks(), one_bucket(batch)) {
    start_mid_stream(verifier, s, rng);
    runner.capture(s);
    std::vector<int32_t> slots(static_cast<size_t>(batch));
    for (int32_t i = 0; i < batch; ++i) slots[size_t(i)] = i;
    runner.set_batch(s, slots.data(), batch);
  }
  static RunnerConfig one_bucket(int32_t batch) {
    RunnerConfig rc;
    rc.buckets = {batch};
    return rc;
  }
  static VerifierConfig fused_config(VerifierConfig c, bool fused) {
    c.fuse_conv = fused;
    return c;
  }
  RoundHooks hooks() {
    RoundHooks h;
    h.layer_inputs = [this](int32_t) { return in.layer(verifier.spec()); };
    h.conv_inputs = [this](int32_t) { return in.conv(verifier.spec()); };
    return h;
  }
  int32_t kernel_nodes() const { return runner.capture_stats().front().kernel_nodes; }
};

int run(int argc, char** argv) {
  Backend backend = Backend::cpu;
  std::vector<int32_t> batches = {1, 2, 4, 8}, tokens = {2, 4};
  int32_t layers = 20;
  int runs = 20;
  bool pdl = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--backend" && i + 1 < argc) {
      const std::string val = argv[++i];
      if (val != "cpu" && val != "cuda") throw std::invalid_argument("--backend: cpu or cuda, not " + val);
      backend = val == "cuda" ? Backend::cuda : Backend::cpu;
    } else if (a == "--batches" && i + 1 < argc) {
      batches = profiling::parse_list("--batches", argv[++i]);
    } else if (a == "--tokens" && i + 1 < argc) {
      tokens = profiling::parse_list("--tokens", argv[++i]);
    } else if (a == "--layers" && i + 1 < argc) {
      layers = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--runs" && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--no-pdl") {
      pdl = false;
    } else {
      const bool help = a == "--help";
      std::fprintf(help ? stdout : stderr,
                   "usage: bench_conv_verify [--backend cpu|cuda] [--batches 1,2,4,8] [--tokens 2,4] [--layers L] "
                   "[--runs N] [--no-pdl]\n");
      return help ? 0 : 2;
    }
  }
  const auto stream = detail::StreamHandle::create(backend);
  const Stream& s = stream.get();
  std::printf("# bench_conv_verify: %s, Kimi-Linear-48B TP2 layers (H=HV=16, K=V=128, C=6144), W=4 SiLU, io bf16, "
              "state f32, fused-accept, PDL %s; median ms of %d calls%s\n\n",
              to_string(backend), pdl ? "on" : "off", runs,
              backend == Backend::cpu ? " (CPU timings: the CPU backend on this machine, not a GPU)" : "");
  std::printf("| T | batch | layer unfused ms | layer fused ms | fused / unfused | round L=%d unfused ms | "
              "round fused ms | fused / unfused | kernel nodes unfused | fused |\n"
              "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
              layers);
  for (int32_t t : tokens)
    for (int32_t n : batches) {
      const std::vector<double> layer = time_layer(backend, t, n, pdl, runs, s);
      std::mt19937 rng(11);
      Round unfused(backend, layers, t, n, pdl, false, s, rng), fused(backend, layers, t, n, pdl, true, s, rng);
      const std::vector<double> round = profiling::interleaved_medians_ms(
          s, runs, {[&] { unfused.runner.run_round(s); }, [&] { fused.runner.run_round(s); }});
      std::printf("| %d | %d | %.4g | %.4g | %.2f | %.4g | %.4g | %.2f | %d | %d |\n", t, n, layer[0], layer[1],
                  layer[1] / layer[0], round[0], round[1], round[1] / round[0], unfused.kernel_nodes(),
                  fused.kernel_nodes());
      std::fflush(stdout);
    }
  return 0;
}

}  // namespace
}  // namespace kdagraph

int main(int argc, char** argv) {
  try {
    return kdagraph::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_conv_verify: %s\n", e.what());
    return 1;
  }
}
