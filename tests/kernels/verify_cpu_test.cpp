// SPEC §1 on the CPU backend: the T-token verify against an fp64 reference, closed forms, a hand-worked
// case, and the bitwise identity of one T-token verify with T single-token verifies.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "kernels/verify.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {
namespace {

// Runs the case on the CPU against the fp64 reference (tests/common/verify_case.h).
void expect_matches_reference(VerifyCase& c, double tol) {
  expect_verify_matches_reference(c, tol, [](VerifyCase& cc) { verify_cpu(cc.params()); });
}

using SweepParam = std::tuple<int /*K*/, int /*T*/, int /*G*/>;

class VerifyReferenceSweep : public ::testing::TestWithParam<SweepParam> {};

// Every combination of the options of SPEC §1: L2 norm, scale (default or given), beta as logit, and
// the three gate modes.
TEST_P(VerifyReferenceSweep, Fp32MatchesFp64Reference) {
  const auto [K, T, G] = GetParam();
  for (int bits = 0; bits < 48; ++bits) {
    const CaseShape s = sweep_shape(K, T, G, bits, 3);
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(s.str() + " seed=" + std::to_string(seed));
    // Row 0 seeds from the pool, row 1 from scratch, row 2 is padding.
    std::vector<int32_t> accept(5, 0);
    accept[3] = 1 + int32_t(seed % 8);
    VerifyCase c(s, seed, {1, 3, -1}, accept);
    expect_matches_reference(c, 1e-5);
  }
}

std::vector<SweepParam> sweep_cases() {
  std::vector<SweepParam> out;
  for (int K : {64, 128})
    for (int T = 1; T <= 8; ++T)
      for (int G : {1, 2}) out.emplace_back(K, T, G);
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllOptions, VerifyReferenceSweep, ::testing::ValuesIn(sweep_cases()));

TEST(VerifyCpu, Bf16InputsWithinTolerance) {
  for (DType state : {DType::f32, DType::bf16}) {
    CaseShape s;
    s.io = DType::bf16;
    s.state = state;
    s.head_k = s.head_v = 128;
    s.value_heads = 4;
    s.heads = 2;
    s.options.l2norm_qk = true;
    s.options.gate = GateMode::softplus;
    s.options.beta_is_logit = true;
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(s.str() + " seed=" + std::to_string(seed));
    VerifyCase c(s, seed, {0, 2}, {0, 0, 3, 0});
    expect_matches_reference(c, 1e-2);
  }
}

// One T-token verify and T single-token verifies, each seeded from the previous post-state, run the
// same arithmetic: outputs and post-states agree bitwise.
TEST(VerifyCpu, TTokensEqualTSingleTokenVerifiesBitwise) {
  for (DType io : {DType::f32, DType::bf16}) {
    CaseShape s;
    s.rows = 1;
    s.tokens = 6;
    s.heads = 1;
    s.value_heads = 2;
    s.head_k = s.head_v = 64;
    s.io = io;
    s.options.l2norm_qk = true;
    s.options.gate = GateMode::lower_bound;
    s.options.beta_is_logit = true;
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(s.str() + " seed=" + std::to_string(seed));
    VerifyCase whole(s, seed, {2}, {0, 0, 0, 0});
    VerifyCase steps(s, seed, {2}, {0, 0, 0, 0});
    verify_cpu(whole.params());

    for (int t = 0; t < s.tokens; ++t) {
      VerifyParams p = steps.params();
      select_token(p, t);
      const std::vector<int32_t> index = single_token_indices(2, s.scratch_steps, t);
      p.seed_pool = &index[0];
      p.seed_scratch = &index[1];
      p.write_row = &index[2];
      verify_cpu(p);
    }
    EXPECT_EQ(whole.o.bytes, steps.o.bytes);
    EXPECT_EQ(whole.scratch.bytes, steps.scratch.bytes);
  }
}

// With beta = 0 the state only decays: S_T = exp(sum_t g_t) * S_0 per key channel, and o_t = S_t q_t.
TEST(VerifyCpu, ZeroBetaOnlyDecays) {
  CaseShape s;
  s.rows = 1;
  s.tokens = 5;
  s.options.use_scale = false;
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  VerifyCase c(s, seed, {1}, {0, 0, 0, 0});
  c.beta.assign(DType::f32, std::vector<float>(c.beta.size(), 0.0f));
  const int K = s.head_k, V = s.head_v, T = s.tokens;
  std::vector<float> seed_state(c.pool.values.begin() + c.geo.pool_offset(0, 1, 0),
                                c.pool.values.begin() + c.geo.pool_offset(0, 1, 0) + V * K);
  verify_cpu(c.params());
  c.o.sync_values();
  c.scratch.sync_values();
  std::vector<double> sum_g(size_t(K), 0.0);
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < K; ++i) sum_g[size_t(i)] += c.g.values[size_t(t) * K + i];
    std::vector<double> want(size_t(V) * K), got(size_t(V) * K), out_want(static_cast<size_t>(V)),
        out_got(static_cast<size_t>(V));
    const int64_t off = c.geo.scratch_offset(0, c.write_row[size_t(t)], 0);
    for (int j = 0; j < V; ++j) {
      for (int i = 0; i < K; ++i) {
        want[size_t(j) * K + i] = std::exp(sum_g[size_t(i)]) * seed_state[size_t(j) * K + i];
        got[size_t(j) * K + i] = c.scratch.values[size_t(off) + size_t(j) * K + i];
        out_want[size_t(j)] += want[size_t(j) * K + i] * c.q.values[size_t(t) * K + i];
      }
      out_got[size_t(j)] = c.o.values[size_t(t) * V + j];
    }
    EXPECT_LE(rel_error(got, want), 1e-6) << "t=" << t;
    EXPECT_LE(rel_error(out_got, out_want), 1e-5) << "t=" << t;
  }
}

// With g = 0 and k = e_i, column i becomes beta * v + (1 - beta) * old; the other columns stay.
TEST(VerifyCpu, UnitKeyReplacesOneColumn) {
  CaseShape s;
  s.rows = 1;
  s.tokens = 1;
  s.options.use_scale = false;
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  VerifyCase c(s, seed, {0}, {0, 0, 0, 0});
  const int K = s.head_k, V = s.head_v, col = int(seed % uint64_t(K));
  std::vector<float> key(size_t(K), 0.0f);
  key[size_t(col)] = 1.0f;
  c.k.assign(DType::f32, key);
  c.g.assign(DType::f32, std::vector<float>(size_t(K), 0.0f));
  const float b = c.beta.values[0];
  std::vector<float> old(c.pool.values.begin(), c.pool.values.begin() + V * K);
  verify_cpu(c.params());
  c.scratch.sync_values();
  c.o.sync_values();
  const int64_t off = c.geo.scratch_offset(0, c.write_row[0], 0);
  for (int j = 0; j < V; ++j) {
    double out = 0;
    for (int i = 0; i < K; ++i) {
      const float got = c.scratch.values[size_t(off) + size_t(j) * K + i];
      const double want = i == col ? b * double(c.v.values[size_t(j)]) + (1.0 - b) * old[size_t(j) * K + i]
                                   : double(old[size_t(j) * K + i]);
      EXPECT_NEAR(got, want, 1e-6) << "j=" << j << " i=" << i;
      out += double(got) * c.q.values[size_t(i)];
    }
    EXPECT_NEAR(c.o.values[size_t(j)], out, 1e-5) << "o[" << j << "]";
  }
}

// K = V = 2, T = 2, g = 0, no scale; every number below is worked out by hand from SPEC §1 and exact in
// binary floating point.
//   S0 = [[1, 2], [3, 4]]                     (S[j][i], rows j = value channel)
//   t1: k = (1, 0), v = (2, 1), beta = 1/2, q = (1, 1)
//       p = (1, 3); u = (0.5, -1); S1 = [[1.5, 2], [2, 4]]; o1 = (3.5, 6)
//   t2: k = (0, 1), v = (1, 2), beta = 1/4, q = (2, 0)
//       p = (2, 4); u = (-0.25, -0.5); S2 = [[1.5, 1.75], [2, 3.5]]; o2 = (3, 4)
TEST(VerifyCpu, HandWorkedTwoByTwo) {
  CaseShape s;
  s.rows = 1;
  s.tokens = 2;
  s.head_k = s.head_v = 2;
  s.slots = 1;
  s.scratch_steps = 2;
  s.options.use_scale = false;
  VerifyCase c(s, 1, {0}, {0});
  c.pool.assign(DType::f32, {1, 2, 3, 4});
  c.q.assign(DType::f32, {1, 1, 2, 0});
  c.k.assign(DType::f32, {1, 0, 0, 1});
  c.v.assign(DType::f32, {2, 1, 1, 2});
  c.g.assign(DType::f32, {0, 0, 0, 0});
  c.beta.assign(DType::f32, {0.5f, 0.25f});
  verify_cpu(c.params());
  c.o.sync_values();
  c.scratch.sync_values();
  EXPECT_EQ(c.o.values, (std::vector<float>{3.5f, 6.0f, 3.0f, 4.0f}));
  EXPECT_EQ(c.scratch.values, (std::vector<float>{1.5f, 2.0f, 2.0f, 4.0f, 1.5f, 1.75f, 2.0f, 3.5f}));
}

// SPEC §6, §10: a layer table the host did not check (on CUDA it lives in device memory) with an
// invalid entry: the kernels' shared seed function records it once per real row and treats those rows
// as padding, so nothing is read or written through the bad base.
TEST(VerifyCpu, AnInvalidLayerTableEntryIsRecordedAndItsRowsArePadding) {
  CaseShape s;
  s.head_k = s.head_v = 16;
  s.value_heads = 2;
  s.heads = 1;
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  VerifyCase c(s, seed, {1, 0, -1}, {0, 0, 0, 0});  // both real rows seed from the pool
  const std::vector<uint8_t> scratch_before = c.scratch.bytes;
  for (void* bad : {static_cast<void*>(nullptr), static_cast<void*>(c.pool.bytes.data() + 4)}) {
    void* table[1] = {bad};
    VerifyParams p = c.params();
    p.pool = state_view_table(table, s.state, 1, p.pool.rows, p.pool.row_stride);
    DeviceErrorWord errors;
    p.errors = &errors;
    c.o.poison();
    verify_cpu(p);
    c.o.sync_values();
    EXPECT_EQ(DeviceErrorCode(errors.code), DeviceErrorCode::layer_base_invalid);
    EXPECT_EQ(errors.count, 2u) << "once per real row";
    for (size_t i = 0; i < c.o.size(); ++i) ASSERT_EQ(c.o.values[i], 0.0f) << "output " << i;
    EXPECT_EQ(c.scratch.bytes, scratch_before);
  }
}

}  // namespace
}  // namespace kdagraph::test
