// An eager round allocates nothing (issue 21, the host cost of a launch), on the program's runner
// (tests/common/runner.h [TAG_RUNNERS]): after one warm-up round, a round through the Verifier (index
// build, conv and verify of every layer, accept, the two-phase commit; on a GPU each kernel a programmatic
// launch) and through the GraphRunner, eager and replayed, makes no heap allocation on the calling
// thread. The checks that pass build no message, no launch builds its shape, and the CPU backend's work
// runs without being wrapped for a graph.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kdagraph/graph_runner.hpp"
#include "kdagraph/verifier.hpp"
#include "tests/common/allocation_counter.h"
#include "tests/common/engines.h"
#include "tests/common/host_inputs.h"
#include "tests/common/runner.h"

namespace kdagraph::test {
namespace {

constexpr int32_t kRows = 3;

// Every layer's inputs where the runner reads them: x and the conv weights, the q, k and v the conv
// writes, g, beta.
struct Round {
  VerifierConfig c;
  std::vector<HostInputs> layers;
  std::vector<detail::Buffer> x, w;
  detail::Buffer gate, accepted;
  std::vector<ConvLayerInputs> convs;
  std::vector<LayerInputs> views;

  Round(const VerifierConfig& config, const RoundSpec& spec)
      : c(config), gate(gate_buffer(config)),
        accepted(detail::Buffer::copy_of(config.backend, std::vector<int32_t>(size_t(config.max_rows), 2))) {
    std::mt19937_64 rng(11);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    const size_t C = size_t(c.conv.channels), W = size_t(c.conv.width);
    for (int l = 0; l < c.model.layers; ++l) layers.emplace_back(c, c.max_rows, rng);
    for (int l = 0; l < c.model.layers; ++l) {
      std::vector<float> xl(size_t(c.max_rows) * size_t(c.tokens) * C), wl(C * W);
      for (auto& e : xl) e = d(rng);
      for (auto& e : wl) e = 0.3f * d(rng);
      x.push_back(detail::Buffer::copy_of(c.backend, xl));
      w.push_back(detail::Buffer::copy_of(c.backend, wl));
      views.push_back(layers[size_t(l)].view(gate.as<float>()));
      convs.push_back(conv_writing(spec, x.back().data(), w.back().as<float>(), views.back()));
    }
  }
};

// L = 2, H = 2, HV = 4 with the conv, K = 32 on the CPU, 64 on the kernels.
VerifierConfig config(Mode mode) {
  VerifierConfig c = small_verifier(runner().memory(), mode, 2);
  c.model.head_k = c.model.head_v = case_head_dim(32);
  c.conv = ConvShape{conv_channels(c.model), 4, ConvActivation::silu};
  return c;
}

TEST(EagerAllocation, AVerifierRoundAllocatesNothing) {
  KDA_SKIP_WITHOUT_RUNNER();
  for (Mode mode : {Mode::fused_accept, Mode::two_phase, Mode::replay}) {
    SCOPED_TRACE(to_string(mode));
    Verifier v(config(mode));
    Round r(v.config(), v.spec());
    const std::vector<int32_t> slots = {4, 0, 7};
    v.set_batch(runner().stream, slots.data(), kRows);
    auto round = [&] {
      v.enqueue_round(runner().stream, r.convs.data(), r.views.data(), kRows);
      v.enqueue_accept(runner().stream, r.accepted.as<int32_t>(), kRows);
      if (mode_policy(mode).commit) v.enqueue_commit(runner().stream, kRows);
    };
    round();  // warm-up: first-use setup (OpenMP's threads, NVTX's strings, the runtime's) may allocate once
    detail::wait_for_device(runner().memory());
    {
      const AllocationCount count;
      round();
      EXPECT_EQ(count.allocations(), 0);
    }
    detail::wait_for_device(runner().memory());
    EXPECT_EQ(v.device_errors().count, 0u);
  }
}

TEST(EagerAllocation, AGraphRunnerRoundAllocatesNothingEagerOrReplayed) {
  KDA_SKIP_WITHOUT_RUNNER();
  for (Exec exec : {Exec::eager, Exec::graph}) {
    SCOPED_TRACE(to_string(exec));
    Verifier v(config(Mode::fused_accept));
    Round r(v.config(), v.spec());
    RoundHooks hooks;
    hooks.layer_inputs = [&](int32_t l) { return r.views[size_t(l)]; };
    hooks.conv_inputs = [&](int32_t l) { return r.convs[size_t(l)]; };
    hooks.sampler = [&](const Stream&, int32_t) { return r.accepted.as<const int32_t>(); };
    RunnerConfig rc;
    rc.exec = exec;
    GraphRunner rounds(v, hooks, rc);
    const Stream& s = runner().stream;
    rounds.capture(s);
    const std::vector<int32_t> slots = {4, 0, 7};
    rounds.set_batch(s, slots.data(), kRows);
    rounds.run_round(s);
    detail::wait_for_device(runner().memory());
    {
      const AllocationCount count;
      rounds.run_round(s);
      EXPECT_EQ(count.allocations(), 0);
    }
    detail::wait_for_device(runner().memory());
  }
}

// The counter counts: without this the zeros above would prove nothing.
TEST(EagerAllocation, TheCounterSeesAnAllocation) {
  if (runner().kind != RunnerKind::cpu) GTEST_SKIP() << "host arithmetic: the CPU runner checks it";
  const AllocationCount count;
  std::vector<int> v(100);
  EXPECT_GE(count.allocations(), 1);
  EXPECT_EQ(v.size(), 100u);
}

}  // namespace
}  // namespace kdagraph::test
