// SPEC §3: the modes' rounds of tests/common/verifier_modes.h on the CPU backend. Compiled into tests/simt
// (TEST_PREFIX simt.), the same rounds run the CUDA kernels' own source on the SIMT executor.
#include <gtest/gtest.h>

#include "tests/common/verifier_modes.h"

namespace kdagraph::test {
namespace {

#if defined(KDAGRAPH_SIMT)
// The executor runs a kernel's threads one after another: about 3 s per round of the GPU's run at
// K = 128. Cut to keep a case to a few seconds: 4 rounds of up to 4 rows in 2 layers, a materialize
// after every second round. The shapes are the GPU's; the CPU backend runs the GPU's whole run.
constexpr ModesRun kRun{4, 2, 4, 2};
#else
constexpr ModesRun kRun = kModesRun;
#endif

class VerifierModes : public ::testing::TestWithParam<ModesShape> {};

TEST_P(VerifierModes, TheModesAgreeBitwiseAndMatchFp64) {
  expect_modes_agree(Backend::cpu, GetParam(), kRun, fresh_seed());
}

INSTANTIATE_TEST_SUITE_P(Shapes, VerifierModes, ::testing::ValuesIn(kModesShapes), modes_shape_name);

}  // namespace
}  // namespace kdagraph::test
