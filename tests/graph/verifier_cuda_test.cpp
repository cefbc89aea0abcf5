// SPEC §3 on the CUDA backend: the modes' rounds of tests/common/verifier_modes.h (the body the CPU
// backend and the SIMT executor run too, tests/graph/verifier_modes_test.cpp) on the GPU.
#include <gtest/gtest.h>

#include "tests/common/gpu.h"
#include "tests/common/verifier_modes.h"

namespace kdagraph::test {
namespace {

class VerifierCuda : public ::testing::TestWithParam<ModesShape> {};

TEST_P(VerifierCuda, TheModesAgreeBitwiseAndMatchFp64) {
  KDA_SKIP_WITHOUT_GPU();
  expect_modes_agree(Backend::cuda, GetParam(), kModesRun, fresh_seed());
}

INSTANTIATE_TEST_SUITE_P(Shapes, VerifierCuda, ::testing::ValuesIn(kModesShapes), modes_shape_name);

}  // namespace
}  // namespace kdagraph::test
