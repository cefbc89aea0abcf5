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
// seeded from the tile the unit before prefetched, tests/simt/persistent_members.h; its unbroken copy
// passes every check, verify_persistent_simt_test.cpp):
//   persistent_unwaited_prefetch    the prefetched seed read without waiting for its copies
//   persistent_prefetch_wrong_rows  the unit's own seed rows prefetched in place of the next unit's
//   persistent_no_unit_barrier      no barrier between a block's units (staging overwritten mid-loop)
// With fibers every schedule runs and each outcome is printed; a mutant passes when at least one
// schedule catches it (tests/simt/mutant_case.h). With OS threads (ThreadSanitizer) it runs once: a TSan
// report also counts, which ctest reads from the output.
#include <gtest/gtest.h>

#include <string>

#include "tests/simt/mutant_case.h"
#include "tests/simt/pdl_case.h"

namespace kdagraph {
cudaError_t launch_verify_no_chunk_barrier(const VerifyParams& p, Launch on);
cudaError_t launch_verify_no_staging_barrier(const VerifyParams& p, Launch on);
cudaError_t launch_verify_no_copy_wait(const VerifyParams& p, Launch on);
cudaError_t launch_verify_lane_off_by_one(const VerifyParams& p, Launch on);
cudaError_t launch_verify_early_inputs(const VerifyParams& p, Launch on);
cudaError_t launch_persistent_persistent_unwaited_prefetch(const VerifyParams& p, Launch on);
cudaError_t launch_persistent_persistent_prefetch_wrong_rows(const VerifyParams& p, Launch on);
cudaError_t launch_persistent_persistent_no_unit_barrier(const VerifyParams& p, Launch on);
}  // namespace kdagraph

namespace kdagraph::test {
namespace {

TEST(VerifyMutantsSimt, ChunkBarrierRemoved) { expect_caught("no_chunk_barrier", plain(launch_verify_no_chunk_barrier)); }
TEST(VerifyMutantsSimt, StagingBarrierRemoved) {
  expect_caught("no_staging_barrier", plain(launch_verify_no_staging_barrier));
}
TEST(VerifyMutantsSimt, CopyWaitRemoved) { expect_caught("no_copy_wait", plain(launch_verify_no_copy_wait)); }
TEST(VerifyMutantsSimt, LaneIndexOffByOne) { expect_caught("lane_off_by_one", plain(launch_verify_lane_off_by_one)); }

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
