// The short convolution's cost in a round (issue 16), through the operations of include/kdagraph/ops.hpp
// on one layer of Kimi-Linear-48B at TP 2 (H = HV = 16, K = V = 128, so C = 6144; W = 4, SiLU, no
// bias), T = 4, bf16 inputs, fp32 state, every slot mid-stream (accept lengths 1 to T), batch 1 to 128:
//   verify      ops::verify_layer, fused-accept: the recurrent part of the layer
//   conv        ops::conv_layer, fused-accept: the window read from one half, the history written to the other
//   conv 2p     ops::conv_layer, two-phase: the window at column 0, each token's window to the conv scratch
//   commit 2p   the two-phase ops::commit with the conv against the same commit without it: the copy of
//               the accepted window back into the conv state
// and from these the conv's share of the layer (conv / (conv + verify)) and the two-phase conv scatter
// (conv 2p + commit 2p against conv). Medians over --runs calls of each, after one warm-up call.
// A plain program, on either backend: on the CPU the host clock around each call; on CUDA events.
//   bench_conv [--backend cpu|cuda] [--batches 1,2,4,...] [--runs N]
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kdagraph/ops.hpp"
#include "kernels/kda_math.h"
#include "kernels/layout.h"
#include "kernels/memory.h"
#include "kernels/stream.h"
#include "profiling/bench_ops.h"

namespace kdagraph {
namespace {

using detail::Buffer;
using profiling::median_ms;
using profiling::random_buffer;

constexpr int32_t kTokens = 4, kWidth = 4;

RoundSpec layer_spec(Mode mode, bool conv) {
  RoundSpec s;
  s.model = ModelShape{1, 16, 16, 128, 128};
  s.tokens = kTokens;
  s.io_dtype = DType::bf16;
  s.options.l2norm_qk = true;
  s.options.gate = GateMode::softplus;
  s.options.beta_is_logit = true;
  s.mode = mode;
  if (conv) s.conv = ConvShape{conv_channels(s.model), kWidth, ConvActivation::silu};
  return s;
}

// One layer's storage and inputs for a batch of N rows in one mode, slots 0..N-1.
struct Layer {
  RoundSpec spec;
  Buffer pool, scratch, conv_state, conv_scratch, accept_len, round_parity, index, batch, accepted;
  Buffer q, k, v, g, beta, o, x, weight, gate;
  SlotStorage st;
  RoundIndices idx;
  int32_t rows;

  Layer(Backend b, Mode mode, int32_t n, const Stream& s) : spec(layer_spec(mode, true)), rows(n) {
    std::mt19937 rng(7);
    const ModelShape& m = spec.model;
    const int64_t state = int64_t(m.value_heads) * m.head_v * m.head_k, S = kTokens;
    const size_t N = size_t(n), T = kTokens, C = size_t(spec.conv.channels);
    pool = random_buffer(b, N * size_t(state), DType::f32, rng, -0.5f, 0.5f);
    scratch = random_buffer(b, N * S * size_t(state), DType::f32, rng, -0.5f, 0.5f);
    const int64_t conv_row = aligned_row_elems(conv_state_row_elems(spec, kTokens), DType::bf16);
    const int64_t scratch_row = aligned_row_elems(conv_scratch_row_elems(spec), DType::bf16);
    conv_state = random_buffer(b, N * size_t(conv_row), DType::bf16, rng, -1.0f, 1.0f);
    conv_scratch = random_buffer(b, N * S * size_t(scratch_row), DType::bf16, rng, -1.0f, 1.0f);
    std::vector<int32_t> lengths(N), slots(N + 1), accepts(N);
    slots[0] = n;
    for (int32_t i = 0; i < n; ++i) {
      lengths[size_t(i)] = mode_policy(mode).seed_from_scratch ? 1 + i % kTokens : 0;
      slots[size_t(i) + 1] = i;
      accepts[size_t(i)] = 1 + i % kTokens;
    }
    accept_len = Buffer::copy_of(b, lengths);
    round_parity = Buffer::copy_of(b, std::vector<int32_t>(N, 1));
    batch = Buffer::copy_of(b, slots);
    accepted = Buffer::copy_of(b, accepts);
    index = Buffer(b, size_t(round_index_elems(n, kTokens)) * sizeof(int32_t));
    st.slots = n;
    st.scratch_steps = kTokens;
    st.pool = state_view(pool.data(), DType::f32, 1, n * state, n, state);
    st.scratch = state_view(scratch.data(), DType::f32, 1, n * S * state, n * S, state);
    st.accept_len = accept_len.as<int32_t>();
    st.round_parity = round_parity.as<int32_t>();
    st.conv_state = state_view(conv_state.data(), DType::bf16, 1, n * conv_row, n, conv_row);
    if (!mode_policy(mode).conv_offset_window)
      st.conv_scratch = state_view(conv_scratch.data(), DType::bf16, 1, n * S * scratch_row, n * S, scratch_row);
    idx = round_indices(index.as<int32_t>(), n, kTokens);
    const size_t HK = size_t(m.heads) * size_t(m.head_k), HVV = size_t(m.value_heads) * size_t(m.head_v);
    q = Buffer(b, N * T * HK * 2);
    k = Buffer(b, N * T * HK * 2);
    v = Buffer(b, N * T * HVV * 2);
    o = Buffer(b, N * T * HVV * 2);
    g = random_buffer(b, N * T * size_t(m.value_heads) * size_t(m.head_k), DType::bf16, rng, -3.0f, 3.0f);
    beta = random_buffer(b, N * T * size_t(m.value_heads), DType::bf16, rng, -3.0f, 3.0f);
    x = random_buffer(b, N * T * C, DType::bf16, rng, -1.0f, 1.0f);
    weight = random_buffer(b, C * kWidth, DType::f32, rng, -0.6f, 0.6f);
    gate = random_buffer(b, size_t(m.value_heads) * (1 + size_t(m.head_k)), DType::f32, rng, -0.5f, 0.5f);
    ops::build_indices(s, spec, st, BatchView{batch.as<int32_t>() + 1, batch.as<int32_t>(), n}, idx);
    ops::conv_layer(s, spec, st, idx, n, 0, conv_inputs());  // q, k and v for the verify
  }

  ConvLayerInputs conv_inputs() const {
    return conv_into_verify_inputs(spec, x.data(), weight.as<float>(), nullptr, q.data(), k.data(), v.data());
  }
  LayerInputs verify_inputs() const {
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
  // The same storage seen without the conv: the recurrent part's spec and views alone.
  RoundSpec spec_without_conv() const { return layer_spec(spec.mode, false); }
  SlotStorage storage_without_conv() const {
    SlotStorage plain = st;
    plain.conv_state = StateView{};
    plain.conv_scratch = StateView{};
    return plain;
  }
};

int run(int argc, char** argv) {
  Backend backend = Backend::cpu;
  std::vector<int32_t> batches = {1, 2, 4, 8, 16, 32, 64, 128};
  int runs = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--backend" && i + 1 < argc) {
      const std::string v = argv[++i];
      if (v != "cpu" && v != "cuda") throw std::invalid_argument("--backend: cpu or cuda, not " + v);
      backend = v == "cuda" ? Backend::cuda : Backend::cpu;
    } else if (a == "--batches" && i + 1 < argc) {
      batches = profiling::parse_list("--batches", argv[++i]);
    } else if (a == "--runs" && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: bench_conv [--backend cpu|cuda] [--batches 1,2,4,...] [--runs N]\n");
      return 2;
    }
  }
  const auto stream = detail::StreamHandle::create(backend);
  const Stream& s = stream.get();
  std::printf("# bench_conv: %s, one Kimi-Linear-48B TP2 layer (H=HV=16, K=V=128, C=6144), W=4 SiLU, T=%d, "
              "io bf16, state f32; median ms of %d calls%s\n\n",
              to_string(backend), kTokens, runs,
              backend == Backend::cpu ? " (CPU timings: the CPU backend on this machine, not a GPU)" : "");
  std::printf("| batch | verify ms | conv ms | conv share of the layer | conv 2p ms | commit 2p ms (conv part) | "
              "2p conv scatter / conv |\n|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int32_t n : batches) {
    Layer fused(backend, Mode::fused_accept, n, s);
    Layer two(backend, Mode::two_phase, n, s);
    ops::accept(s, two.spec, two.st, two.idx, n, two.accepted.as<int32_t>());  // row_accept for the commit
    const double verify = median_ms(s, runs, [&] {
      ops::verify_layer(s, fused.spec, fused.st, fused.idx, n, 0, fused.verify_inputs());
    });
    const double conv = median_ms(s, runs, [&] { ops::conv_layer(s, fused.spec, fused.st, fused.idx, n, 0, fused.conv_inputs()); });
    const double conv2 = median_ms(s, runs, [&] { ops::conv_layer(s, two.spec, two.st, two.idx, n, 0, two.conv_inputs()); });
    const RoundSpec plain_spec = two.spec_without_conv();
    const SlotStorage plain = two.storage_without_conv();
    const double commit_with = median_ms(s, runs, [&] { ops::commit(s, two.spec, two.st, two.idx, n); });
    const double commit_without = median_ms(s, runs, [&] { ops::commit(s, plain_spec, plain, two.idx, n); });
    const double commit_conv = std::max(0.0, commit_with - commit_without);
    std::printf("| %d | %.4g | %.4g | %.1f%% | %.4g | %.4g | %.2fx |\n", n, verify, conv, 100.0 * conv / (conv + verify),
                conv2, commit_conv, (conv2 + commit_conv) / conv);
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
    std::fprintf(stderr, "bench_conv: %s\n", e.what());
    return 1;
  }
}
