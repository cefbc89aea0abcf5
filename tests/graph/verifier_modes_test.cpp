// docs/modes.md: the modes' rounds of tests/common/verifier_modes.h on the program's runner
// (tests/common/runner.h [TAG_RUNNERS]).
//
// Sized by runner (Matrix): the CPU and the GPU run kModesRun; the executor, which runs a kernel's
// threads one after another (about 3 s a round of kModesRun at K = 128), 4 rounds of up to 4 rows in 2
// layers with a materialize after every second round; not with OS-thread lanes (the kernel cases run the
// kernels there).
#include <gtest/gtest.h>

#include "tests/common/runner.h"
#include "tests/common/verifier_modes.h"

namespace kdagraph::test {
namespace {

class VerifierModes : public ::testing::TestWithParam<ModesShape> {};

TEST_P(VerifierModes, TheModesAgreeBitwiseAndMatchFp64) {
  KDA_SKIP_UNLESS_ROUNDS_RUN();
  const ModesRun run = runner().matrix == Matrix::full ? kModesRun : ModesRun{4, 2, 4, 2};
  expect_modes_agree(runner().memory(), GetParam(), run, fresh_seed());
}

INSTANTIATE_TEST_SUITE_P(Shapes, VerifierModes, ::testing::ValuesIn(kModesShapes), modes_shape_name);

// docs/modes.md replay: whenever the ring flushes (every round, at T + 1 pending records, or only when the ring
// is full: flush_min R - T) the outputs and materialized pools are the other modes', bitwise. The
// executor runs enough rounds (R = 2 T + 1, small) to go round its ring several times.
TEST(VerifierModes, TheRingAgreesBitwiseWhateverItsFlushMin) {
  KDA_SKIP_UNLESS_ROUNDS_RUN();
  constexpr int32_t T = 4;  // expect_modes_agree's
  const bool full = runner().matrix == Matrix::full;
  const int32_t R = full ? 3 * T : 2 * T + 1;
  for (int32_t flush_min : {0, T + 1, R - T}) {
    SCOPED_TRACE("flush_min " + std::to_string(flush_min));
    const ModesRun run = full ? ModesRun{60, 7, 8, 3, ReplayRing{R, flush_min}} : ModesRun{8, 3, 4, 2, ReplayRing{R, flush_min}};
    expect_modes_agree(runner().memory(), ModesShape{64, DType::bf16, DType::f32, 1e-2}, run, fresh_seed());
    if (HasFatalFailure()) return;
  }
}

// docs/modes.md replay over 10,000 rounds: small heads (the CPU's any K), the modes compared bitwise each
// round and after every materialize; the fp64 check is the shorter runs'. The CPU backend only: the
// executor and the GPU run the kernels' own cases. Under AddressSanitizer, which looks for memory
// errors a few rounds show, 1,000 rounds (about 20 s for the three rings here, 10,000 rounds).
TEST(VerifierModes, TheRingAgreesBitwiseOverTenThousandRounds) {
  if (runner().kind != RunnerKind::cpu) GTEST_SKIP() << "the CPU backend's long run";
  constexpr int32_t T = 4;
#if defined(__SANITIZE_ADDRESS__)
  constexpr int32_t kRounds = 1000;
#else
  constexpr int32_t kRounds = 10000;
#endif
  for (int32_t flush_min : {0, T + 1, 2 * T}) {
    SCOPED_TRACE("flush_min " + std::to_string(flush_min));
    const ModesRun run{kRounds, 13, 4, 2, ReplayRing{3 * T, flush_min}, /*fp64=*/false};
    expect_modes_agree(Backend::cpu, ModesShape{8, DType::f32, DType::f32, 1e-5}, run, fresh_seed());
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace kdagraph::test
