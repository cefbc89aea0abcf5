// An independent fp64 reference of docs/math.md, written from the formulas and sharing no code with the
// library's kernels/kda_math.h, so the library's CPU and CUDA paths can both be checked against it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <random>
#include <vector>

#include "kdagraph/types.hpp"

namespace kdagraph::test {

struct RefOptions {
  bool l2norm = false;
  bool use_scale = true;
  double scale = 0.0;  // 0: 1 / sqrt(K)
  GateMode gate = GateMode::precomputed;
  double lower_bound = -5.0;
  bool beta_logit = false;
};

inline RefOptions ref_options(const VerifyOptions& o) {
  return RefOptions{o.l2norm_qk, o.use_scale, o.scale, o.gate, o.gate_lower_bound, o.beta_is_logit};
}

inline double ref_softplus(double z) { return z > 20.0 ? z : std::log(1.0 + std::exp(z)); }
inline double ref_sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

inline double ref_gate(const RefOptions& o, double x, double a_log, double dt_bias) {
  switch (o.gate) {
    case GateMode::softplus: return -std::exp(a_log) * ref_softplus(x + dt_bias);
    case GateMode::lower_bound: return o.lower_bound * ref_sigmoid(std::exp(a_log) * (x + dt_bias));
    default: return x;
  }
}

// One head's T-token verify in fp64. state: [V][K], updated in place. Inputs are per token:
// q[t][K], k[t][K], v[t][V], gx[t][K] (g or raw gate input), beta[t]. Returns o[t][V] and appends each
// post-state to `posts` when given.
struct RefHeadInputs {
  std::vector<std::vector<double>> q, k, v, g;
  std::vector<double> beta;
  double a_log = 0.0;
  std::vector<double> dt_bias;  // [K]
};

inline std::vector<std::vector<double>> ref_verify_head(const RefOptions& o, int K, int V,
                                                        std::vector<double>& state,
                                                        const RefHeadInputs& in,
                                                        std::vector<std::vector<double>>* posts) {
  const size_t T = in.beta.size();
  std::vector<std::vector<double>> out(T, std::vector<double>(size_t(V)));
  for (size_t t = 0; t < T; ++t) {
    std::vector<double> q = in.q[t], k = in.k[t];
    if (o.l2norm) {
      double sq = 0, sk = 0;
      for (int i = 0; i < K; ++i) sq += q[i] * q[i], sk += k[i] * k[i];
      for (int i = 0; i < K; ++i) q[i] /= std::sqrt(sq + 1e-6), k[i] /= std::sqrt(sk + 1e-6);
    }
    if (o.use_scale) {
      const double s = o.scale != 0.0 ? o.scale : 1.0 / std::sqrt(double(K));
      for (int i = 0; i < K; ++i) q[i] *= s;
    }
    const double beta = o.beta_logit ? ref_sigmoid(in.beta[t]) : in.beta[t];
    std::vector<double> a(static_cast<size_t>(K));
    for (int i = 0; i < K; ++i)
      a[i] = std::exp(ref_gate(o, in.g[t][i], in.a_log, in.dt_bias.empty() ? 0.0 : in.dt_bias[i]));
    for (int j = 0; j < V; ++j) {
      double* s = state.data() + size_t(j) * K;
      double p = 0;
      for (int i = 0; i < K; ++i) s[i] *= a[i], p += s[i] * k[i];
      const double u = beta * (in.v[t][j] - p);
      double acc = 0;
      for (int i = 0; i < K; ++i) s[i] += k[i] * u, acc += s[i] * q[i];
      out[t][j] = acc;
    }
    if (posts) posts->push_back(state);
  }
  return out;
}

// docs/trees.md: one head's verify of a token tree in fp64: token t updates the state of token parent[t]
// (the seed when -1) and outputs from its own post-state. `seed` is not changed; every post-state is
// appended to `posts`.
inline std::vector<std::vector<double>> ref_verify_tree_head(const RefOptions& o, int K, int V,
                                                             const std::vector<double>& seed,
                                                             const RefHeadInputs& in, const int32_t* parent,
                                                             std::vector<std::vector<double>>& posts) {
  const size_t T = in.beta.size(), first = posts.size();
  std::vector<std::vector<double>> out;
  for (size_t t = 0; t < T; ++t) {
    std::vector<double> state = parent[t] < 0 ? seed : posts[first + size_t(parent[t])];
    RefHeadInputs one;
    one.q = {in.q[t]};
    one.k = {in.k[t]};
    one.v = {in.v[t]};
    one.g = {in.g[t]};
    one.beta = {in.beta[t]};
    one.a_log = in.a_log;
    one.dt_bias = in.dt_bias;
    out.push_back(ref_verify_head(o, K, V, state, one, nullptr)[0]);
    posts.push_back(state);
  }
  return out;
}

// A random token tree of T tokens in docs/trees.md's form: parent[0] = -1, parent[t] in [-1, t), about half
// of the tokens continuing the token before them and the rest branching from any earlier one.
template <class Rng>
std::vector<int32_t> random_tree(Rng& rng, int32_t T) {
  std::vector<int32_t> parent(size_t(T), -1);
  for (int32_t t = 1; t < T; ++t) {
    std::uniform_int_distribution<int32_t> any(-1, t - 1);
    parent[size_t(t)] = rng() % 2 ? t - 1 : any(rng);
  }
  return parent;
}

// A token tree whose branch states are live together at their most, tree_slot_count(T) of them
// (kernels/tree.h): a chain of T / 2 tokens, then every later token branching from a distinct earlier
// state, the latest first, so that all of them wait at once.
inline std::vector<int32_t> widest_tree(int32_t T) {
  const int32_t m = T / 2;
  std::vector<int32_t> parent(static_cast<size_t>(T));
  for (int32_t t = 0; t < m; ++t) parent[size_t(t)] = t - 1;
  if (T % 2 == 0) {
    for (int32_t i = 0; i < T - m; ++i) parent[size_t(m + i)] = m - 2 - i;
  } else {
    parent[size_t(m)] = -1;
    for (int32_t i = 1; i < T - m; ++i) parent[size_t(m + i)] = m - i;
  }
  return parent;
}

// Index of the first element where `a` and `b` differ, -1 when they are equal: bitwise comparisons of
// large buffers report where they differ instead of printing both buffers.
template <class T>
int64_t first_difference(const std::vector<T>& a, const std::vector<T>& b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return int64_t(i);
  return a.size() == b.size() ? -1 : int64_t(n);
}

// ||a - b|| / ||b|| over two equally long sequences.
template <class A, class B>
double rel_error(const A& got, const B& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = double(got[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  if (std::isnan(num)) return INFINITY;
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace kdagraph::test
