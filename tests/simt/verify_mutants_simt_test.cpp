// The executor can fail: broken copies of the verify kernel, generated from kernels/verify.cu at
// configure time (tests/simt/CMakeLists.txt), must be caught by a wrong result (the same checks as
// verify_simt_test), an executor error, or a sanitizer report.
//   no_chunk_barrier    the __syncthreads before a later chunk overwrites the staging buffers
//   no_staging_barrier  the __syncthreads between the cp.async wait and reading the copied tokens
//   no_copy_wait        the __pipeline_wait_prior(0) after the copies
//   lane_off_by_one     group_lane = lane % kGroupLanes + 1
// With fibers every schedule runs and each outcome is printed; a mutant passes when at least one
// schedule catches it (the regular tests rotate schedules, so they would too). With OS threads
// (ThreadSanitizer) it runs once: a TSan report also counts, which ctest reads from the output.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <iostream>
#include <string>
#include <vector>

#include "tests/simt/simt_case.h"

namespace kdagraph {
cudaError_t launch_verify_no_chunk_barrier(const VerifyParams& p, cudaStream_t stream);
cudaError_t launch_verify_no_staging_barrier(const VerifyParams& p, cudaStream_t stream);
cudaError_t launch_verify_no_copy_wait(const VerifyParams& p, cudaStream_t stream);
cudaError_t launch_verify_lane_off_by_one(const VerifyParams& p, cudaStream_t stream);
}  // namespace kdagraph

namespace kdagraph::test {
namespace {

using Launcher = cudaError_t (*)(const VerifyParams&, cudaStream_t);

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
std::string outcome(Launcher launch, const CaseShape& s) {
  VerifyCase c(s, fresh_seed(), {0, 2}, {0, 0, 1, 0});
  std::string error;
  ::testing::TestPartResultArray failures;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
    expect_verify_matches_reference(c, tolerance(s), [&](VerifyCase& cc) {
      if (launch(cc.params(), nullptr) != cudaSuccess) error = simt::last_error();
      cc.o.sync_values();
      cc.scratch.sync_values();
    });
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

void expect_caught(const char* name, Launcher launch) {
  std::vector<simt::Schedule> schedules{simt::Schedule::ascending};
  if (simt::options().lanes == simt::Lanes::fibers)
    schedules = {simt::Schedule::ascending, simt::Schedule::descending, simt::Schedule::round_robin,
                 simt::Schedule::random};
  int caught = 0;
  for (int K : {64, 128}) {
    if (K == 128 && simt::options().lanes == simt::Lanes::threads) continue;  // K = 64 only: time
    for (simt::Schedule sched : schedules) {
      simt::ScopedOptions opt({simt::options().lanes, sched});
      const std::string how = outcome(launch, mutant_shape(K));
      caught += !how.empty();
      std::cout << name << " K=" << K << " " << to_string(simt::options().lanes) << " " << to_string(sched) << ": "
                << (how.empty() ? "NOT caught" : "caught by " + how) << "\n";
    }
  }
  EXPECT_GT(caught, 0) << name << " ran through every check unnoticed";
}

TEST(VerifyMutantsSimt, ChunkBarrierRemoved) { expect_caught("no_chunk_barrier", launch_verify_no_chunk_barrier); }
TEST(VerifyMutantsSimt, StagingBarrierRemoved) {
  expect_caught("no_staging_barrier", launch_verify_no_staging_barrier);
}
TEST(VerifyMutantsSimt, CopyWaitRemoved) { expect_caught("no_copy_wait", launch_verify_no_copy_wait); }
TEST(VerifyMutantsSimt, LaneIndexOffByOne) { expect_caught("lane_off_by_one", launch_verify_lane_off_by_one); }

}  // namespace
}  // namespace kdagraph::test
