// SPEC §12 on the CPU backend: the verify of token trees against the fp64 reference, a chain given as a
// tree bitwise the chain, every root-to-node path of a tree bitwise the chain of its tokens, and parents
// outside their range read as the chain's and recorded.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kernels/accept.h"
#include "kernels/verify.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {
namespace {

void expect_matches_reference(VerifyCase& c, double tol) {
  expect_verify_matches_reference(c, tol, [](VerifyCase& cc) { verify_cpu(cc.params()); });
}

std::vector<int32_t> random_trees(uint64_t seed, int32_t rows, int32_t T) {
  std::mt19937_64 rng(seed ^ 0x7eedu);
  std::vector<int32_t> out;
  for (int32_t n = 0; n < rows; ++n) {
    const std::vector<int32_t> tree = random_tree(rng, T);
    out.insert(out.end(), tree.begin(), tree.end());
  }
  return out;
}

// Rows seeded from the pool, from scratch (the row token 0 overwrites) and padding, over trees of up to
// 16 tokens (two staging chunks of the CUDA kernel), both head dims and state dtypes.
TEST(VerifyTreeCpu, MatchesReference) {
  int bits = 0;
  for (int K : {64, 128})
    for (int T : {2, 5, 9, 16})
      for (DType state : {DType::f32, DType::bf16}) {
        CaseShape s = sweep_shape(K, T, 1 + bits % 2, bits % 48, 3);
        bits += 7;
        s.state = state;
        s.scratch_steps = 16;
        const uint64_t seed = fresh_seed();
        SCOPED_TRACE(s.str() + " seed=" + std::to_string(seed));
        std::vector<int32_t> accept(5, 0);
        accept[3] = 1;
        VerifyCase c(s, seed, {1, 3, -1}, accept);
        c.parent = random_trees(seed, s.rows, T);
        expect_matches_reference(c, state == DType::f32 ? 1e-5 : 1e-2);
      }
}

// The kernels' slot assignment (tree_branch_slots), replayed in the verify's order on random trees and the
// widest ones: a slot is never taken while its state still has a reader to come, every reader finds
// its parent's state in its slot, no more slots than tree_slot_count(T) are used, and the widest trees
// use them all (the launcher's sizing is what some tree needs).
TEST(TreeSlots, AStateStaysInItsSlotUntilItsLastReader) {
  std::mt19937_64 rng(fresh_seed());
  for (int32_t T = 1; T <= kMaxCudaTreeTokens; ++T)
    for (int trial = 0; trial < 200; ++trial) {
      const std::vector<int32_t> parent = trial == 0 ? widest_tree(T) : random_tree(rng, T);
      SCOPED_TRACE("T=" + std::to_string(T) + " trial " + std::to_string(trial));
      const TreeSlots slots = tree_branch_slots(parent.data(), T);
      ASSERT_EQ(slots.kept, tree_branch_points(parent.data(), T));
      ASSERT_LE(slots.used, tree_slot_count(T));
      if (trial == 0 && T > 1) {
        ASSERT_EQ(slots.used, tree_slot_count(T)) << "the widest tree fills every slot";
      }
      // Readers still to come of each kept state (a token other than its successor starts from it).
      std::vector<int> readers(size_t(T) + 1, 0);
      for (int32_t t = 1; t < T; ++t)
        if (parent[size_t(t)] != t - 1) ++readers[size_t(parent[size_t(t)] + 1)];
      std::vector<int32_t> holder(size_t(tree_slot_count(T)) + 1, -1);  // the state a slot holds
      for (int32_t j = 0; j < T; ++j) {
        if (slots.kept >> j & 1u) {  // state j (token j - 1 has run) is kept before token j starts
          const int32_t slot = slots.of(j);
          ASSERT_LT(slot, slots.used);
          const int32_t before = holder[size_t(slot)];
          ASSERT_TRUE(before < 0 || readers[size_t(before)] == 0) << "state " << j << " takes slot " << slot
                                                                 << " while state " << before << " has a reader to come";
          holder[size_t(slot)] = j;
        }
        if (j > 0 && parent[size_t(j)] != j - 1) {  // token j starts from its parent's kept state
          const int32_t from = parent[size_t(j)] + 1;
          ASSERT_EQ(holder[size_t(slots.of(from))], from) << "token " << j << " reads state " << from;
          --readers[size_t(from)];
        }
      }
    }
}

// A chain given as a tree (parent[t] = t - 1) keeps nothing aside and runs exactly as the chain.
TEST(VerifyTreeCpu, AChainGivenAsATreeIsBitwiseTheChain) {
  for (DType state : {DType::f32, DType::bf16}) {
    CaseShape s = sweep_shape(128, 7, 2, 17, 2);
    s.state = state;
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(s.str() + " seed=" + std::to_string(seed));
    VerifyCase chain(s, seed, {0, 2}, {0, 0, 4, 0, 0}), tree(s, seed, {0, 2}, {0, 0, 4, 0, 0});
    for (int n = 0; n < s.rows; ++n)
      for (int t = 0; t < s.tokens; ++t) tree.parent.push_back(t - 1);
    verify_cpu(chain.params());
    verify_cpu(tree.params());
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
TEST(VerifyTreeCpu, EveryPathIsBitwiseTheChainOfItsTokens) {
  for (DType state : {DType::f32, DType::bf16}) {
    CaseShape s = sweep_shape(64, 10, 1, 35, 1);
    s.state = state;
    s.scratch_steps = 10;
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(s.str() + " seed=" + std::to_string(seed));
    VerifyCase tree(s, seed, {2}, {0, 0, 0, 0, 0});
    tree.parent = random_trees(seed, 1, s.tokens);
    const std::vector<uint8_t> pool = tree.pool.bytes;
    verify_cpu(tree.params());
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
      verify_cpu(chain.params());
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

// SPEC §12: a parent outside [-1, t) in memory the host does not check is read as t - 1 and recorded.
TEST(VerifyTreeCpu, ParentsOutsideTheirRangeReadAsTheChainAndAreRecorded) {
  CaseShape s = sweep_shape(64, 6, 1, 5, 2);
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(s.str() + " seed=" + std::to_string(seed));
  VerifyCase bad(s, seed, {0, 1}, {0, 0, 0, 0, 0}), fixed(s, seed, {0, 1}, {0, 0, 0, 0, 0});
  bad.parent = {-1, 0, -1, 1, 1, 0, /* row 1: */ -1, -1, 2, 0, -2, 4};
  fixed.parent = {-1, 0, -1, 1, 1, 0, /* row 1: */ -1, -1, 1, 0, 3, 4};
  DeviceErrorWord errors;
  VerifyParams p = bad.params();
  p.errors = &errors;
  verify_cpu(p);
  verify_cpu(fixed.params());
  EXPECT_EQ(first_difference(bad.o.bytes, fixed.o.bytes), -1);
  EXPECT_EQ(first_difference(bad.scratch.bytes, fixed.scratch.bytes), -1);
  EXPECT_EQ(DeviceErrorCode(errors.code), DeviceErrorCode::parent_out_of_range);
  EXPECT_EQ(errors.row, 1);
  EXPECT_TRUE(errors.value == 2 || errors.value == -2) << errors.value;
  EXPECT_EQ(errors.count, 2u);
}

// SPEC §12's accept of paths from device memory: the slot's accept length is the last good node + 1, and
// the path it keeps (replay, the conv's halves) is exactly the accepted prefix, token 0 alone where the
// path was cut to nothing.
TEST(TreeAccept, TheKeptPathIsWhatWasAccepted) {
  const int32_t T = 5;
  const std::vector<int32_t> parent = {-1, 0, 0, -1, 1, /* row 1 */ -1, 0, 1, 2, 3, /* row 2 */ -1, 0, 0, 2, 3};
  const std::vector<int32_t> paths = {0, 1, 4, -1, -1, /* row 1: 1 is no child of the seed */ 1, 2, -1, -1, -1,
                                      /* row 2: 4 is no child of 2 */ 0, 2, 4, -1, -1};
  std::vector<int32_t> row_slot = {2, 0, 1}, accept_len(3, 7), kept(size_t(3 * T), 9);
  DeviceErrorWord errors;
  AcceptParams p;
  p.rows = 3;
  p.tokens = T;
  p.row_slot = row_slot.data();
  p.accept_index = paths.data();
  p.parent = parent.data();
  p.accept_len = accept_len.data();
  p.slot_path = kept.data();
  p.errors = &errors;
  accept_cpu(p);
  EXPECT_EQ(accept_len, (std::vector<int32_t>{1, 3, 5}));  // slots 0, 1, 2 <- rows 1, 2, 0
  EXPECT_EQ(kept, (std::vector<int32_t>{0, -1, -1, -1, -1, /* slot 1 */ 0, 2, -1, -1, -1, /* slot 2 */ 0, 1, 4, -1, -1}));
  EXPECT_EQ(DeviceErrorCode(errors.code), DeviceErrorCode::path_invalid);
  EXPECT_EQ(errors.count, 2u);
}

}  // namespace
}  // namespace kdagraph::test
