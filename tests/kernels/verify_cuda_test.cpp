// SPEC §1, §3 on the CUDA backend: the device verify against the fp64 reference, on the same cases as
// verify_cpu_test.cpp (tests/common/verify_case.h), plus what only the device can get wrong: outputs
// it forgets to write, state it writes where it must not, a seed row it overwrites before reading.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/verify.h"
#include "tests/common/gpu.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {
namespace {

// Device copies of a VerifyCase's buffers; outputs poisoned with 0xff bytes (NaN in f32 and bf16).
struct DeviceCase {
  DeviceBuffer q, k, v, g, beta, o, A_log, dt_bias, pool, scratch, seed_pool, seed_scratch, write_row;

  explicit DeviceCase(const VerifyCase& c)
      : q(c.q.bytes),
        k(c.k.bytes),
        v(c.v.bytes),
        g(c.g.bytes),
        beta(c.beta.bytes),
        o(c.o.bytes.size()),
        A_log(c.A_log),
        dt_bias(c.dt_bias),
        pool(c.pool.bytes),
        scratch(c.scratch.bytes),
        seed_pool(c.seed_pool),
        seed_scratch(c.seed_scratch),
        write_row(c.write_row) {
    o.fill(0xff);
  }

  VerifyParams params(VerifyCase& c) const {
    VerifyParams p = c.params();
    p.q = q.as();
    p.k = k.as();
    p.v = v.as();
    p.g = g.as();
    p.beta = beta.as();
    p.o = o.as();
    if (p.A_log != nullptr) {
      p.A_log = A_log.as<float>();
      p.dt_bias = dt_bias.as<float>();
    }
    p.pool.base = pool.as();
    p.scratch.base = scratch.as();
    p.seed_pool = seed_pool.as<int32_t>();
    p.seed_scratch = seed_scratch.as<int32_t>();
    p.write_row = write_row.as<int32_t>();
    return p;
  }
};

// Runs `p` on the device and copies outputs, scratch and pool back into the case.
void run_on_device(VerifyCase& c, const DeviceCase& d, const VerifyParams& p) {
  const detail::StreamHandle stream = test_stream();
  ASSERT_EQ(launch_verify(p, stream.cuda()), cudaSuccess);
  stream.synchronize();
  c.o.bytes = d.o.download<uint8_t>();
  c.scratch.bytes = d.scratch.download<uint8_t>();
  c.pool.bytes = d.pool.download<uint8_t>();
  c.o.sync_values();
  c.scratch.sync_values();
}

// Runs the case on the device against the fp64 reference (tests/common/verify_case.h).
void expect_matches_reference(VerifyCase& c, double tol) {
  expect_verify_matches_reference(c, tol, [](VerifyCase& cc) {
    DeviceCase d(cc);
    run_on_device(cc, d, d.params(cc));
  });
}

double tolerance(const CaseShape& s) { return s.io == DType::f32 && s.state == DType::f32 ? 1e-5 : 1e-2; }

using SweepParam = std::tuple<int /*K*/, int /*T*/, int /*G*/>;

class VerifyCudaSweep : public ::testing::TestWithParam<SweepParam> {};

// Every option combination of SPEC §1 (L2 norm, scale default or given, beta as logit, the three gate
// modes). Rows: a pool seed, a scratch seed at accept 1 (the row token 0 overwrites), a scratch seed at
// accept T (the row the last token overwrites), then one padded row.
TEST_P(VerifyCudaSweep, Fp32MatchesFp64Reference) {
  KDA_SKIP_WITHOUT_GPU();
  const auto [K, T, G] = GetParam();
  for (int bits = 0; bits < 48; ++bits) {
    const CaseShape s = sweep_shape(K, T, G, bits, 4);
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(s.str() + " seed=" + std::to_string(seed));
    std::vector<int32_t> accept(5, 0);
    accept[3] = 1;
    accept[4] = T;
    VerifyCase c(s, seed, {1, 3, 4, -1}, accept);
    ASSERT_EQ(c.seed_scratch[1], c.write_row[size_t(T)]) << "row 1 must seed from its own first write row";
    expect_matches_reference(c, 1e-5);
    if (HasFatalFailure()) return;
  }
}

std::vector<SweepParam> sweep_cases() {
  std::vector<SweepParam> out;
  for (int K : {64, 128})
    for (int T = 1; T <= 8; ++T)
      for (int G : {1, 2}) out.emplace_back(K, T, G);
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllOptions, VerifyCudaSweep, ::testing::ValuesIn(sweep_cases()),
                         [](const ::testing::TestParamInfo<SweepParam>& param_info) {
                           return "K" + std::to_string(std::get<0>(param_info.param)) + "_T" +
                                  std::to_string(std::get<1>(param_info.param)) + "_G" +
                                  std::to_string(std::get<2>(param_info.param));
                         });

// bf16 inputs and outputs, bf16 state storage, and both together, at both head dims.
TEST(VerifyCuda, Bf16WithinTolerance) {
  KDA_SKIP_WITHOUT_GPU();
  for (int K : {64, 128})
    for (DType io : {DType::f32, DType::bf16})
      for (DType state : {DType::f32, DType::bf16}) {
        if (io == DType::f32 && state == DType::f32) continue;
        CaseShape s;
        s.io = io;
        s.state = state;
        s.head_k = s.head_v = K;
        s.value_heads = 4;
        s.heads = 2;
        s.rows = 3;
        s.tokens = 5;
        s.options.l2norm_qk = true;
        s.options.gate = GateMode::softplus;
        s.options.beta_is_logit = true;
        const uint64_t seed = fresh_seed();
        SCOPED_TRACE(s.str() + " seed=" + std::to_string(seed));
        VerifyCase c(s, seed, {0, 2, -1}, {0, 0, 3, 0});
        expect_matches_reference(c, tolerance(s));
        if (HasFatalFailure()) return;
      }
}

// More tokens than the kernel stages at once (8): later chunks reuse the staging buffers, and a seed
// row that only a later chunk overwrites must still be read first.
TEST(VerifyCuda, LongDraftsStagedInChunks) {
  KDA_SKIP_WITHOUT_GPU();
  for (int K : {64, 128})
    for (DType io : {DType::f32, DType::bf16}) {
      CaseShape s;
      s.rows = 4;
      s.tokens = 19;
      s.heads = 1;
      s.value_heads = 2;
      s.head_k = s.head_v = K;
      s.slots = 5;
      s.scratch_steps = 20;
      s.io = io;
      s.options.l2norm_qk = true;
      s.options.gate = GateMode::softplus;
      s.options.beta_is_logit = true;
      const uint64_t seed = fresh_seed();
      SCOPED_TRACE(s.str() + " seed=" + std::to_string(seed));
      // Slot 3 seeds from the row token 0 overwrites, slot 4 from the one token 17 (third chunk) does.
      VerifyCase c(s, seed, {1, 3, 4, -1}, {0, 0, 0, 1, 18});
      expect_matches_reference(c, tolerance(s));
      if (HasFatalFailure()) return;
    }
}

// A batch spread over many blocks: 16 rows (3 padded at the end), 8 value heads over 2 query heads,
// seeds from the pool and from every scratch step.
TEST(VerifyCuda, ManyRowsAndHeads) {
  KDA_SKIP_WITHOUT_GPU();
  for (int K : {64, 128}) {
    CaseShape s;
    s.rows = 16;
    s.tokens = 4;
    s.heads = 2;
    s.value_heads = 8;
    s.head_k = s.head_v = K;
    s.slots = 20;
    s.scratch_steps = 6;
    s.options.l2norm_qk = true;
    s.options.gate = GateMode::lower_bound;
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(s.str() + " seed=" + std::to_string(seed));
    std::mt19937_64 rng(seed);
    std::vector<int32_t> slots(20);
    for (int i = 0; i < 20; ++i) slots[size_t(i)] = i;
    std::shuffle(slots.begin(), slots.end(), rng);
    slots.resize(16);
    for (int n = 13; n < 16; ++n) slots[size_t(n)] = -1;
    std::vector<int32_t> accept(20);
    for (auto& a : accept) a = int32_t(rng() % uint64_t(s.scratch_steps + 1));
    VerifyCase c(s, seed, slots, accept);
    expect_matches_reference(c, 1e-5);
    if (HasFatalFailure()) return;
  }
}

// One T-token verify and T single-token verifies, each seeded from the previous post-state, run the
// same arithmetic: outputs and post-states agree bitwise (what every mode of SPEC §3 relies on).
TEST(VerifyCuda, TTokensEqualTSingleTokenVerifiesBitwise) {
  KDA_SKIP_WITHOUT_GPU();
  for (int K : {64, 128})
    for (DType io : {DType::f32, DType::bf16}) {
      CaseShape s;
      s.rows = 1;
      s.tokens = 6;
      s.heads = 1;
      s.value_heads = 2;
      s.head_k = s.head_v = K;
      s.io = io;
      s.options.l2norm_qk = true;
      s.options.gate = GateMode::softplus;
      s.options.beta_is_logit = true;
      const uint64_t seed = fresh_seed();
      SCOPED_TRACE(s.str() + " seed=" + std::to_string(seed));
      VerifyCase whole(s, seed, {2}, {0, 0, 0, 0});
      VerifyCase steps(s, seed, {2}, {0, 0, 0, 0});
      DeviceCase dw(whole);
      run_on_device(whole, dw, dw.params(whole));
      if (HasFatalFailure()) return;

      DeviceCase ds(steps);
      for (int t = 0; t < s.tokens; ++t) {
        VerifyParams p = ds.params(steps);
        select_token(p, t);
        DeviceBuffer d_index(single_token_indices(2, s.scratch_steps, t));
        p.seed_pool = d_index.as<int32_t>();
        p.seed_scratch = d_index.as<int32_t>() + 1;
        p.write_row = d_index.as<int32_t>() + 2;
        run_on_device(steps, ds, p);
        if (HasFatalFailure()) return;
      }
      EXPECT_EQ(first_difference(whole.o.bytes, steps.o.bytes), -1) << "output byte";
      EXPECT_EQ(first_difference(whole.scratch.bytes, steps.scratch.bytes), -1) << "scratch byte";
    }
}

// The same launch twice gives the same bits: nothing depends on scheduling.
TEST(VerifyCuda, RepeatableBitwise) {
  KDA_SKIP_WITHOUT_GPU();
  CaseShape s;
  s.rows = 3;
  s.tokens = 8;
  s.heads = 2;
  s.value_heads = 4;
  s.head_k = s.head_v = 128;
  s.options.l2norm_qk = true;
  s.options.gate = GateMode::softplus;
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(s.str() + " seed=" + std::to_string(seed));
  VerifyCase first(s, seed, {0, 1, 3}, {0, 2, 0, 8});
  VerifyCase second(s, seed, {0, 1, 3}, {0, 2, 0, 8});
  DeviceCase d1(first), d2(second);
  run_on_device(first, d1, d1.params(first));
  run_on_device(second, d2, d2.params(second));
  EXPECT_EQ(first_difference(first.o.bytes, second.o.bytes), -1) << "output byte";
  EXPECT_EQ(first_difference(first.scratch.bytes, second.scratch.bytes), -1) << "scratch byte";
}

// Head dims without a kernel are refused before anything is enqueued (no device needed to check).
TEST(VerifyCuda, UnsupportedHeadDimsAreRefused) {
  EXPECT_TRUE(verify_cuda_supports(64, 64));
  EXPECT_TRUE(verify_cuda_supports(128, 128));
  for (const auto& [K, V] :
       std::vector<std::pair<int32_t, int32_t>>{{96, 96}, {128, 64}, {64, 128}, {256, 256}, {0, 0}}) {
    EXPECT_FALSE(verify_cuda_supports(K, V)) << "K=" << K << " V=" << V;
    VerifyParams p;
    p.rows = 1;
    p.tokens = 1;
    p.heads = p.value_heads = 1;
    p.head_k = K;
    p.head_v = V;
    try {
      (void)launch_verify(p, nullptr);
      ADD_FAILURE() << "K=" << K << " V=" << V << " was launched";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.argument(), "head_k");
      EXPECT_NE(std::string(e.what()).find("head_k = " + std::to_string(K)), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace kdagraph::test
