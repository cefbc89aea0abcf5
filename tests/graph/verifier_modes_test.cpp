// SPEC §3: the modes' rounds of tests/common/verifier_modes.h on the program's runner
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

}  // namespace
}  // namespace kdagraph::test
