// SPEC §9 "fused with the verify" with the CUDA kernels' own source on the SIMT executor: the verify
// kernel with the short conv fused in (kernels/verify.cu, one launch per layer) against the conv kernel
// followed by the verify kernel, bitwise, in every mode: through the operations on caller storage (every
// byte of the storage after every round, padded rows, untouched slots; tests/common/conv_rounds.h) and
// through the host engine's graph runner with batches crossing buckets (tests/common/conv_engines.h).
#include <gtest/gtest.h>

#include <string>

#include "tests/common/conv_engines.h"
#include "tests/common/conv_rounds.h"
#include "tests/common/engines.h"
#include "tests/simt/executor.h"
#include "tests/simt/simt_case.h"

namespace kdagraph::test {
namespace {

const Stream kCpu{Backend::cpu, nullptr};

// L = 2, H = 1, HV = 2 (GVA), K = V = 64, the smallest head the kernels support: C = 256.
VerifierConfig kernel_config(DType io, int32_t tokens) {
  VerifierConfig c = small_verifier(Backend::cpu, Mode::fused_accept, /*layers=*/2, tokens);
  c.model = ModelShape{2, 1, 2, 64, 64};
  c.pool = PoolShape{6, tokens + 1, DType::f32};
  c.max_rows = 3;
  c.io_dtype = io;
  return c;
}

TEST(ConvVerifySimt, FusedMatchesUnfusedThroughTheOps) {
  // OS-thread lanes (TSan) start a thread per lane of every block: W = 4 for a few rounds (30 rounds
  // took 15 minutes there).
  const int rounds = threads_lanes() ? 3 : 200;
  note_subset(rounds, 200);
  const uint64_t launches = simt::launches();
  for (int32_t width : {4, 3, 2}) {
    if (threads_lanes() && width != 4) continue;
    const DType io = width == 3 ? DType::f32 : DType::bf16;
    SCOPED_TRACE("W=" + std::to_string(width) + " " + to_string(io));
    const VerifierConfig c = kernel_config(io, 3);
    expect_conv_modes_agree(c, ConvShape{conv_channels(c.model), width, ConvActivation::silu},
                            width == 4 ? CallerLayout::layer_table : CallerLayout::compact, kCpu, fresh_seed(),
                            width == 4 ? rounds : rounds / 4);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(simt::launches() - launches, uint64_t(rounds)) << "the rounds did not run on the executor";
}

// T = 10 new tokens (and in replay up to 10 replayed ones first) take two or three staging chunks of 8:
// the fused conv's window for a later chunk is the last W - 1 inputs of the one before.
TEST(ConvVerifySimt, FusedMatchesUnfusedOverSeveralChunks) {
  const int rounds = threads_lanes() ? 1 : 30;
  note_subset(rounds, 30);
  const VerifierConfig c = kernel_config(DType::bf16, 10);
  expect_conv_modes_agree(c, ConvShape{conv_channels(c.model), 4, ConvActivation::silu}, CallerLayout::compact, kCpu,
                          fresh_seed(), rounds);
}

// The ops above run 200 rounds of every mode; here the graph runner's buckets, 100 rounds a mode. Its
// kernels are the ops test's, which ThreadSanitizer sees there; with OS-thread lanes an engine round
// takes about 20 s, so this one is fibers only.
TEST(ConvVerifySimt, FusedMatchesUnfusedThroughTheEngine) {
  if (threads_lanes()) GTEST_SKIP() << "the ops tests run these kernels under OS-thread lanes";
  for (Mode mode : {Mode::two_phase, Mode::fused_accept, Mode::replay}) {
    HostEngineConfig c = small_engine(Backend::cpu, mode, Exec::graph, fresh_seed());
    c.verifier.model = ModelShape{2, 1, 2, 64, 64};  // GVA, K = V = 64
    c.verifier.io_dtype = DType::bf16;
    expect_fused_engine_matches_unfused(with_conv(c), kCpu, 100);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace kdagraph::test
