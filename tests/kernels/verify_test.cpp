// docs/math.md, docs/modes.md: the T-token verify on the program's runner (tests/common/runner.h [TAG_RUNNERS]: the CPU
// backend, the CUDA kernels on the SIMT executor, the GPU) against an fp64 reference and, off the CPU,
// against the CPU backend; closed forms and a hand-worked case; the bitwise identity of one T-token
// verify with T single-token verifies; what only the device sees, recorded; what the launchers refuse.
//
// Sized by runner (Matrix): the CPU and the GPU run every option set of every case. The executor runs the
// arithmetic at K = 64 (three option sets a case, rotated so that the sweep sees all 48) and the K = 128
// tiles on the token counts that change their staging (1, a chunk of 8, one past it); where its lanes are
// OS threads (ThreadSanitizer), one case of each head dim, every barrier of the staging included.
#include <gtest/gtest.h>

#include <functional>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kdagraph/error.hpp"
#include "kernels/verify.h"
#include "tests/common/runner.h"
#include "tests/common/verify_case.h"
#include "tests/common/verify_runs.h"

namespace kdagraph::test {
namespace {

using SweepParam = std::tuple<int /*K*/, int /*T*/, int /*G*/>;

// How many of the 48 option sets of docs/math.md case (K, T, G) runs on this runner; 0: not instantiated.
int option_sets(int K, int T, int G) {
  switch (runner().matrix) {
    case Matrix::full: return 48;
    case Matrix::executor: return K == 64 ? 3 : (T == 1 || T == 4 || T == 8 || T == 9) ? 1 : 0;
    case Matrix::thread_lanes: return (K == 64 && T == 9 && G == 2) || (K == 128 && T == 4 && G == 1) ? 1 : 0;
  }
  return 0;
}

class VerifySweep : public ::testing::TestWithParam<SweepParam> {};

// Every option combination of docs/math.md (L2 norm, scale default or given, beta as logit, the three gate
// modes), T = 1 to 9 (9 crosses the kernels' 8-token staging chunk), one or two value heads per query
// head. Rows: a pool seed, a scratch seed at accept 1 (the row token 0 overwrites), a scratch seed at
// accept T (the row the last token overwrites), then one padded row.
TEST_P(VerifySweep, MatchesFp64Reference) {
  KDA_SKIP_WITHOUT_RUNNER();
  const auto [K, T, G] = GetParam();
  const int sets = option_sets(K, T, G), j = (T - 1) * 2 + (G - 1);
  for (int i = 0; i < sets; ++i) {
    const int bits = sets == 48 ? i : (3 * j + i + (K == 128 ? 24 : 0)) % 48;
    CaseShape s = sweep_shape(K, T, G, bits, 4);
    s.scratch_steps = std::max(s.scratch_steps, T);
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(s.str() + " seed=" + std::to_string(seed));
    std::vector<int32_t> accept(5, 0);
    accept[3] = 1;
    accept[4] = T;
    expect_verify_on_runner(s, seed, {1, 3, 4, -1}, accept);
    if (HasFatalFailure()) return;
  }
}

std::vector<SweepParam> sweep_cases() {
  std::vector<SweepParam> out;
  for (int K : {64, 128})
    for (int T = 1; T <= 9; ++T)
      for (int G : {1, 2})
        if (option_sets(K, T, G) > 0) out.emplace_back(K, T, G);
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllOptions, VerifySweep, ::testing::ValuesIn(sweep_cases()),
                         [](const ::testing::TestParamInfo<SweepParam>& p) {
                           return "K" + std::to_string(std::get<0>(p.param)) + "_T" +
                                  std::to_string(std::get<1>(p.param)) + "_G" + std::to_string(std::get<2>(p.param));
                         });

bool thread_lanes() { return runner().matrix == Matrix::thread_lanes; }

// 16-bit inputs and outputs (bf16, f16; with vLLM's fp32 g and beta beside them), bf16 and f16 state
// storage, and both together, at both head dims.
TEST(Verify, SixteenBitWithinTolerance) {
  KDA_SKIP_WITHOUT_RUNNER();
  for (int K : {64, 128})
    for (DType io : {DType::f32, DType::bf16, DType::f16})
      for (DType state : {DType::f32, DType::bf16, DType::f16}) {
        if (io == DType::f32 && state == DType::f32) continue;
        if (runner().kind != RunnerKind::cpu && !verify_cuda_dtypes(io, state)) continue;  // CPU only
        if (thread_lanes() && !(K == 64 && io != DType::f32 && state != DType::f32)) continue;
        CaseShape s;
        s.io = io;
        s.gate_f32 = io != DType::f32 && state == DType::f32;
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
        expect_verify_on_runner(s, seed, {0, 2, -1}, {0, 0, 3, 0});
        if (HasFatalFailure()) return;
      }
}

// docs/low_precision.md: stochastic rounding of the state stores into bf16 and f16, within the 16-bit tolerance of
// fp64; against the CPU backend, whose fp32 sums differ from the kernel's in the last bits, it rounds
// the same elements differently about as rarely as round to nearest does (draws keyed otherwise would
// differ in about half the elements that are not exact); and keyed as it says: another slot counter or
// seed draws other bits, round to nearest differs from it, a slot outside the batch changes nothing.
TEST(Verify, StochasticRoundingIsKeyedAndTheSameOnEveryBackend) {
  KDA_SKIP_WITHOUT_RUNNER();
  for (DType state : {DType::bf16, DType::f16}) {
    CaseShape s;
    s.rows = 3;
    s.tokens = 4;
    s.heads = 1;
    s.value_heads = 2;
    s.head_k = s.head_v = case_head_dim(32);
    s.io = state;  // the CUDA verify's stochastic rounding goes with io of the state's dtype
    s.state = state;
    s.rounding = Rounding::stochastic;
    s.options.l2norm_qk = true;
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(s.str() + " seed=" + std::to_string(seed));
    const std::vector<int32_t> slots = {2, 0, 3}, accepts = {2, 0, 1, 4};
    expect_verify_on_runner(s, seed, slots, accepts);
    if (HasFatalFailure()) return;

    // Elements of the post-states the runner and the CPU backend round differently.
    auto differing = [&](Rounding rounding, std::vector<uint8_t>* runner_scratch) {
      VerifyCase on_runner(s, seed, slots, accepts), cpu(s, seed, slots, accepts);
      on_runner.sh.rounding = cpu.sh.rounding = rounding;
      run_verify(on_runner);
      verify_cpu(cpu.params());
      cpu.sync();
      int64_t count = 0;
      for (size_t i = 0; i + 1 < cpu.scratch.bytes.size(); i += 2)
        count += std::memcmp(&on_runner.scratch.bytes[i], &cpu.scratch.bytes[i], 2) != 0;
      if (runner_scratch != nullptr) *runner_scratch = on_runner.scratch.bytes;
      return count;
    };
    std::vector<uint8_t> base;
    const int64_t stochastic_diff = differing(Rounding::stochastic, &base), nearest_diff = differing(Rounding::nearest, nullptr);
    const int64_t written = int64_t(3) * s.tokens * s.value_heads * s.head_v * s.head_k;
    EXPECT_LE(stochastic_diff, 3 * nearest_diff + written / 200)
        << "of " << written << " elements written; round to nearest differs in " << nearest_diff;

    auto scratch_of = [&](const std::function<void(VerifyCase&)>& change) {
      VerifyCase c(s, seed, slots, accepts);
      change(c);
      run_verify(c);
      return c.scratch.bytes;
    };
    EXPECT_NE(scratch_of([](VerifyCase& c) { c.rounding_counter[2] += 1; }), base) << "a new round draws afresh";
    EXPECT_NE(scratch_of([](VerifyCase& c) { c.rounding_seed[0] ^= 1; }), base) << "a new seed draws afresh";
    EXPECT_NE(scratch_of([](VerifyCase& c) { c.sh.rounding = Rounding::nearest; }), base) << "nearest differs";
    EXPECT_EQ(scratch_of([](VerifyCase& c) { c.rounding_seed[1] ^= 1; }), base) << "slot 1 is not in the batch";
  }
}

// Three staging chunks: later chunks reuse the staging buffers, and a seed row that only the third
// chunk overwrites must still be read first. (Two chunks run in the sweep under OS-thread lanes.)
TEST(Verify, LongDraftsStagedInChunks) {
  KDA_SKIP_WITHOUT_RUNNER();
  if (thread_lanes()) GTEST_SKIP() << "OS-thread lanes: two chunks run in the sweep";
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
      expect_verify_on_runner(s, seed, {1, 3, 4, -1}, {0, 0, 0, 1, 18});
      if (HasFatalFailure()) return;
    }
}

// A batch spread over many blocks: 16 rows (3 padded at the end), 8 value heads over 2 query heads,
// seeds from the pool and from every scratch step.
TEST(Verify, ManyRowsAndHeads) {
  KDA_SKIP_WITHOUT_RUNNER();
  if (thread_lanes()) GTEST_SKIP() << "OS-thread lanes: 832 blocks";
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
    expect_verify_on_runner(s, seed, slots, accept);
    if (HasFatalFailure()) return;
  }
}

// Kimi-Linear-48B at tensor parallel 2 (docs/shapes.md): HV = H = 16, K = V = 128, T = 4, batch 1 and 3.
TEST(Verify, KimiLinearTp2) {
  KDA_SKIP_WITHOUT_RUNNER();
  if (thread_lanes()) GTEST_SKIP() << "OS-thread lanes: 128 blocks a row";
  for (int rows : {1, 3}) {
    CaseShape s;
    s.rows = rows;
    s.tokens = 4;
    s.heads = s.value_heads = 16;
    s.head_k = s.head_v = 128;
    s.slots = 4;
    s.scratch_steps = 4;
    s.io = DType::bf16;
    s.options.l2norm_qk = true;
    s.options.gate = GateMode::softplus;
    s.options.beta_is_logit = true;
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(s.str() + " seed=" + std::to_string(seed));
    const std::vector<int32_t> slots = rows == 1 ? std::vector<int32_t>{2} : std::vector<int32_t>{3, 0, 2};
    expect_verify_on_runner(s, seed, slots, {2, 0, 4, 1});
    if (HasFatalFailure()) return;
  }
}

// One T-token verify and T single-token verifies, each seeded from the previous post-state, run the
// same arithmetic: outputs and post-states agree bitwise (what every mode of docs/modes.md relies on).
TEST(Verify, TTokensEqualTSingleTokenVerifiesBitwise) {
  KDA_SKIP_WITHOUT_RUNNER();
  for (int K : {64, 128})
    for (DType io : {DType::f32, DType::bf16}) {
      if (thread_lanes() && !(K == 64 && io == DType::f32)) continue;
      CaseShape s;
      s.rows = 1;
      s.tokens = 6;
      s.heads = 1;
      s.value_heads = 2;
      s.head_k = s.head_v = K;
      s.io = io;
      s.options.l2norm_qk = true;
      s.options.gate = K == 64 ? GateMode::lower_bound : GateMode::softplus;
      s.options.beta_is_logit = true;
      const uint64_t seed = fresh_seed();
      SCOPED_TRACE(s.str() + " seed=" + std::to_string(seed));
      VerifyCase whole(s, seed, {2}, {0, 0, 0, 0});
      VerifyCase steps(s, seed, {2}, {0, 0, 0, 0});
      run_verify(whole);
      for (int t = 0; t < s.tokens; ++t) {
        Placement at(runner().memory());
        VerifyParams p = steps.params(at);
        select_token(p, t);
        const std::vector<int32_t> index = single_token_indices(2, s.scratch_steps, t);
        const int32_t* placed = at.in(index);
        p.seed_pool = placed;
        p.seed_scratch = placed + 1;
        p.write_row = placed + 2;
        run_verify(steps, at, p);
      }
      EXPECT_EQ(first_difference(whole.o.bytes, steps.o.bytes), -1) << "output byte";
      EXPECT_EQ(first_difference(whole.scratch.bytes, steps.scratch.bytes), -1) << "scratch byte";
    }
}

// The same launch four times gives the same bits: nothing depends on how blocks and threads are
// scheduled (on the executor each launch takes another of its four schedules of a block's threads).
TEST(Verify, SameBitsEveryRun) {
  KDA_SKIP_WITHOUT_RUNNER();
  if (thread_lanes()) GTEST_SKIP() << "OS-thread lanes have no schedule to vary";
  CaseShape s;
  s.rows = 3;
  s.tokens = 9;
  s.heads = 2;
  s.value_heads = 4;
  s.head_k = s.head_v = 128;
  s.scratch_steps = 9;
  s.options.l2norm_qk = true;
  s.options.gate = GateMode::softplus;
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(s.str() + " seed=" + std::to_string(seed));
  VerifyCase first(s, seed, {0, 1, 3}, {0, 2, 0, 9});
  run_verify(first);
  for (int run = 1; run < 4; ++run) {
    VerifyCase again(s, seed, {0, 1, 3}, {0, 2, 0, 9});
    run_verify(again);
    EXPECT_EQ(first_difference(first.o.bytes, again.o.bytes), -1) << "output byte, run " << run;
    EXPECT_EQ(first_difference(first.scratch.bytes, again.scratch.bytes), -1) << "scratch byte, run " << run;
  }
}

// A lane group writes its rows' outputs as one vector where the output buffer is 16-byte aligned, one by
// one where it is not (a caller's view into a larger tensor): the same bytes either way.
TEST(Verify, OutputsOfAnyAlignmentAreTheSameBytes) {
  KDA_SKIP_WITHOUT_RUNNER();
  for (DType io : {DType::f32, DType::bf16}) {
    CaseShape s;
    s.rows = 3;
    s.tokens = 3;
    s.heads = 1;
    s.value_heads = 2;
    s.head_k = s.head_v = 128;
    s.io = io;
    s.options.l2norm_qk = true;
    s.options.gate = GateMode::softplus;
    SCOPED_TRACE(to_string(io));
    VerifyCase c(s, fresh_seed(), {0, 2, -1}, {0, 0, 0, 0});  // pool seeds: two runs start alike
    const size_t bytes = c.o.bytes.size(), es = dtype_size(io);
    std::vector<uint8_t> aligned(bytes + 16, 0xff), shifted(bytes + 16, 0xff);
    {
      Placement at(runner().memory());
      VerifyParams p = c.params(at);
      p.o = at.out(aligned);
      ASSERT_EQ(reinterpret_cast<uintptr_t>(p.o) % 16, 0u);
      run_op<VerifyOp>(p);
      p.o = at.out(shifted) + es;  // aligned to the element, not to 16 bytes
      run_op<VerifyOp>(p);
      at.fetch();
    }
    const std::vector<uint8_t> a(aligned.begin(), aligned.begin() + ptrdiff_t(bytes));
    const std::vector<uint8_t> b(shifted.begin() + ptrdiff_t(es), shifted.begin() + ptrdiff_t(es + bytes));
    EXPECT_EQ(first_difference(b, a), -1) << "outputs at this byte";
    EXPECT_NE(a, std::vector<uint8_t>(bytes, 0xff)) << "no output written";
  }
}

// docs/python.md "What engines really pass", each against the compact call with the same values, bitwise (the
// fp64 sweeps check that one): q, k and v as strided views of one fused projection [N, T, C + pad]
// (SGLang splits its qkv), read in place; gate parameters per query/key head (FlashInfer's GQA form,
// A_log [H], dt_bias [H K]) against per value head copies; absent ones against zeros; and
// allow_neg_eigval's beta = 2 sigmoid(x) against that beta given as a value (fp32 io, where both are
// the same floats); at 16-bit io, g and beta in fp32 (gate_f32) against the same values in the io dtype.
TEST(Verify, EnginesCallFormsGiveTheCompactResults) {
  KDA_SKIP_WITHOUT_RUNNER();
  for (DType io : {DType::f32, DType::bf16, DType::f16}) {
    CaseShape s;
    s.rows = 3;
    s.tokens = 3;
    s.heads = 2;
    s.value_heads = 4;  // G = 2
    s.head_k = s.head_v = case_head_dim(32);
    s.io = io;
    s.options.l2norm_qk = true;
    s.options.gate = GateMode::softplus;
    s.options.beta_is_logit = true;
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(std::string(to_string(io)) + " seed=" + std::to_string(seed));
    const int32_t N = s.rows, T = s.tokens, H = s.heads, HV = s.value_heads, K = s.head_k, V = s.head_v;
    const std::vector<int32_t> slots = {0, 2, 3}, accepts = {0, 3, 0, 1};
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> d(-0.5f, 0.5f);
    std::vector<float> A_q(static_cast<size_t>(H)), dt_q(static_cast<size_t>(H * K));  // per query/key head
    for (float& x : A_q) x = d(rng);
    for (float& x : dt_q) x = d(rng);

    // The compact call, with the query heads' gate copied to each of their value heads.
    VerifyCase compact(s, seed, slots, accepts);
    for (int32_t h = 0; h < HV; ++h) {
      compact.A_log[size_t(h)] = A_q[size_t(h / (HV / H))];
      for (int32_t i = 0; i < K; ++i) compact.dt_bias[size_t(h) * K + i] = dt_q[size_t(h / (HV / H)) * K + i];
    }
    run_verify(compact);

    // The same values as views of one fused projection with 8 elements of padding a token.
    VerifyCase strided(s, seed, slots, accepts);
    const int64_t es = int64_t(dtype_size(io)), C = 2 * H * K + HV * V + 16 / es * 2;
    std::vector<uint8_t> fused(size_t(N * T * C * es), 0xff);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t t = 0; t < T; ++t) {
        uint8_t* row = fused.data() + (n * T + t) * C * es;
        const int64_t qk = (n * T + t) * H * K * es, vv = (n * T + t) * HV * V * es;
        std::memcpy(row, strided.q.bytes.data() + qk, size_t(H * K * es));
        std::memcpy(row + H * K * es, strided.k.bytes.data() + qk, size_t(H * K * es));
        std::memcpy(row + 2 * H * K * es, strided.v.bytes.data() + vv, size_t(HV * V * es));
      }
    {
      Placement at(runner().memory());
      VerifyParams p = strided.params(at);
      const uint8_t* base = at.in(fused);
      p.q = base;
      p.k = base + H * K * es;
      p.v = base + 2 * H * K * es;
      p.q_strides = p.k_strides = InputStrides{T * C, C, K};
      p.v_strides = InputStrides{T * C, C, V};
      p.A_log = at.in(A_q);
      p.dt_bias = at.in(dt_q);
      p.gate_heads = H;
      run_op<VerifyOp>(p);
      at.fetch();
    }
    strided.sync();
    EXPECT_EQ(first_difference(strided.o.bytes, compact.o.bytes), -1) << "strided views: outputs at this byte";
    EXPECT_EQ(first_difference(strided.scratch.bytes, compact.scratch.bytes), -1) << "strided views: scratch";

    // Absent gate parameters are zeros.
    VerifyCase zeros(s, seed, slots, accepts), absent(s, seed, slots, accepts);
    std::fill(zeros.A_log.begin(), zeros.A_log.end(), 0.0f);
    std::fill(zeros.dt_bias.begin(), zeros.dt_bias.end(), 0.0f);
    run_verify(zeros);
    {
      Placement at(runner().memory());
      VerifyParams p = absent.params(at);
      p.A_log = nullptr;
      p.dt_bias = nullptr;
      run_op<VerifyOp>(p);
      at.fetch();
    }
    absent.sync();
    EXPECT_EQ(first_difference(absent.o.bytes, zeros.o.bytes), -1) << "absent gate parameters: outputs";

    if (io != DType::f32) {
      // g and beta in fp32 beside 16-bit q, k, v (vLLM's decode), holding the io dtype's values: the same bits.
      VerifyCase gates(s, seed, slots, accepts), plain(s, seed, slots, accepts);
      gates.sh.gate_f32 = true;
      gates.g.assign(DType::f32, gates.g.values);
      gates.beta.assign(DType::f32, gates.beta.values);
      run_verify(gates);
      run_verify(plain);
      EXPECT_EQ(first_difference(gates.o.bytes, plain.o.bytes), -1) << "fp32 gates: outputs at this byte";
      EXPECT_EQ(first_difference(gates.scratch.bytes, plain.scratch.bytes), -1) << "fp32 gates: scratch";
      continue;
    }
    // allow_neg_eigval: beta = 2 sigmoid(x) in the kernel, or given as that value.
    VerifyCase logits(s, seed, slots, accepts), values(s, seed, slots, accepts);
    logits.sh.options.beta_neg_eigval = true;
    values.sh.options.beta_is_logit = false;
    std::vector<float> betas(values.beta.size());
    for (size_t i = 0; i < betas.size(); ++i) betas[i] = 2.0f * math::sigmoid(values.beta.at(i));
    values.beta.assign(DType::f32, betas);
    run_verify(logits);
    run_verify(values);
    EXPECT_EQ(first_difference(logits.o.bytes, values.o.bytes), -1) << "allow_neg_eigval: outputs";
    EXPECT_EQ(first_difference(logits.scratch.bytes, values.scratch.bytes), -1) << "allow_neg_eigval: scratch";
    EXPECT_TRUE(std::any_of(betas.begin(), betas.end(), [](float b) { return b > 1.0f; })) << "betas above 1 tried";
  }
}

// With beta = 0 the state only decays: S_T = exp(sum_t g_t) * S_0 per key channel, and o_t = S_t q_t.
TEST(Verify, ZeroBetaOnlyDecays) {
  KDA_SKIP_WITHOUT_RUNNER();
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
  run_verify(c);
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
TEST(Verify, UnitKeyReplacesOneColumn) {
  KDA_SKIP_WITHOUT_RUNNER();
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
  run_verify(c);
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

// K = V = 2, T = 2, g = 0, no scale; every number below is worked out by hand from docs/math.md and exact in
// binary floating point.
//   S0 = [[1, 2], [3, 4]]                     (S[j][i], rows j = value channel)
//   t1: k = (1, 0), v = (2, 1), beta = 1/2, q = (1, 1)
//       p = (1, 3); u = (0.5, -1); S1 = [[1.5, 2], [2, 4]]; o1 = (3.5, 6)
//   t2: k = (0, 1), v = (1, 2), beta = 1/4, q = (2, 0)
//       p = (2, 4); u = (-0.25, -0.5); S2 = [[1.5, 1.75], [2, 3.5]]; o2 = (3, 4)
TEST(Verify, HandWorkedTwoByTwo) {
  KDA_SKIP_WITHOUT_RUNNER();
  if (runner().kind != RunnerKind::cpu) GTEST_SKIP() << "K = V = 2: the kernels are built for 64 and 128";
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
  run_verify(c);
  EXPECT_EQ(c.o.values, (std::vector<float>{3.5f, 6.0f, 3.0f, 4.0f}));
  EXPECT_EQ(c.scratch.values, (std::vector<float>{1.5f, 2.0f, 2.0f, 4.0f, 1.5f, 1.75f, 2.0f, 3.5f}));
}

// docs/errors.md, docs/ops.md: a layer table the host did not check (on CUDA it lives in device memory) with an
// invalid entry, null or misaligned: the kernels' shared seed function records it once per real row
// and treats those rows as padding, so nothing is read or written through the bad base.
TEST(Verify, AnInvalidLayerTableEntryIsRecordedAndItsRowsArePadding) {
  KDA_SKIP_WITHOUT_RUNNER();
  CaseShape s;
  s.value_heads = 2;
  s.heads = 1;
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  VerifyCase c(s, seed, {1, 0, -1}, {0, 0, 0, 0});  // both real rows seed from the pool
  const std::vector<uint8_t> scratch_before = c.scratch.bytes;
  for (bool null_entry : {true, false}) {
    SCOPED_TRACE(null_entry ? "null entry" : "misaligned entry");
    c.o.poison();
    Placement at(runner().memory());
    VerifyParams p = c.params(at);
    const std::vector<void*> table = {null_entry ? nullptr : static_cast<char*>(p.pool.base) + 4};
    p.pool = state_view_table(const_cast<void* const*>(at.in(table)), s.state, 1, p.pool.rows, p.pool.row_stride);
    std::vector<DeviceErrorWord> errors(1);
    p.errors = at.out(errors);
    run_verify(c, at, p);
    EXPECT_EQ(DeviceErrorCode(errors[0].code), DeviceErrorCode::layer_base_invalid);
    EXPECT_EQ(errors[0].count, 2u) << "once per real row";
    for (size_t i = 0; i < c.o.size(); ++i) ASSERT_EQ(c.o.values[i], 0.0f) << "output " << i;
    EXPECT_EQ(c.scratch.bytes, scratch_before);
  }
}

// Head dims without a kernel are refused by the launcher before anything is enqueued, naming the argument
// (no device needed to check). The CPU backend takes any head dim.
TEST(Verify, HeadDimsWithoutAKernelAreRefused) {
  if (runner().kind == RunnerKind::cpu) GTEST_SKIP() << "the CPU backend takes any head dim";
#if defined(KDAGRAPH_WITH_CUDA) || defined(KDAGRAPH_SIMT)  // a build without launchers has the CPU runner only
  const uint64_t launches = runner_launches();
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
      run_op<VerifyOp>(p);
      ADD_FAILURE() << "K=" << K << " V=" << V << " was launched";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.argument(), "head_k");
      EXPECT_NE(std::string(e.what()).find("head_k = " + std::to_string(K)), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(runner_launches(), launches) << "a refused launch reached the executor";
#endif
}

}  // namespace
}  // namespace kdagraph::test
