// A verify test case in host memory: random inputs, a pool and scratch with random seeds, the indices
// of docs/indices.md, and the fp64 reference of every output and post-state. The CPU tests run it directly;
// the GPU tests copy the same bytes to the device.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <gtest/gtest.h>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kdagraph/types.hpp"
#include "kernels/indices.h"
#include "kernels/kda_math.h"
#include "kernels/layout.h"
#include "kernels/verify.h"
#include "tests/common/placement.h"
#include "tests/common/reference.h"

namespace kdagraph::test {

struct CaseShape {
  int32_t rows = 2, tokens = 4, heads = 1, value_heads = 1, head_k = 64, head_v = 64;
  int32_t slots = 4, scratch_steps = 8;
  DType io = DType::f32, state = DType::f32;
  bool gate_f32 = false;  // g and beta in fp32 beside a 16-bit io dtype (VerifyParams::gate_f32)
  Rounding rounding = Rounding::nearest;  // of the state stores (docs/low_precision.md)
  VerifyOptions options;
  std::string str() const {
    return "N=" + std::to_string(rows) + " T=" + std::to_string(tokens) + " H=" + std::to_string(heads) +
           " HV=" + std::to_string(value_heads) + " K=" + std::to_string(head_k) +
           " V=" + std::to_string(head_v) + " io=" + to_string(io) + (gate_f32 ? " gates=f32" : "") +
           " state=" + to_string(state) + (rounding == Rounding::stochastic ? " stochastic" : "") +
           " l2=" + std::to_string(options.l2norm_qk) + " scale=" + std::to_string(options.use_scale) +
           " gate=" + std::to_string(int(options.gate)) + " logit=" + std::to_string(options.beta_is_logit);
  }
};

// The reference sweeps' case: two value heads (grouping G = 2 / H), K = V, and the docs/math.md options
// chosen by the bits of `options` (0..47): L2 norm, scale, a given scale, beta as logit, gate mode.
inline CaseShape sweep_shape(int K, int T, int G, int options, int rows) {
  CaseShape s;
  s.rows = rows;
  s.tokens = T;
  s.heads = 2 / G;
  s.value_heads = 2;
  s.head_k = K;
  s.head_v = K;
  s.slots = 5;
  s.scratch_steps = 8;
  s.options.l2norm_qk = options & 1;
  s.options.use_scale = options & 2;
  s.options.scale = (options & 4) ? 0.3f : 0.0f;
  s.options.beta_is_logit = options & 8;
  s.options.gate = GateMode((options >> 4) % 3);
  return s;
}

// Narrows `p` (a one-row case's params, host or device pointers alike) to token t as a T = 1 verify.
inline void select_token(VerifyParams& p, int t) {
  const size_t es = dtype_size(p.io_dtype), H = size_t(p.heads), HV = size_t(p.value_heads);
  const size_t K = size_t(p.head_k), V = size_t(p.head_v);
  auto at = [&](const void* base, size_t elems) { return static_cast<const char*>(base) + size_t(t) * elems * es; };
  p.tokens = 1;
  p.q = at(p.q, H * K);
  p.k = at(p.k, H * K);
  p.v = at(p.v, HV * V);
  p.g = at(p.g, HV * K);
  p.beta = at(p.beta, HV);
  p.o = const_cast<char*>(at(p.o, HV * V));
}

// Seed pool, seed scratch and write row of token t of `slot` verified one token at a time: token 0
// seeds from the pool, token t from the post-state token t - 1 wrote.
inline std::vector<int32_t> single_token_indices(int32_t slot, int32_t scratch_steps, int32_t t) {
  return {t == 0 ? slot : -1, t == 0 ? -1 : slot * scratch_steps + t - 1, slot * scratch_steps + t};
}

inline uint64_t fresh_seed() { return (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}(); }

// Values stored in dtype `t`, kept both as their bytes and as the floats they round to.
struct Tensor {
  DType dtype = DType::f32;
  std::vector<float> values;
  std::vector<uint8_t> bytes;

  void assign(DType t, std::vector<float> v) {
    dtype = t;
    values = std::move(v);
    bytes.resize(values.size() * dtype_size(t));
    for (size_t i = 0; i < values.size(); ++i) {
      math::store_from_f32(bytes.data(), t, int64_t(i), values[i]);
      values[i] = math::load_as_f32(bytes.data(), t, int64_t(i));
    }
  }
  float at(size_t i) const { return math::load_as_f32(bytes.data(), dtype, int64_t(i)); }
  size_t size() const { return values.size(); }
  void poison() {
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = 0xff;  // NaN in f32, bf16 and f16
  }
  void sync_values() {
    for (size_t i = 0; i < values.size(); ++i) values[i] = at(i);
  }
};

struct VerifyCase {
  CaseShape sh;
  uint64_t seed = 0;
  Tensor q, k, v, g, beta, o;
  std::vector<float> A_log, dt_bias;
  Tensor pool, scratch;                 // one layer: [P, HV, V, K] and [P * S, HV, V, K]
  std::vector<int32_t> slots, accept_len, n_real;
  std::vector<int32_t> row_slot, seed_pool, seed_scratch, seed_accept, write_row, row_accept;
  std::vector<int32_t> parent;  // [N * T] a token tree per row (docs/trees.md), or empty: chains
  std::vector<uint64_t> rounding_seed;    // [slots], stochastic rounding's keys
  std::vector<uint32_t> rounding_counter; // [slots]
  StateGeometry geo;

  VerifyCase(const CaseShape& s, uint64_t seed_, std::vector<int32_t> row_slots,
             std::vector<int32_t> accepts)
      : sh(s), seed(seed_), slots(std::move(row_slots)), accept_len(std::move(accepts)) {
    std::mt19937_64 rng(seed);
    const int N = s.rows, T = s.tokens, H = s.heads, HV = s.value_heads, K = s.head_k, V = s.head_v;
    geo = StateGeometry{1, s.slots, s.scratch_steps, HV, V, K};
    // Uniform in [lo, hi): a splitmix64 stream seeded from the case's generator, a tenth of the time of a
    // Mersenne twister draw per element (the pools and scratch of a K = 128 case are millions of them).
    auto rand_vec = [&](size_t n, float lo, float hi) {
      uint64_t x = rng();
      std::vector<float> out(n);
      for (auto& e : out) {
        uint64_t z = (x += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        e = lo + (hi - lo) * float(z >> 40) * 0x1.0p-24f;
      }
      return out;
    };
    // Without L2 norm, keys of norm about 1 keep the delta rule stable.
    const float kq = s.options.l2norm_qk ? 1.0f : 1.7f / std::sqrt(float(K));
    q.assign(s.io, rand_vec(size_t(N) * T * H * K, -kq, kq));
    k.assign(s.io, rand_vec(size_t(N) * T * H * K, -kq, kq));
    v.assign(s.io, rand_vec(size_t(N) * T * HV * V, -1.0f, 1.0f));
    const DType gates = s.gate_f32 ? DType::f32 : s.io;
    if (s.options.gate == GateMode::precomputed) g.assign(gates, rand_vec(size_t(N) * T * HV * K, -0.5f, 0.0f));
    else g.assign(gates, rand_vec(size_t(N) * T * HV * K, -3.0f, 3.0f));
    beta.assign(gates, s.options.beta_is_logit ? rand_vec(size_t(N) * T * HV, -3.0f, 3.0f)
                                              : rand_vec(size_t(N) * T * HV, 0.05f, 0.95f));
    A_log = rand_vec(size_t(HV), -1.0f, 0.5f);
    dt_bias = rand_vec(size_t(HV) * K, -0.5f, 0.5f);
    o.assign(s.io, std::vector<float>(size_t(N) * T * HV * V, 0.0f));
    o.poison();
    pool.assign(s.state, rand_vec(size_t(geo.pool_layer_elems()), -1.0f, 1.0f));
    scratch.assign(s.state, rand_vec(size_t(geo.scratch_layer_elems()), -1.0f, 1.0f));
    n_real = {int32_t(std::count_if(slots.begin(), slots.end(), [](int32_t x) { return x >= 0; }))};
    for (int32_t i = 0; i < s.slots; ++i) {
      rounding_seed.push_back(rng());
      rounding_counter.push_back(uint32_t(rng() % 1000));
    }
    build_indices();
  }

  // Real rows first, then padding (-1): n_real counts the real ones.
  void build_indices() {
    const int N = sh.rows, T = sh.tokens;
    row_slot.assign(N, 0);
    seed_pool.assign(N, 0);
    seed_scratch.assign(N, 0);
    seed_accept.assign(N, 0);
    row_accept.assign(N, 0);
    write_row.assign(size_t(N) * T, 0);
    IndexBuildParams p;
    p.slots = slots.data();
    p.n_real = n_real.data();
    p.accept_len = accept_len.data();
    p.pool_slots = sh.slots;
    p.scratch_steps = sh.scratch_steps;
    p.tokens = T;
    p.rows = N;
    p.out = indices();
    build_indices_cpu(p);
  }

  RoundIndices indices() {
    RoundIndices idx;
    idx.capacity = sh.rows;
    idx.tokens = sh.tokens;
    idx.row_slot = row_slot.data();
    idx.seed_pool = seed_pool.data();
    idx.seed_scratch = seed_scratch.data();
    idx.seed_accept = seed_accept.data();
    idx.write_row = write_row.data();
    idx.row_accept = row_accept.data();
    return idx;
  }

  // The verify's parameters over the case's buffers as placed in `at` (host memory, or device copies that
  // at.fetch() brings back; then sync()).
  VerifyParams params(Placement& at) {
    VerifyParams p;
    p.rows = sh.rows;
    p.tokens = sh.tokens;
    p.heads = sh.heads;
    p.value_heads = sh.value_heads;
    p.head_k = sh.head_k;
    p.head_v = sh.head_v;
    p.io_dtype = sh.io;
    p.gate_f32 = sh.gate_f32;
    p.options = sh.options;
    p.q = at.in(q.bytes);
    p.k = at.in(k.bytes);
    p.v = at.in(v.bytes);
    p.g = at.in(g.bytes);
    p.beta = at.in(beta.bytes);
    p.o = at.out(o.bytes);
    if (sh.options.gate != GateMode::precomputed) {
      p.A_log = at.in(A_log);
      p.dt_bias = at.in(dt_bias);
    }
    p.pool = pool_view(geo, at.out(pool.bytes), sh.state);
    p.scratch = scratch_view(geo, at.out(scratch.bytes), sh.state);
    p.seed_pool = at.in(seed_pool);
    p.seed_scratch = at.in(seed_scratch);
    p.write_row = at.in(write_row);
    p.rounding = sh.rounding;
    if (sh.rounding == Rounding::stochastic) {
      p.row_slot = at.in(row_slot);
      p.rounding_seed = at.in(rounding_seed);
      p.rounding_counter = at.in(rounding_counter);
    }
    p.parent = parent.empty() ? nullptr : at.in(parent);
    return p;
  }
  // Over the case's own host buffers.
  VerifyParams params() {
    Placement host(Backend::cpu);
    return params(host);
  }
  // Refreshes the values of what a verify writes from their bytes.
  void sync() {
    o.sync_values();
    scratch.sync_values();
    pool.sync_values();
  }

  // fp64 reference of row n, head h, from the seed the indices name in the current pool/scratch
  // (call before running the verify, which may overwrite the seed row).
  struct HeadRef {
    std::vector<std::vector<double>> out, posts;
  };
  HeadRef reference(int n, int h) const {
    const int T = sh.tokens, H = sh.heads, HV = sh.value_heads, K = sh.head_k, V = sh.head_v;
    const int hq = h / (HV / H);
    std::vector<double> state(size_t(V) * K);
    const int64_t off = seed_pool[n] >= 0 ? geo.pool_offset(0, seed_pool[n], h)
                                          : geo.scratch_offset(0, seed_scratch[n], h);
    const Tensor& src = seed_pool[n] >= 0 ? pool : scratch;
    for (size_t e = 0; e < state.size(); ++e) state[e] = src.at(size_t(off) + e);
    RefHeadInputs in;
    for (int t = 0; t < T; ++t) {
      const size_t tok = size_t(n) * T + t;
      auto slice = [](const Tensor& x, size_t at, int len) {
        return std::vector<double>(x.values.begin() + at, x.values.begin() + at + len);
      };
      in.q.push_back(slice(q, (tok * H + hq) * K, K));
      in.k.push_back(slice(k, (tok * H + hq) * K, K));
      in.v.push_back(slice(v, (tok * HV + h) * V, V));
      in.g.push_back(slice(g, (tok * HV + h) * K, K));
      in.beta.push_back(beta.values[tok * HV + h]);
    }
    in.a_log = A_log[h];
    in.dt_bias.assign(dt_bias.begin() + size_t(h) * K, dt_bias.begin() + size_t(h + 1) * K);
    HeadRef r;
    if (!parent.empty())
      r.out = ref_verify_tree_head(ref_options(sh.options), K, V, state, in, parent.data() + size_t(n) * T, r.posts);
    else
      r.out = ref_verify_head(ref_options(sh.options), K, V, state, in, &r.posts);
    return r;
  }
};

// Runs the case with `run` (a backend's verify, which leaves outputs, scratch and pool back in the case)
// and checks every output and post-state against fp64, that padded rows output zeros, and that nothing
// outside the real rows' write rows changed.
template <class Run>
void expect_verify_matches_reference(VerifyCase& c, double tol, Run run) {
  std::vector<std::vector<VerifyCase::HeadRef>> refs(size_t(c.sh.rows));
  for (int n = 0; n < c.sh.rows; ++n)
    for (int h = 0; h < c.sh.value_heads; ++h)
      refs[size_t(n)].push_back(c.row_slot[n] < 0 ? VerifyCase::HeadRef{} : c.reference(n, h));
  const std::vector<uint8_t> scratch_before = c.scratch.bytes, pool_before = c.pool.bytes;
  run(c);
  if (::testing::Test::HasFatalFailure()) return;
  c.o.sync_values();
  c.scratch.sync_values();

  const int T = c.sh.tokens, HV = c.sh.value_heads, V = c.sh.head_v;
  std::set<int32_t> written;
  std::vector<double> got, want;
  for (int n = 0; n < c.sh.rows; ++n) {
    if (c.row_slot[n] < 0) {
      for (int t = 0; t < T; ++t)
        for (int e = 0; e < HV * V; ++e) {
          const size_t at = (size_t(n) * T + t) * HV * V + e;
          ASSERT_EQ(c.o.values[at], 0.0f) << "padded row n=" << n << " t=" << t << " element " << e;
          ASSERT_FALSE(std::signbit(c.o.values[at])) << "padded row n=" << n << ": -0, not zero bytes";
        }
      continue;
    }
    for (int t = 0; t < T; ++t) written.insert(c.write_row[size_t(n) * T + t]);
    for (int h = 0; h < HV; ++h) {
      for (int t = 0; t < T; ++t) {
        for (int j = 0; j < V; ++j) {
          const float x = c.o.values[((size_t(n) * T + t) * HV + h) * V + j];
          ASSERT_FALSE(std::isnan(x))
              << "output not written: n=" << n << " t=" << t << " h=" << h << " j=" << j;
          got.push_back(x);
          want.push_back(refs[size_t(n)][size_t(h)].out[size_t(t)][size_t(j)]);
        }
        const int64_t off = c.geo.scratch_offset(0, c.write_row[size_t(n) * T + t], h);
        const auto& post = refs[size_t(n)][size_t(h)].posts[size_t(t)];
        std::vector<double> state(c.scratch.values.begin() + off,
                                  c.scratch.values.begin() + off + post.size());
        EXPECT_LE(rel_error(state, post), tol) << "post-state n=" << n << " h=" << h << " t=" << t;
      }
    }
  }
  EXPECT_LE(rel_error(got, want), tol) << "outputs";

  EXPECT_EQ(first_difference(c.pool.bytes, pool_before), -1) << "the verify wrote this pool byte";
  const size_t row_bytes = size_t(c.geo.slot_elems()) * dtype_size(c.sh.state);
  for (int64_t row = 0; row < c.geo.scratch_rows(); ++row) {
    if (written.count(int32_t(row))) continue;
    const auto begin = ptrdiff_t(size_t(row) * row_bytes), end = ptrdiff_t(size_t(row + 1) * row_bytes);
    EXPECT_TRUE(std::equal(c.scratch.bytes.begin() + begin, c.scratch.bytes.begin() + end,
                           scratch_before.begin() + begin))
        << "scratch row " << row << " is no real row's write row, yet it changed";
  }
}

}  // namespace kdagraph::test
