// docs/storage.md index algebra, on the host (the kernels call the same functions).
#include <gtest/gtest.h>

#include <set>

#include "kernels/layout.h"

namespace kdagraph {
namespace {

TEST(Layout, PoolAndScratchOffsetsTileTheBuffersExactly) {
  const StateGeometry g{3, 4, 5, 2, 3, 4};  // L P S HV V K
  std::set<int64_t> pool, scratch;
  for (int l = 0; l < g.layers; ++l)
    for (int p = 0; p < g.slots; ++p)
      for (int h = 0; h < g.value_heads; ++h) {
        const int64_t off = g.pool_offset(l, p, h);
        EXPECT_EQ(off % g.head_elems(), 0);
        EXPECT_TRUE(pool.insert(off).second);
        for (int t = 0; t < g.scratch_steps; ++t)
          EXPECT_TRUE(scratch.insert(g.scratch_offset(l, scratch_row(p, t, g.scratch_steps), h)).second);
      }
  EXPECT_EQ(int64_t(pool.size()) * g.head_elems(), g.pool_elems());
  EXPECT_EQ(*pool.rbegin() + g.head_elems(), g.pool_elems());
  EXPECT_EQ(int64_t(scratch.size()) * g.head_elems(), g.scratch_elems());
  EXPECT_EQ(*scratch.rbegin() + g.head_elems(), g.scratch_elems());
}

TEST(Layout, ScratchRowsOfASlotAreItsOwn) {
  const int S = 6;
  for (int slot = 0; slot < 10; ++slot)
    for (int t = 0; t < S; ++t) {
      EXPECT_EQ(scratch_row(slot, t, S) / S, slot);
      EXPECT_EQ(scratch_row(slot, t, S) % S, t);
    }
}

TEST(Layout, SeedRowNamesTheAcceptedPostState) {
  EXPECT_EQ(seed_scratch_row(3, 0, 8), -1);  // accept_len 0: the pool
  EXPECT_EQ(seed_scratch_row(3, 1, 8), 24);  // first token's post-state
  EXPECT_EQ(seed_scratch_row(3, 8, 8), 31);  // last scratch row of slot 3
}

}  // namespace
}  // namespace kdagraph
