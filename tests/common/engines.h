// Small configurations of the Verifier and the host engine for tests.
#pragma once

#include "harness/host_engine.h"
#include "kdagraph/verifier.hpp"

namespace kdagraph::test {

inline VerifierConfig small_verifier(Backend b, Mode mode, int32_t layers = 3, int32_t tokens = 4) {
  VerifierConfig c;
  c.backend = b;
  c.model = ModelShape{layers, 2, 4, 32, 32};  // L, H, HV, K, V: grouped heads (G = 2)
  c.pool = PoolShape{12, tokens + 1, DType::f32};
  c.max_rows = 8;
  c.tokens = tokens;
  c.mode = mode;
  c.options.l2norm_qk = true;
  c.options.gate = GateMode::softplus;
  c.options.beta_is_logit = true;
  return c;
}

inline HostEngineConfig small_engine(Backend b, Mode mode, Exec exec, uint64_t seed) {
  HostEngineConfig c;
  c.verifier = small_verifier(b, mode);
  c.runner.exec = exec;
  c.runner.buckets = {1, 2, 3, 4, 6, 8};
  c.batch = 6;
  c.accept_rate = 0.6;
  c.seed = seed;
  c.retire_rate = 0.1;
  c.vary_batch = true;
  c.keep_outputs = true;
  return c;
}

// The same engine with Kimi-Linear's short convolution before each layer (W = 4, SiLU, no bias).
inline HostEngineConfig with_conv(HostEngineConfig c, int32_t width = 4) {
  c.verifier.conv = ConvShape{conv_channels(c.verifier.model), width, ConvActivation::silu};
  return c;
}

}  // namespace kdagraph::test
