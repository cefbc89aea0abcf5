// docs/trees.md: the verify of token trees on the program's runner (tests/common/runner.h [TAG_RUNNERS])
// against the fp64 reference and, off the CPU, the CPU backend; a chain given as a tree bitwise the chain;
// every root-to-node path of a tree bitwise the chain of its tokens; parents outside their range read as
// the chain's and recorded; trees larger than the kernel keeps, refused.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kdagraph/error.hpp"
#include "kernels/tree.h"
#include "kernels/verify.h"
#include "tests/common/runner.h"
#include "tests/common/verify_case.h"
#include "tests/common/verify_runs.h"

namespace kdagraph::test {
namespace {

bool thread_lanes() { return runner().matrix == Matrix::thread_lanes; }

// Row 0's tree keeps every branch slot busy at once (widest_tree), the others are random.
std::vector<int32_t> trees(uint64_t seed, int32_t rows, int32_t T) {
  std::mt19937_64 rng(seed ^ 0x7eedu);
  std::vector<int32_t> out;
  for (int32_t n = 0; n < rows; ++n) {
    const std::vector<int32_t> tree = n == 0 ? widest_tree(T) : random_tree(rng, T);
    out.insert(out.end(), tree.begin(), tree.end());
  }
  return out;
}

// Rows seeded from the pool, from scratch (the row token 0 overwrites) and padding, over trees of up to
// 16 tokens (two staging chunks of the CUDA kernel: a branch may start from a state kept in the chunk
// before), both head dims and state dtypes. The executor runs 5 and 16 tokens, OS-thread lanes one case.
TEST(VerifyTree, MatchesReference) {
  KDA_SKIP_WITHOUT_RUNNER();
  int bits = 0;
  for (int K : {64, 128})
    for (int T : {2, 5, 9, 16})
      for (DType state : {DType::f32, DType::bf16}) {
        CaseShape s = sweep_shape(K, T, 1 + bits % 2, bits % 48, 3);
        bits += 7;
        if (runner().matrix == Matrix::executor && T != 5 && T != 16) continue;
        if (thread_lanes() && !(K == 64 && T == 16 && state == DType::bf16)) continue;
        s.state = state;
        s.scratch_steps = 16;
        const uint64_t seed = fresh_seed();
        SCOPED_TRACE(s.str() + " seed=" + std::to_string(seed));
        std::vector<int32_t> accept(5, 0);
        accept[3] = 1;
        expect_verify_on_runner(s, seed, {1, 3, -1}, accept, trees(seed, s.rows, T));
        if (HasFatalFailure()) return;
      }
}

// A chain given as a tree (parent[t] = t - 1) keeps nothing aside and runs exactly as the chain.
TEST(VerifyTree, AChainGivenAsATreeIsBitwiseTheChain) {
  KDA_SKIP_WITHOUT_RUNNER();
  for (DType state : {DType::f32, DType::bf16}) {
    CaseShape s = sweep_shape(64, 11, 2, 17, 2);
    s.state = state;
    s.scratch_steps = 11;
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(s.str() + " seed=" + std::to_string(seed));
    VerifyCase chain(s, seed, {0, 2}, {0, 0, 5, 0, 0}), tree(s, seed, {0, 2}, {0, 0, 5, 0, 0});
    for (int n = 0; n < s.rows; ++n)
      for (int t = 0; t < s.tokens; ++t) tree.parent.push_back(t - 1);
    run_verify(chain);
    run_verify(tree);
    EXPECT_EQ(first_difference(tree.o.bytes, chain.o.bytes), -1);
    EXPECT_EQ(first_difference(tree.scratch.bytes, chain.scratch.bytes), -1);
  }
}

// The tokens `path` of a case's single row, as the inputs of a chain of those tokens.
Tensor take_tokens(const Tensor& x, size_t token_elems, const std::vector<int32_t>& path) {
  std::vector<float> values;
  for (int32_t t : path)
    values.insert(values.end(), x.values.begin() + ptrdiff_t(size_t(t) * token_elems),
                  x.values.begin() + ptrdiff_t(size_t(t + 1) * token_elems));
  Tensor out;
  out.assign(x.dtype, values);
  return out;
}

// Each token's output and post-state in a tree are bitwise those of the chain of its root-to-node path
// (the same seed, the path's tokens in order): a branch starts from its parent's exact fp32 state, not
// from the state as stored. What makes replay (which runs the accepted path as a chain) agree bitwise
// with fused accept.
TEST(VerifyTree, EveryPathIsBitwiseTheChainOfItsTokens) {
  KDA_SKIP_WITHOUT_RUNNER();
  if (thread_lanes()) GTEST_SKIP() << "OS-thread lanes: a launch a node; the reference case runs trees there";
  for (DType state : {DType::f32, DType::bf16}) {
    CaseShape s = sweep_shape(64, 10, 1, 35, 1);
    s.state = state;
    s.scratch_steps = 10;
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(s.str() + " seed=" + std::to_string(seed));
    VerifyCase tree(s, seed, {2}, {0, 0, 0, 0, 0});
    tree.parent = trees(seed, 1, s.tokens);
    const std::vector<uint8_t> pool = tree.pool.bytes;
    run_verify(tree);
    const size_t HK = size_t(s.heads) * s.head_k, HVV = size_t(s.value_heads) * s.head_v;
    const size_t HVK = size_t(s.value_heads) * s.head_k, state_bytes = HVV * s.head_k * dtype_size(state);
    for (int32_t node = 0; node < s.tokens; ++node) {
      std::vector<int32_t> path;
      for (int32_t t = node; t >= 0; t = tree.parent[size_t(t)]) path.insert(path.begin(), t);
      SCOPED_TRACE("node " + std::to_string(node) + " at depth " + std::to_string(path.size()));
      CaseShape cs = s;
      cs.tokens = int32_t(path.size());
      VerifyCase chain(cs, seed, {2}, {0, 0, 0, 0, 0});
      chain.q = take_tokens(tree.q, HK, path);
      chain.k = take_tokens(tree.k, HK, path);
      chain.v = take_tokens(tree.v, HVV, path);
      chain.g = take_tokens(tree.g, HVK, path);
      chain.beta = take_tokens(tree.beta, size_t(s.value_heads), path);
      chain.A_log = tree.A_log;
      chain.dt_bias = tree.dt_bias;
      chain.pool.bytes = pool;
      run_verify(chain);
      const size_t out_bytes = HVV * dtype_size(s.io);
      const std::vector<uint8_t> tree_out(tree.o.bytes.begin() + ptrdiff_t(node * out_bytes),
                                          tree.o.bytes.begin() + ptrdiff_t((node + 1) * out_bytes));
      const std::vector<uint8_t> chain_out(chain.o.bytes.end() - ptrdiff_t(out_bytes), chain.o.bytes.end());
      EXPECT_EQ(first_difference(tree_out, chain_out), -1) << "output";
      const auto post = [&](const VerifyCase& c, int32_t t) {
        const auto at = c.scratch.bytes.begin() + ptrdiff_t(size_t(c.write_row[size_t(t)]) * state_bytes);
        return std::vector<uint8_t>(at, at + ptrdiff_t(state_bytes));
      };
      EXPECT_EQ(first_difference(post(tree, node), post(chain, cs.tokens - 1)), -1) << "post-state";
    }
  }
}

// docs/trees.md: a parent outside [-1, t) in memory the host does not check is read as t - 1 and recorded.
TEST(VerifyTree, ParentsOutsideTheirRangeReadAsTheChainAndAreRecorded) {
  KDA_SKIP_WITHOUT_RUNNER();
  CaseShape s = sweep_shape(64, 6, 1, 5, 2);
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(s.str() + " seed=" + std::to_string(seed));
  VerifyCase bad(s, seed, {0, 1}, {0, 0, 0, 0, 0}), fixed(s, seed, {0, 1}, {0, 0, 0, 0, 0});
  bad.parent = {-1, 0, -1, 1, 1, 0, /* row 1: */ -1, -1, 2, 0, -2, 4};
  fixed.parent = {-1, 0, -1, 1, 1, 0, /* row 1: */ -1, -1, 1, 0, 3, 4};
  std::vector<DeviceErrorWord> errors(1);
  {
    Placement at(runner().memory());
    VerifyParams p = bad.params(at);
    p.errors = at.out(errors);
    run_verify(bad, at, p);
  }
  run_verify(fixed);
  EXPECT_EQ(first_difference(bad.o.bytes, fixed.o.bytes), -1);
  EXPECT_EQ(first_difference(bad.scratch.bytes, fixed.scratch.bytes), -1);
  EXPECT_EQ(DeviceErrorCode(errors[0].code), DeviceErrorCode::parent_out_of_range);
  EXPECT_EQ(errors[0].row, 1);
  EXPECT_TRUE(errors[0].value == 2 || errors[0].value == -2) << errors[0].value;
  EXPECT_EQ(errors[0].count, 2u);
}

// More tokens than the kernel keeps branch states for are refused by name before anything runs (the CPU
// backend takes trees of any size).
TEST(VerifyTree, TreesLargerThanTheKernelKeepsAreRefused) {
  if (runner().kind == RunnerKind::cpu) GTEST_SKIP() << "the CPU backend takes trees of any size";
  const uint64_t launches = runner_launches();
  CaseShape s = sweep_shape(64, kMaxCudaTreeTokens + 1, 1, 0, 1);
  s.scratch_steps = s.tokens;
  VerifyCase c(s, fresh_seed(), {0}, {0, 0, 0, 0, 0});
  for (int t = 0; t < s.tokens; ++t) c.parent.push_back(t / 2 - 1);
  try {
    run_op<VerifyOp>(c.params());
    ADD_FAILURE() << "T = " << s.tokens << " was launched";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "tokens");
  }
  EXPECT_EQ(runner_launches(), launches) << "a refused launch reached the executor";
}

}  // namespace
}  // namespace kdagraph::test
