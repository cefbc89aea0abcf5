// docs/graphs.md programmatic dependent launch on the executor alone [TAG_PDL]: the shipped verify, launched
// right after the kernel that writes its inputs (poisoned until then, every schedule), matches fp64 and
// the CPU backend: it reads none of them above its grid-dependency wait (verify_mutants_simt_test shows a
// verify that does is caught). With OS-thread lanes (ThreadSanitizer) programmatic launches run plainly:
// it reports skipped there. (Whole rounds with PDL on and off: tests/graph/pdl_test.cpp, every runner.)
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/simt/pdl_case.h"
#include "tests/simt/simt_case.h"

namespace kdagraph::test {
namespace {

#define KDA_SKIP_ON_THREAD_LANES()                                                               \
  do {                                                                                           \
    if (threads_lanes()) GTEST_SKIP() << "OS-thread lanes run programmatic launches plainly";    \
  } while (0)

TEST(VerifyPdlSimt, ReadsNoInputAboveItsWait) {
  KDA_SKIP_ON_THREAD_LANES();
  for (int K : {64, 128})
    for (simt::Schedule sched : {simt::Schedule::ascending, simt::Schedule::descending, simt::Schedule::round_robin,
                                 simt::Schedule::random}) {
      simt::ScopedOptions opt({simt::Lanes::fibers, sched});
      CaseShape s = sweep_shape(K, 5, 2, K == 64 ? 25 : 42, 4);
      s.io = K == 64 ? DType::f32 : DType::bf16;
      const uint64_t seed = fresh_seed();
      SCOPED_TRACE(s.str() + " " + to_string(sched) + " seed=" + std::to_string(seed));
      const std::vector<int32_t> slots = {1, 3, 4, -1}, accept = {0, 0, 0, 1, 5};
      VerifyCase cpu(s, seed, slots, accept), simt(s, seed, slots, accept);
      verify_cpu(cpu.params());
      cpu.o.sync_values();
      cpu.scratch.sync_values();
      const uint64_t held = simt::held_launches();
      expect_verify_matches_reference(simt, tolerance(s), [](VerifyCase& c) { run_after_staging(c, launch_verify); });
      EXPECT_EQ(simt::held_launches(), held + 2) << "the staging kernel and the verify were held at their wait";
      EXPECT_LE(rel_error(simt.o.values, cpu.o.values), tolerance(s)) << "outputs against the CPU backend";
      EXPECT_LE(rel_error(simt.scratch.values, cpu.scratch.values), tolerance(s)) << "scratch against the CPU backend";
      if (HasFatalFailure()) return;
    }
}

}  // namespace
}  // namespace kdagraph::test
