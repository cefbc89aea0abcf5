// The harness of the persistent schedule's mutants (tests/simt/verify_mutants_simt_test.cpp), unbroken:
// the persistent members' launcher (tests/simt/persistent_members.h) over an unchanged copy of
// kernels/verify_kernel.cuh, made as the broken ones are, passes every check in every run the mutants
// are caught in, with each block working through two units or more. Its own program, without the
// mutants' rule that a sanitizer's report counts as a pass.
#include <gtest/gtest.h>

#include <cstdint>

#include "tests/simt/mutant_case.h"

namespace kdagraph {
cudaError_t launch_persistent_persistent_intact(const VerifyParams& p, Launch on);
}  // namespace kdagraph

namespace kdagraph::test {
namespace {

TEST(VerifyPersistentSimt, UnbrokenCopyPassesTheMutantsChecks) {
  for (int K : mutant_head_dims()) {
    for (simt::Schedule sched : mutant_schedules()) {
      simt::ScopedOptions opt({simt::options().lanes, sched});
      const CaseShape s = mutant_shape(K);
      EXPECT_EQ(outcome(persistent(launch_persistent_persistent_intact), s), "") << "K=" << K << " " << to_string(sched);
      const int64_t units = int64_t(s.rows) * s.value_heads * (K / 16);  // the members' 16-row tiles
      EXPECT_EQ(simt::last_launch().grid.x, 4u) << "one multiprocessor's blocks";
      EXPECT_GE(units, 2 * int64_t(simt::last_launch().grid.x)) << "each block should take two units or more";
    }
  }
}

}  // namespace
}  // namespace kdagraph::test
