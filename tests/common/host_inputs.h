// Random inputs of one layer for a batch, in host memory (CPU backend tests that drive a Verifier
// directly).
#pragma once

#include <cmath>
#include <random>
#include <vector>

#include "kdagraph/verifier.hpp"

namespace kdagraph::test {

// Inputs for a batch of `rows` rows of one layer, random, kept in host memory (CPU backend).
struct HostInputs {
  std::vector<float> q, k, v, g, beta, o;
  int32_t value_heads;
  HostInputs(const VerifierConfig& c, int32_t rows, std::mt19937_64& rng) : value_heads(c.model.value_heads) {
    const size_t N = size_t(rows), T = size_t(c.tokens), H = size_t(c.model.heads), HV = size_t(c.model.value_heads);
    const size_t K = size_t(c.model.head_k), V = size_t(c.model.head_v);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    auto fill = [&](std::vector<float>& x, size_t n) {
      x.resize(n);
      for (auto& e : x) e = d(rng);
    };
    fill(q, N * T * H * K);
    fill(k, N * T * H * K);
    fill(v, N * T * HV * V);
    fill(g, N * T * HV * K);
    fill(beta, N * T * HV);
    o.assign(N * T * HV * V, NAN);
  }
  // `gate`: A_log [HV] then dt_bias [HV * K], as gate_params makes it.
  LayerInputs view(const std::vector<float>& gate) {
    LayerInputs in;
    in.q = q.data();
    in.k = k.data();
    in.v = v.data();
    in.g = g.data();
    in.beta = beta.data();
    in.o = o.data();
    in.A_log = gate.data();
    in.dt_bias = gate.data() + value_heads;
    return in;
  }
};

inline std::vector<float> gate_params(const VerifierConfig& c) {
  const size_t HV = static_cast<size_t>(c.model.value_heads);
  std::vector<float> gate(HV + HV * size_t(c.model.head_k));
  for (size_t i = 0; i < gate.size(); ++i) gate[i] = 0.05f * float(i % 7) - 0.1f;
  return gate;
}

}  // namespace kdagraph::test
