// docs/trees.md, the kernels' bookkeeping of a token tree (kernels/tree.h), plain host code: where each kept
// branch state waits for its readers. The verify of trees runs in tests/kernels/verify_tree_test.cpp.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kernels/tree.h"
#include "kernels/verify.h"
#include "tests/common/reference.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {
namespace {

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

}  // namespace
}  // namespace kdagraph::test
