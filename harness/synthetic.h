// docs/cli.md: the command line's stand-ins for a model's projections and an engine's sampler. Every value is
// a counter-based hash of (seed, round, slot, layer, token, element), so the device generates it inside
// the graph and the CPU reference regenerates exactly the same bits for --check.
#pragma once

#include <cstdint>
#include <string>

#include "kdagraph/types.hpp"
#include "kernels/kda_math.h"

namespace kdagraph {

// What a hashed value is for; part of the counter so different tensors never share a stream.
enum class SyntheticField : uint32_t {
  q = 1, k, v, g, beta, state, accept, gate_a_log, gate_dt_bias, conv_x, conv_weight, conv_window, tree
};

KDA_HD uint64_t mix64(uint64_t x) {  // the splitmix64 finalizer: a bijection with full avalanche
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

KDA_HD uint32_t synthetic_bits(uint64_t seed, uint32_t round, uint32_t slot, uint32_t layer, uint32_t token,
                               SyntheticField field, uint32_t element) {
  uint64_t h = mix64(seed + 0x9e3779b97f4a7c15ull);
  h = mix64(h ^ ((uint64_t(round) << 32) | slot));
  h = mix64(h ^ ((uint64_t(layer) << 32) | (uint64_t(token) << 8) | uint32_t(field)));
  h = mix64(h ^ element);
  return uint32_t(h >> 32);
}

// Uniform in [lo, hi) from the top 24 bits (exact in fp32).
KDA_HD float synthetic_uniform(uint32_t bits, float lo, float hi) {
  return lo + (hi - lo) * (float(bits >> 8) * 5.9604644775390625e-8f);
}

struct SyntheticInputParams {
  uint64_t seed = 0;
  const int64_t* round = nullptr;    // [1] the round counter, advanced by the sampler step
  const int32_t* slots = nullptr;    // [N] batch slots
  const int32_t* n_real = nullptr;   // [1]
  int32_t rows = 0, tokens = 0, heads = 0, value_heads = 0, head_k = 0, head_v = 0;
  int32_t layer = 0;
  DType io_dtype = DType::f32;
  bool raw_gate = false;     // g is a raw gate input (gate in kernel) rather than a log decay
  bool beta_logit = false;   // beta is a logit
  void* q = nullptr;         // [N, T, H, K]
  void* k = nullptr;
  void* v = nullptr;         // [N, T, HV, V]
  void* g = nullptr;         // [N, T, HV, K]
  void* beta = nullptr;      // [N, T, HV]
  // With a conv (docs/conv.md): the pre-conv projections x [N, T, C], C = 2 H K + HV V, replace q, k and v,
  // which the conv then writes.
  void* x = nullptr;
};

// Value of element `e` of one token's tensor `field` (e indexes the [H or HV, dim] block of one token).
KDA_HD float synthetic_input(const SyntheticInputParams& p, uint32_t round, int32_t slot, int32_t t,
                             SyntheticField field, uint32_t e) {
  const uint32_t bits = synthetic_bits(p.seed, round, uint32_t(slot), uint32_t(p.layer), uint32_t(t), field, e);
  switch (field) {
    case SyntheticField::q:
    case SyntheticField::k: return synthetic_uniform(bits, -1.0f, 1.0f);
    case SyntheticField::v: return synthetic_uniform(bits, -1.0f, 1.0f);
    case SyntheticField::g: return p.raw_gate ? synthetic_uniform(bits, -4.0f, 2.0f) : synthetic_uniform(bits, -0.6f, 0.0f);
    case SyntheticField::beta: return p.beta_logit ? synthetic_uniform(bits, -3.0f, 3.0f) : synthetic_uniform(bits, 0.05f, 0.95f);
    case SyntheticField::conv_x: return synthetic_uniform(bits, -1.0f, 1.0f);
    default: return 0.0f;
  }
}

// Writes element `i` (flat over all tensors of one row-token) of the inputs. Padded rows get zeros.
template <class IoT>
KDA_HD void synthetic_inputs_element(const SyntheticInputParams& p, int64_t i) {
  const int64_t qk = int64_t(p.heads) * p.head_k, vv = int64_t(p.value_heads) * p.head_v;
  const int64_t gg = int64_t(p.value_heads) * p.head_k, bb = p.value_heads;
  const int64_t per_token = 2 * qk + vv + gg + bb;
  const int64_t tok = i / per_token;
  int64_t e = i % per_token;
  const int32_t n = int32_t(tok / p.tokens), t = int32_t(tok % p.tokens);
  const int32_t slot = n < *p.n_real ? p.slots[n] : -1;
  const uint32_t round = uint32_t(*p.round);
  auto put = [&](void* base, int64_t width, SyntheticField f) {
    const float x = slot >= 0 ? synthetic_input(p, round, slot, t, f, uint32_t(e)) : 0.0f;
    static_cast<IoT*>(base)[tok * width + e] = math::from_f32<IoT>(x);
  };
  if (p.x != nullptr && e < 2 * qk + vv) return put(p.x, 2 * qk + vv, SyntheticField::conv_x);
  if (e < qk) return put(p.q, qk, SyntheticField::q);
  e -= qk;
  if (e < qk) return put(p.k, qk, SyntheticField::k);
  e -= qk;
  if (e < vv) return put(p.v, vv, SyntheticField::v);
  e -= vv;
  if (e < gg) return put(p.g, gg, SyntheticField::g);
  e -= gg;
  put(p.beta, bb, SyntheticField::beta);
}

KDA_HD int64_t synthetic_inputs_elements(const SyntheticInputParams& p) {
  const int64_t per_token = 2 * int64_t(p.heads) * p.head_k + int64_t(p.value_heads) * p.head_v +
                            int64_t(p.value_heads) * p.head_k + p.value_heads;
  return int64_t(p.rows) * p.tokens * per_token;
}

// The simulated sampler: each draft token is accepted with probability `accept_rate` until the first
// rejection, so a = 1 + accepted drafts, in [1, T].
struct SyntheticSamplerParams {
  uint64_t seed = 0;
  int64_t* round = nullptr;          // [1] read, then advanced by one (after every row has read it)
  const int32_t* slots = nullptr;    // [N]
  const int32_t* n_real = nullptr;   // [1]
  int32_t rows = 0, tokens = 0;
  float accept_rate = 0.0f;
  int32_t* accepted = nullptr;       // [N]
  // docs/trees.md, with a tree: the round's trees [N, T] (the drafter's); accepted paths go to accept_index
  // [N, T] (synthetic_path) instead of lengths to `accepted`.
  const int32_t* parent = nullptr;
  int32_t* accept_index = nullptr;
};

KDA_HD int32_t synthetic_accept_length(uint64_t seed, uint32_t round, int32_t slot, int32_t tokens,
                                       float accept_rate) {
  int32_t a = 1;
  while (a < tokens && synthetic_uniform(synthetic_bits(seed, round, uint32_t(slot), 0, uint32_t(a),
                                                        SyntheticField::accept, 0),
                                         0.0f, 1.0f) < accept_rate)
    ++a;
  return a;
}

// docs/trees.md's simulated drafter and sampler. The drafter's tree of T tokens: token 0 is the root (a child
// of the seed) and each later token hangs from an earlier one with fewer than `top_k` children, picked
// by hash, so a node has at most top_k children (top_k = 1: the chain). The sampler's accepted path
// starts at the root and goes on to one of the last node's children, picked by hash, with probability
// `accept_rate` each step, until a node without children or the first rejection. `parent` and `path`
// have `tokens` entries; path ends with -1s. Returns the path's length. tokens <= kMaxSyntheticTree.
inline constexpr int32_t kMaxSyntheticTree = 64;

KDA_HD void synthetic_tree(uint64_t seed, uint32_t round, int32_t slot, int32_t tokens, int32_t top_k,
                           int32_t* parent) {
  int32_t children[kMaxSyntheticTree] = {};
  parent[0] = -1;
  for (int32_t t = 1; t < tokens; ++t) {
    int32_t open = 0;  // tokens before t that may take another child
    for (int32_t j = 0; j < t; ++j) open += children[j] < top_k;
    const uint32_t bits = synthetic_bits(seed, round, uint32_t(slot), 0, uint32_t(t), SyntheticField::tree, 0);
    int32_t pick = int32_t(bits % uint32_t(open));
    int32_t j = 0;
    for (; j < t; ++j)
      if (children[j] < top_k && pick-- == 0) break;
    parent[t] = j;
    ++children[j];
  }
}

KDA_HD int32_t synthetic_path(uint64_t seed, uint32_t round, int32_t slot, int32_t tokens, float accept_rate,
                              const int32_t* parent, int32_t* path) {
  int32_t length = 1, last = 0;
  path[0] = 0;
  for (int32_t step = 1; step < tokens; ++step) {
    int32_t children = 0;
    for (int32_t t = last + 1; t < tokens; ++t) children += parent[t] == last;
    const float u = synthetic_uniform(
        synthetic_bits(seed, round, uint32_t(slot), 0, uint32_t(step), SyntheticField::accept, 0), 0.0f, 1.0f);
    if (children == 0 || !(u < accept_rate)) break;
    int32_t pick = int32_t(synthetic_bits(seed, round, uint32_t(slot), 1, uint32_t(step), SyntheticField::accept, 0) %
                           uint32_t(children));
    int32_t t = last + 1;
    for (; t < tokens; ++t)
      if (parent[t] == last && pick-- == 0) break;
    path[length++] = last = t;
  }
  for (int32_t i = length; i < tokens; ++i) path[i] = -1;
  return length;
}

// The drafter of a round's batch: row n's tree, from its slot and the round (read, not advanced: the
// sampler advances it at the end of the round), into parent [N, T]; padded rows get chains.
struct SyntheticTreeParams {
  uint64_t seed = 0;
  const int64_t* round = nullptr;    // [1]
  const int32_t* slots = nullptr;    // [N]
  const int32_t* n_real = nullptr;   // [1]
  int32_t rows = 0, tokens = 0, top_k = 1;
  int32_t* parent = nullptr;         // [N, T]
};

KDA_HD void synthetic_tree_row(const SyntheticTreeParams& p, int32_t n) {
  int32_t* parent = p.parent + int64_t(n) * p.tokens;
  if (n < *p.n_real) {
    synthetic_tree(p.seed, uint32_t(*p.round), p.slots[n], p.tokens, p.top_k, parent);
    return;
  }
  for (int32_t t = 0; t < p.tokens; ++t) parent[t] = t - 1;
}

// Row n of the sampler at `round`.
KDA_HD void synthetic_sample_row(const SyntheticSamplerParams& p, uint32_t round, int32_t n) {
  const bool real = n < *p.n_real;
  if (p.accept_index == nullptr) {
    p.accepted[n] = real ? synthetic_accept_length(p.seed, round, p.slots[n], p.tokens, p.accept_rate) : 0;
    return;
  }
  int32_t* path = p.accept_index + int64_t(n) * p.tokens;
  if (real) {
    synthetic_path(p.seed, round, p.slots[n], p.tokens, p.accept_rate, p.parent + int64_t(n) * p.tokens, path);
    return;
  }
  path[0] = 0;
  for (int32_t i = 1; i < p.tokens; ++i) path[i] = -1;
}

// The seeded state a request joins with (its prefill): small values, per (request, layer, element).
KDA_HD float synthetic_state(uint64_t seed, uint32_t request, uint32_t layer, uint32_t element) {
  return synthetic_uniform(synthetic_bits(seed, request, 0, layer, 0, SyntheticField::state, element), -0.5f, 0.5f);
}

// Per-layer gate parameters for gate-in-kernel presets.
KDA_HD float synthetic_a_log(uint64_t seed, uint32_t layer, uint32_t head) {
  return synthetic_uniform(synthetic_bits(seed, 0, 0, layer, 0, SyntheticField::gate_a_log, head), -1.5f, 0.5f);
}
KDA_HD float synthetic_dt_bias(uint64_t seed, uint32_t layer, uint32_t element) {
  return synthetic_uniform(synthetic_bits(seed, 0, 0, layer, 0, SyntheticField::gate_dt_bias, element), -0.5f, 0.5f);
}

// The short convolution's weights [C, W] of a layer (no bias, as in Kimi-Linear).
KDA_HD float synthetic_conv_weight(uint64_t seed, uint32_t layer, uint32_t element) {
  return synthetic_uniform(synthetic_bits(seed, 0, 0, layer, 0, SyntheticField::conv_weight, element), -0.6f, 0.6f);
}

// A joining request's whole state [L, HV, V, K] in the state dtype and, with a conv, its conv window
// [L, W - 1, C] in the io dtype (the prompt's last inputs), generated where they are used.
struct SyntheticStateParams {
  uint64_t seed = 0;
  uint32_t request = 0;
  int32_t layers = 0;
  int64_t slot_elems = 0;  // HV * V * K
  DType state_dtype = DType::f32;
  void* out = nullptr;
  int64_t window_elems = 0;  // (W - 1) * C; 0: no conv
  DType io_dtype = DType::f32;
  void* conv_window = nullptr;
};

KDA_HD int64_t synthetic_state_elements(const SyntheticStateParams& p) {
  return int64_t(p.layers) * (p.slot_elems + p.window_elems);
}

// Element i of the state, then of the window.
KDA_HD void synthetic_state_element(const SyntheticStateParams& p, int64_t i) {
  const int64_t states = int64_t(p.layers) * p.slot_elems;
  if (i < states) {
    const uint32_t layer = uint32_t(i / p.slot_elems), e = uint32_t(i % p.slot_elems);
    math::store_from_f32(p.out, p.state_dtype, i, synthetic_state(p.seed, p.request, layer, e));
    return;
  }
  const int64_t w = i - states;
  const uint32_t layer = uint32_t(w / p.window_elems), e = uint32_t(w % p.window_elems);
  const uint32_t bits = synthetic_bits(p.seed, p.request, 0, layer, 0, SyntheticField::conv_window, e);
  math::store_from_f32(p.conv_window, p.io_dtype, w, synthetic_uniform(bits, -1.0f, 1.0f));
}

void synthetic_state_cpu(const SyntheticStateParams& p);
void synthetic_inputs_cpu(const SyntheticInputParams& p);
void synthetic_sampler_cpu(const SyntheticSamplerParams& p);
void synthetic_tree_cpu(const SyntheticTreeParams& p);

}  // namespace kdagraph

#if defined(KDAGRAPH_WITH_CUDA) || defined(KDAGRAPH_SIMT)  // SIMT: simt/ runs the launchers on the CPU
#include <cuda_runtime_api.h>

#include "kernels/launch.h"

namespace kdagraph {
cudaError_t launch_synthetic_inputs(const SyntheticInputParams& p, Launch on);
cudaError_t launch_synthetic_sampler(const SyntheticSamplerParams& p, Launch on);
cudaError_t launch_synthetic_state(const SyntheticStateParams& p, Launch on);
cudaError_t launch_synthetic_tree(const SyntheticTreeParams& p, Launch on);
}  // namespace kdagraph
#endif

namespace kdagraph {
struct SyntheticInputsOp {
  using Params = SyntheticInputParams;
  static constexpr const char* kName = "synthetic_inputs";
  static void cpu(const Params& p) { synthetic_inputs_cpu(p); }
#if defined(KDAGRAPH_WITH_CUDA) || defined(KDAGRAPH_SIMT)
  static cudaError_t cuda(const Params& p, Launch on) { return launch_synthetic_inputs(p, on); }
#endif
  static std::string shape(const Params& p) {
    return "layer=" + std::to_string(p.layer) + " rows=" + std::to_string(p.rows);
  }
};
struct SyntheticSamplerOp {
  using Params = SyntheticSamplerParams;
  static constexpr const char* kName = "synthetic_sampler";
  static void cpu(const Params& p) { synthetic_sampler_cpu(p); }
#if defined(KDAGRAPH_WITH_CUDA) || defined(KDAGRAPH_SIMT)
  static cudaError_t cuda(const Params& p, Launch on) { return launch_synthetic_sampler(p, on); }
#endif
  static std::string shape(const Params& p) { return "rows=" + std::to_string(p.rows); }
};
struct SyntheticTreeOp {
  using Params = SyntheticTreeParams;
  static constexpr const char* kName = "synthetic_tree";
  static void cpu(const Params& p) { synthetic_tree_cpu(p); }
#if defined(KDAGRAPH_WITH_CUDA) || defined(KDAGRAPH_SIMT)
  static cudaError_t cuda(const Params& p, Launch on) { return launch_synthetic_tree(p, on); }
#endif
  static std::string shape(const Params& p) { return "rows=" + std::to_string(p.rows) + " T=" + std::to_string(p.tokens); }
};
struct SyntheticStateOp {
  using Params = SyntheticStateParams;
  static constexpr const char* kName = "synthetic_state";
  static void cpu(const Params& p) { synthetic_state_cpu(p); }
#if defined(KDAGRAPH_WITH_CUDA) || defined(KDAGRAPH_SIMT)
  static cudaError_t cuda(const Params& p, Launch on) { return launch_synthetic_state(p, on); }
#endif
  static std::string shape(const Params& p) {
    return "request=" + std::to_string(p.request) + " layers=" + std::to_string(p.layers);
  }
};
}  // namespace kdagraph
