// A graph runner over one backend's memory for tests (tests/graph/graph_runner_test.cpp and its GPU-only
// companion): fixed random bf16 inputs at max_rows, accept lengths that a capturable sampler copies in
// stream order from `accept_source`, which the test fills (so graph and eager see the same), and a hook that
// hands layer `bad_layer` no output buffer.
#pragma once

#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "graph/dispatch.h"
#include "kdagraph/graph_runner.hpp"
#include "kdagraph/verifier.hpp"
#include "kernels/kda_math.h"
#include "kernels/memory.h"
#include "tests/common/engines.h"
#include "tests/common/storage.h"

namespace kdagraph::test {

// L = 2, H = 2, HV = 4, K = V = head_dim, T = 3, bf16 io, four slots more than rows.
inline VerifierConfig graph_harness_config(Backend b, Mode mode, int32_t max_rows, int32_t head_dim) {
  VerifierConfig c = small_verifier(b, mode, /*layers=*/2, /*tokens=*/3);
  c.model = ModelShape{2, 2, 4, head_dim, head_dim};
  c.pool = PoolShape{max_rows + 4, 3, DType::f32};
  c.max_rows = max_rows;
  c.io_dtype = DType::bf16;
  return c;
}

struct GraphHarness {
  Verifier verifier;
  std::vector<detail::Buffer> q, k, v, g, beta, o;
  detail::Buffer gate, accept_source, accepted;
  std::unique_ptr<GraphRunner> runner;
  int32_t bad_layer = -1;

  GraphHarness(const VerifierConfig& c, RunnerConfig rc, uint64_t seed) : verifier(c) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    const Backend b = c.backend;
    const size_t N = size_t(c.max_rows), T = size_t(c.tokens), H = size_t(c.model.heads);
    const size_t HV = size_t(c.model.value_heads), K = size_t(c.model.head_k), V = size_t(c.model.head_v);
    auto rnd = [&](size_t n) {
      std::vector<math::bf16> x(n);
      for (auto& e : x) e = math::f32_to_bf16(d(rng));
      return detail::Buffer::copy_of(b, x);
    };
    for (int l = 0; l < c.model.layers; ++l) {
      q.push_back(rnd(N * T * H * K));
      k.push_back(rnd(N * T * H * K));
      v.push_back(rnd(N * T * HV * V));
      g.push_back(rnd(N * T * HV * K));
      beta.push_back(rnd(N * T * HV));
      o.emplace_back(b, N * T * HV * V * 2);
      o.back().fill(0xff);  // rows no round writes compare equal between two harnesses
    }
    std::vector<float> gate_host(HV + HV * K);
    for (auto& x : gate_host) x = 0.5f * d(rng);
    gate = detail::Buffer::copy_of(b, gate_host);
    accept_source = detail::Buffer::copy_of(b, std::vector<int32_t>(N, 1));
    accepted = detail::Buffer::copy_of(b, std::vector<int32_t>(N, 0));
    randomize_storage(verifier, seed);
    RoundHooks hooks;
    hooks.layer_inputs = [this](int32_t l) {
      LayerInputs in;
      in.q = q[size_t(l)].data();
      in.k = k[size_t(l)].data();
      in.v = v[size_t(l)].data();
      in.g = g[size_t(l)].data();
      in.beta = beta[size_t(l)].data();
      in.o = l == bad_layer ? nullptr : o[size_t(l)].data();
      in.A_log = gate.as<float>();
      in.dt_bias = gate.as<float>() + verifier.config().model.value_heads;
      return in;
    };
    hooks.sampler = [this](const Stream& s, int32_t rows) {
      detail::enqueue_copy(s, accepted.data(), accept_source.data(), size_t(rows) * sizeof(int32_t));
      return accepted.as<int32_t>();
    };
    runner = std::make_unique<GraphRunner>(verifier, std::move(hooks), std::move(rc));
  }
  void set_accepts(const std::vector<int32_t>& a) { accept_source.upload(a.data(), a.size() * sizeof(int32_t)); }
  void poison_outputs() {
    for (auto& x : o) x.fill(0xff);
  }
};

}  // namespace kdagraph::test
