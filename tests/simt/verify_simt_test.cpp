// SPEC §1, §3: the CUDA verify kernel's own source on the SIMT executor, on the cases of the GPU tests
// (tests/kernels/verify_cuda_test.cpp), each checked against the fp64 reference and the CPU backend
// within the kernels' tolerances (fp32 1e-5, bf16 1e-2, relative).
//
// Sized for fiber lanes. Where lanes are OS threads (the ThreadSanitizer build), a sweep runs the
// cases marked for it and reports the others as skipped: there a K = 128, T = 9 case takes ~14 s.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kdagraph/error.hpp"
#include "tests/simt/simt_case.h"

namespace kdagraph::test {
namespace {

#define KDA_SKIP_ON_THREAD_LANES(why)                                    \
  do {                                                                   \
    if (threads_lanes()) GTEST_SKIP() << "OS-thread lanes: " << (why);   \
  } while (0)

// The rows of every sweep case: a pool seed, a scratch seed at accept 1 (the row token 0 overwrites),
// a scratch seed at accept T (the row the last token overwrites), then one padded row.
void expect_sweep_case(int K, int T, int G, int option_bits) {
  CaseShape s = sweep_shape(K, T, G, option_bits, 4);
  s.scratch_steps = std::max(s.scratch_steps, T);
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(s.str() + " seed=" + std::to_string(seed));
  std::vector<int32_t> accept(5, 0);
  accept[3] = 1;
  accept[4] = T;
  expect_simt_matches(s, seed, {1, 3, 4, -1}, accept);
}

using SweepParam = std::tuple<int /*K*/, int /*T*/, int /*G*/>;

class VerifySimtSweep : public ::testing::TestWithParam<SweepParam> {};

// T = 1..9 crosses the 8-token staging chunk. Each (K, T, G) runs three of the 48 option combinations
// of SPEC §1 (L2 norm, default or given scale, beta as logit, three gate modes), so that over T and G
// each head dim sees all of them.
TEST_P(VerifySimtSweep, MatchesReferenceAndCpu) {
  const auto [K, T, G] = GetParam();
  // Under OS threads: two chunks at K = 64, one at K = 128, with GVA once each.
  if ((K == 64 && !(T == 9 && G == 2)) || (K == 128 && !(T == 4 && G == 1)))
    KDA_SKIP_ON_THREAD_LANES("this (K, T, G) runs in the fiber builds");
  const int j = (T - 1) * 2 + (G - 1), option_sets = threads_lanes() ? 1 : 3;
  note_subset(option_sets, 3);
  for (int i = 0; i < option_sets; ++i) {
    expect_sweep_case(K, T, G, (3 * j + i + (K == 128 ? 24 : 0)) % 48);
    if (HasFatalFailure()) return;
  }
}

std::vector<SweepParam> sweep_cases() {
  std::vector<SweepParam> out;
  for (int K : {64, 128})
    for (int T = 1; T <= 9; ++T)
      for (int G : {1, 2}) out.emplace_back(K, T, G);
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllOptions, VerifySimtSweep, ::testing::ValuesIn(sweep_cases()),
                         [](const ::testing::TestParamInfo<SweepParam>& p) {
                           return "K" + std::to_string(std::get<0>(p.param)) + "_T" + std::to_string(std::get<1>(p.param)) +
                                  "_G" + std::to_string(std::get<2>(p.param));
                         });

// bf16 inputs and outputs, bf16 state storage, and both together, at both head dims.
TEST(VerifySimt, Bf16WithinTolerance) {
  note_subset(threads_lanes() ? 1 : 6, 6);
  for (int K : {64, 128})
    for (DType io : {DType::f32, DType::bf16})
      for (DType state : {DType::f32, DType::bf16}) {
        if (io == DType::f32 && state == DType::f32) continue;
        if (threads_lanes() && !(K == 64 && io == DType::bf16 && state == DType::bf16)) continue;
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
        expect_simt_matches(s, seed, {0, 2, -1}, {0, 0, 3, 0});
        if (HasFatalFailure()) return;
      }
}

// Three staging chunks: later chunks reuse the buffers, and a seed row that only the third chunk
// overwrites must still be read first.
TEST(VerifySimt, LongDraftsStagedInChunks) {
  KDA_SKIP_ON_THREAD_LANES("two chunks run in the sweep there");
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
      expect_simt_matches(s, seed, {1, 3, 4, -1}, {0, 0, 0, 1, 18});
      if (HasFatalFailure()) return;
    }
}

// 16 rows (3 padded at the end), 8 value heads over 2 query heads, seeds from the pool and every
// scratch step.
TEST(VerifySimt, ManyRowsAndHeads) {
  KDA_SKIP_ON_THREAD_LANES("832 blocks");
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
    expect_simt_matches(s, seed, slots, accept);
    if (HasFatalFailure()) return;
  }
}

// Kimi-Linear-48B at tensor parallel 2 (SPEC §7): HV = H = 16, K = V = 128, T = 4, batch 1 and 3.
TEST(VerifySimt, KimiLinearTp2) {
  KDA_SKIP_ON_THREAD_LANES("128 blocks per row");
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
    expect_simt_matches(s, seed, slots, {2, 0, 4, 1});
    if (HasFatalFailure()) return;
  }
}

// One T-token verify and T single-token verifies, each seeded from the previous post-state, agree
// bitwise (what every mode of SPEC §3 relies on).
TEST(VerifySimt, TTokensEqualTSingleTokenVerifiesBitwise) {
  note_subset(threads_lanes() ? 1 : 4, 4);
  for (int K : {64, 128})
    for (DType io : {DType::f32, DType::bf16}) {
      if (threads_lanes() && !(K == 64 && io == DType::f32)) continue;
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
      run_simt(whole, whole.params());
      if (HasFatalFailure()) return;
      for (int t = 0; t < s.tokens; ++t) {
        VerifyParams p = steps.params();
        select_token(p, t);
        const std::vector<int32_t> index = single_token_indices(2, s.scratch_steps, t);
        p.seed_pool = &index[0];
        p.seed_scratch = &index[1];
        p.write_row = &index[2];
        run_simt(steps, p);
        if (HasFatalFailure()) return;
      }
      EXPECT_EQ(first_difference(whole.o.bytes, steps.o.bytes), -1) << "output byte";
      EXPECT_EQ(first_difference(whole.scratch.bytes, steps.scratch.bytes), -1) << "scratch byte";
    }
}

// Every schedule of the threads of a block, and every order of the blocks, gives the same bits.
TEST(VerifySimt, SameBitsUnderEverySchedule) {
  KDA_SKIP_ON_THREAD_LANES("it compares fiber schedules");
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
  {
    simt::ScopedOptions opt({simt::Lanes::fibers, simt::Schedule::ascending});
    run_simt(first, first.params());
  }
  for (simt::Schedule sched : {simt::Schedule::descending, simt::Schedule::round_robin, simt::Schedule::random}) {
    simt::ScopedOptions opt({simt::Lanes::fibers, sched});
    VerifyCase again(s, seed, {0, 1, 3}, {0, 2, 0, 9});
    run_simt(again, again.params());
    EXPECT_EQ(first_difference(first.o.bytes, again.o.bytes), -1) << "output byte, " << to_string(sched);
    EXPECT_EQ(first_difference(first.scratch.bytes, again.scratch.bytes), -1) << "scratch byte, " << to_string(sched);
  }
}

// Head dims without a kernel are refused, naming the argument, before anything runs.
TEST(VerifySimt, UnsupportedHeadDimsAreRefused) {
  const uint64_t launches = simt::launches();
  for (const auto& [K, V] : std::vector<std::pair<int32_t, int32_t>>{{96, 96}, {128, 64}, {64, 128}, {256, 256}}) {
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
    }
  }
  EXPECT_EQ(simt::launches(), launches) << "a refused launch reached the executor";
}

// SPEC §12: the token-tree kernel (kernels/verify_tree.cu) against the fp64 reference and the CPU backend,
// over trees of up to 16 tokens (two staging chunks: a branch may start from a state kept in the chunk
// before), both head dims and state dtypes; rows seeded from the pool and from the scratch row token 0
// overwrites, and a padded row. Row 0's tree keeps every shared-memory slot busy at once (widest_tree),
// the others are random.
TEST(VerifyTreeSimt, MatchesReferenceAndCpu) {
  int run = 0, all = 0;
  for (int K : {64, 128})
    for (int T : {6, 16})
      for (DType state : {DType::f32, DType::bf16}) {
        ++all;
        if (threads_lanes() && !(K == 64 && T == 16 && state == DType::bf16)) continue;
        ++run;
        CaseShape s = sweep_shape(K, T, 2, (K + 3 * T + int(state)) % 48, 3);
        s.state = state;
        s.scratch_steps = 16;
        const uint64_t seed = fresh_seed();
        SCOPED_TRACE(s.str() + " seed=" + std::to_string(seed));
        std::mt19937_64 rng(seed);
        std::vector<int32_t> parent;
        for (int n = 0; n < s.rows; ++n) {
          const std::vector<int32_t> tree = n == 0 ? widest_tree(T) : random_tree(rng, T);
          parent.insert(parent.end(), tree.begin(), tree.end());
        }
        std::vector<int32_t> accept(5, 0);
        accept[3] = 1;
        expect_simt_matches(s, seed, {1, 3, -1}, accept, parent);
        if (HasFatalFailure()) return;
      }
  note_subset(run, all);
}

// A chain given as a tree runs the tree kernel, which keeps and reloads nothing: bitwise the chain kernel.
TEST(VerifyTreeSimt, AChainGivenAsATreeIsBitwiseTheChain) {
  for (DType state : {DType::f32, DType::bf16}) {
    CaseShape s = sweep_shape(64, 11, 1, 21, 2);
    s.state = state;
    s.scratch_steps = 11;
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(s.str() + " seed=" + std::to_string(seed));
    VerifyCase chain(s, seed, {0, 2}, {0, 0, 5, 0, 0}), tree(s, seed, {0, 2}, {0, 0, 5, 0, 0});
    for (int n = 0; n < s.rows; ++n)
      for (int t = 0; t < s.tokens; ++t) tree.parent.push_back(t - 1);
    run_simt(chain, chain.params());
    run_simt(tree, tree.params());
    EXPECT_EQ(first_difference(tree.o.bytes, chain.o.bytes), -1);
    EXPECT_EQ(first_difference(tree.scratch.bytes, chain.scratch.bytes), -1);
  }
}

// More tokens than the kernel keeps branch states for are refused by name before anything runs.
TEST(VerifyTreeSimt, TreesLargerThanTheKernelKeepsAreRefused) {
  const uint64_t launches = simt::launches();
  CaseShape s = sweep_shape(64, kMaxCudaTreeTokens + 1, 1, 0, 1);
  s.scratch_steps = s.tokens;
  VerifyCase c(s, fresh_seed(), {0}, {0, 0, 0, 0, 0});
  for (int t = 0; t < s.tokens; ++t) c.parent.push_back(t / 2 - 1);
  try {
    (void)launch_verify(c.params(), nullptr);
    ADD_FAILURE() << "T = " << s.tokens << " was launched";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "tokens");
  }
  EXPECT_EQ(simt::launches(), launches) << "a refused launch reached the executor";
}

}  // namespace
}  // namespace kdagraph::test
