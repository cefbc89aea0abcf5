// The executor can fail: broken copies of the verify kernel, generated from kernels/verify.cu at
// configure time (tests/simt/CMakeLists.txt), must be caught by a wrong result (the same checks as
// verify_simt_test), an executor error, or a sanitizer report.
//   no_chunk_barrier    the __syncthreads before a later chunk overwrites the staging buffers
//   no_staging_barrier  the __syncthreads between the cp.async wait and reading the copied tokens
//   no_copy_wait        the __pipeline_wait_prior(0) after the copies
//   lane_off_by_one     group_lane = lane % kGroupLanes + 1
//   early_inputs        the grid-dependency wait below the first chunk's staging: the round's inputs are
//                       read above it (run after the kernel that writes them, tests/simt/pdl_case.h)
// and, on the persistent schedule (the sweep's members; a block works through several units, each
// seeded from the tile the unit before prefetched, tests/simt/persistent_members.h), beside its
// unbroken copy, which must pass every check:
//   persistent_unwaited_prefetch    the prefetched seed read without waiting for its copies
//   persistent_prefetch_wrong_rows  the unit's own seed rows prefetched in place of the next unit's
//   persistent_no_unit_barrier      no barrier between a block's units (staging overwritten mid-loop)
// With fibers every schedule runs and each outcome is printed; a mutant passes when at least one
// schedule catches it (the regular tests rotate schedules, so they would too). With OS threads
// (ThreadSanitizer) it runs once: a TSan report also counts, which ctest reads from the output.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "tests/simt/pdl_case.h"
#include "tests/simt/simt_case.h"

namespace kdagraph {
cudaError_t launch_verify_no_chunk_barrier(const VerifyParams& p, Launch on);
cudaError_t launch_verify_no_staging_barrier(const VerifyParams& p, Launch on);
cudaError_t launch_verify_no_copy_wait(const VerifyParams& p, Launch on);
cudaError_t launch_verify_lane_off_by_one(const VerifyParams& p, Launch on);
cudaError_t launch_verify_early_inputs(const VerifyParams& p, Launch on);
cudaError_t launch_persistent_persistent_intact(const VerifyParams& p, Launch on);
cudaError_t launch_persistent_persistent_unwaited_prefetch(const VerifyParams& p, Launch on);
cudaError_t launch_persistent_persistent_prefetch_wrong_rows(const VerifyParams& p, Launch on);
cudaError_t launch_persistent_persistent_no_unit_barrier(const VerifyParams& p, Launch on);
}  // namespace kdagraph

namespace kdagraph::test {
namespace {

using Launcher = VerifyLauncher;
// How a case is run: sets `error` to the executor's message when a launch fails.
using Run = std::function<void(VerifyCase&, std::string& error)>;

Run plain(Launcher launch) {
  return [launch](VerifyCase& c, std::string& error) {
    if (launch(c.params(), nullptr) != cudaSuccess) error = simt::last_error();
    c.o.sync_values();
    c.scratch.sync_values();
  };
}

// On a stand-in device of one multiprocessor: the persistent members' grid is then one multiprocessor's
// blocks (4), fewer than the case's units (2 rows x 4 or 8 tiles), so every block takes two units or more
// and seeds all but its first from its prefetch.
Run persistent(Launcher launch) {
  return [launch](VerifyCase& c, std::string& error) {
    simt::Options o = simt::options();
    o.multiprocessors = 1;
    const simt::ScopedOptions scoped(o);
    plain(launch)(c, error);
  };
}

// Two rows, one seeding from the pool and one from the scratch row its token 0 overwrites, over two
// staging chunks (T = 9). Neither uses the last slot, so a mutant's stray stores land in rows the
// checks watch rather than past the end of the buffers.
CaseShape mutant_shape(int K) {
  CaseShape s;
  s.rows = 2;
  s.tokens = 9;
  s.heads = s.value_heads = 1;
  s.head_k = s.head_v = K;
  s.slots = 4;
  s.scratch_steps = 9;
  s.options.l2norm_qk = true;
  s.options.gate = GateMode::softplus;
  return s;
}

// How the run went: empty when nothing noticed the mutant.
std::string outcome(const Run& run, const CaseShape& s) {
  VerifyCase c(s, fresh_seed(), {0, 2}, {0, 0, 1, 0});
  std::string error;
  ::testing::TestPartResultArray failures;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
    expect_verify_matches_reference(c, tolerance(s), [&](VerifyCase& cc) { run(cc, error); });
  }
  if (!error.empty()) return "executor error: " + error;
  if (failures.size() > 0) {
    std::string first = failures.GetTestPartResult(0).message();
    for (char& ch : first)
      if (ch == '\n') ch = ' ';
    return "wrong result (" + std::to_string(failures.size()) + " failed checks), first: " + first;
  }
  return "";
}

void expect_caught(const std::string& name, const Run& run) {
  std::vector<simt::Schedule> schedules{simt::Schedule::ascending};
  if (simt::options().lanes == simt::Lanes::fibers)
    schedules = {simt::Schedule::ascending, simt::Schedule::descending, simt::Schedule::round_robin,
                 simt::Schedule::random};
  int caught = 0;
  for (int K : {64, 128}) {
    if (K == 128 && simt::options().lanes == simt::Lanes::threads) continue;  // K = 64 only: time
    for (simt::Schedule sched : schedules) {
      simt::ScopedOptions opt({simt::options().lanes, sched});
      const std::string how = outcome(run, mutant_shape(K));
      caught += !how.empty();
      std::cout << name << " K=" << K << " " << to_string(simt::options().lanes) << " " << to_string(sched) << ": "
                << (how.empty() ? "NOT caught" : "caught by " + how) << "\n";
    }
  }
  EXPECT_GT(caught, 0) << name << " ran through every check unnoticed";
}

TEST(VerifyMutantsSimt, ChunkBarrierRemoved) { expect_caught("no_chunk_barrier", plain(launch_verify_no_chunk_barrier)); }
TEST(VerifyMutantsSimt, StagingBarrierRemoved) {
  expect_caught("no_staging_barrier", plain(launch_verify_no_staging_barrier));
}
TEST(VerifyMutantsSimt, CopyWaitRemoved) { expect_caught("no_copy_wait", plain(launch_verify_no_copy_wait)); }
TEST(VerifyMutantsSimt, LaneIndexOffByOne) { expect_caught("lane_off_by_one", plain(launch_verify_lane_off_by_one)); }

// The harness itself: the unbroken persistent kernel passes every check in every schedule, with each
// block working through two units or more (else the mutants below would prove nothing).
TEST(VerifyMutantsSimt, PersistentUnbrokenPasses) {
  for (int K : {64, 128}) {
    if (K == 128 && threads_lanes()) continue;  // as expect_caught: K = 64 only under OS threads
    for (simt::Schedule sched : {simt::Schedule::ascending, simt::Schedule::descending, simt::Schedule::random}) {
      if (sched != simt::Schedule::ascending && threads_lanes()) continue;
      simt::ScopedOptions opt({simt::options().lanes, sched});
      const CaseShape s = mutant_shape(K);
      EXPECT_EQ(outcome(persistent(launch_persistent_persistent_intact), s), "") << "K=" << K << " " << to_string(sched);
      const int64_t units = int64_t(s.rows) * s.value_heads * (K / 16);  // the members' 16-row tiles
      EXPECT_EQ(simt::last_launch().grid.x, 4u) << "one multiprocessor's blocks";
      EXPECT_GE(units, 2 * int64_t(simt::last_launch().grid.x)) << "each block should take two units or more";
    }
  }
}
TEST(VerifyMutantsSimt, PersistentPrefetchReadBeforeItLands) {
  expect_caught("persistent_unwaited_prefetch", persistent(launch_persistent_persistent_unwaited_prefetch));
}
TEST(VerifyMutantsSimt, PersistentPrefetchFromTheWrongRows) {
  expect_caught("persistent_prefetch_wrong_rows", persistent(launch_persistent_persistent_prefetch_wrong_rows));
}
TEST(VerifyMutantsSimt, PersistentUnitsWithoutABarrierBetween) {
  expect_caught("persistent_no_unit_barrier", persistent(launch_persistent_persistent_no_unit_barrier));
}

// [TAG_PDL] Each input read above the wait shows alone: with only q poisoned until the kernel before the
// verify writes it, and with only beta.
TEST(VerifyMutantsSimt, InputsReadAboveTheGridDependencyWait) {
  if (threads_lanes()) GTEST_SKIP() << "OS-thread lanes run programmatic launches plainly: nothing reads early";
  for (const auto& [input, poisoned] : {std::pair{"q", kQ}, std::pair{"beta", kBeta}})
    expect_caught(std::string("early_inputs, ") + input + " poisoned",
                  [poisoned = poisoned](VerifyCase& c, std::string&) { run_after_staging(c, launch_verify_early_inputs, poisoned); });
}

}  // namespace
}  // namespace kdagraph::test
