// Random fp32 inputs of one layer for a batch, for tests that drive a Verifier directly: the values in
// host memory, where a test changes them and reads the outputs, and what view() hands the verifier in the
// memory of its backend (the host vectors themselves on the CPU backend, device copies on CUDA, whose
// outputs fetch() brings back).
#pragma once

#include <cmath>
#include <random>
#include <vector>

#include "kdagraph/ops.hpp"
#include "kdagraph/verifier.hpp"
#include "kernels/memory.h"

namespace kdagraph::test {

struct HostInputs {
  std::vector<float> q, k, v, g, beta, o;
  int32_t value_heads;
  Backend backend;
  std::vector<detail::Buffer> device;  // CUDA: q, k, v, g, beta, o

  HostInputs(const VerifierConfig& c, int32_t rows, std::mt19937_64& rng)
      : value_heads(c.model.value_heads), backend(c.backend) {
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

  // The layer's inputs as they are now where the backend reads them, with `gate` (backend memory: A_log
  // [HV] then dt_bias [HV * K], gate_buffer; null: none); the outputs NaN until the verify writes them.
  LayerInputs view(const float* gate) {
    std::fill(o.begin(), o.end(), NAN);
    const std::vector<float>* host[] = {&q, &k, &v, &g, &beta, &o};
    const float* at[6];
    device.clear();
    for (int i = 0; i < 6; ++i) {
      if (backend == Backend::cpu) {
        at[i] = host[i]->data();
        continue;
      }
      device.push_back(detail::Buffer::copy_of(backend, *host[i]));
      at[i] = device.back().as<float>();
    }
    LayerInputs in;
    in.q = at[0];
    in.k = at[1];
    in.v = at[2];
    in.g = at[3];
    in.beta = at[4];
    in.o = const_cast<float*>(at[5]);
    in.A_log = gate;
    in.dt_bias = gate != nullptr ? gate + value_heads : nullptr;
    return in;
  }

  // The outputs, once the round's work has run (a no-op on the CPU backend, whose views are these vectors).
  void fetch() {
    if (backend == Backend::cpu) return;
    detail::wait_for_device(backend);
    detail::copy_to_host(backend, o.data(), device[5].data(), o.size() * sizeof(float));
  }
};

// A layer's conv whose outputs are the q, k and v `in` hands the verify (x [N, T, C] and the weights [C, W]
// in backend memory, no bias).
inline ConvLayerInputs conv_writing(const RoundSpec& spec, const void* x, const float* weight, const LayerInputs& in) {
  return conv_into_verify_inputs(spec, x, weight, nullptr, const_cast<void*>(in.q), const_cast<void*>(in.k),
                                 const_cast<void*>(in.v));
}

inline std::vector<float> gate_params(const VerifierConfig& c) {
  const size_t HV = static_cast<size_t>(c.model.value_heads);
  std::vector<float> gate(HV + HV * size_t(c.model.head_k));
  for (size_t i = 0; i < gate.size(); ++i) gate[i] = 0.05f * float(i % 7) - 0.1f;
  return gate;
}

// gate_params in the backend's memory: kept for every round, as a model's weights are (a replay's
// materialize reads the gate of the rounds it folds).
inline detail::Buffer gate_buffer(const VerifierConfig& c) { return detail::Buffer::copy_of(c.backend, gate_params(c)); }

}  // namespace kdagraph::test
