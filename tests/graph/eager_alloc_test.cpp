// An eager round allocates nothing (issue 21, the host cost of a launch): after one warm-up round, a
// round through the Verifier (index build, conv and verify of every layer, accept, the two-phase commit)
// and through the GraphRunner, eager and replayed, makes no heap allocation on the calling thread. The
// checks that pass build no message, and the CPU backend's work runs without being wrapped for a graph.
// (tests/graph/eager_alloc_cuda_test.cpp runs the same rounds on the CUDA backend.)
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kdagraph/graph_runner.hpp"
#include "kdagraph/verifier.hpp"
#include "tests/common/allocation_counter.h"
#include "tests/common/engines.h"
#include "tests/common/host_inputs.h"

namespace kdagraph::test {
namespace {

const Stream kCpu{Backend::cpu, nullptr};
constexpr int32_t kRows = 3;

// Every layer's inputs in host memory: x and the conv weights, the q, k and v the conv writes, g, beta.
struct Round {
  VerifierConfig c;
  std::vector<HostInputs> layers;
  std::vector<std::vector<float>> x, w;
  std::vector<float> gate;
  std::vector<ConvLayerInputs> convs;
  std::vector<LayerInputs> views;
  std::vector<int32_t> accepted = std::vector<int32_t>(kRows, 2);

  Round(const VerifierConfig& config, const RoundSpec& spec) : c(config), gate(gate_params(config)) {
    std::mt19937_64 rng(11);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    const size_t C = size_t(c.conv.channels), W = size_t(c.conv.width);
    for (int l = 0; l < c.model.layers; ++l) layers.emplace_back(c, c.max_rows, rng);
    for (int l = 0; l < c.model.layers; ++l) {
      x.emplace_back(size_t(c.max_rows) * size_t(c.tokens) * C);
      w.emplace_back(C * W);
      for (auto& e : x.back()) e = d(rng);
      for (auto& e : w.back()) e = 0.3f * d(rng);
      HostInputs& in = layers[size_t(l)];
      convs.push_back(conv_into_verify_inputs(spec, x.back().data(), w.back().data(), nullptr, in.q.data(), in.k.data(),
                                              in.v.data()));
      views.push_back(in.view(gate));
    }
  }
};

VerifierConfig config(Mode mode) {
  VerifierConfig c = small_verifier(Backend::cpu, mode, 2);
  c.conv = ConvShape{conv_channels(c.model), 4, ConvActivation::silu};
  return c;
}

TEST(EagerAllocation, AVerifierRoundAllocatesNothing) {
  for (Mode mode : {Mode::fused_accept, Mode::two_phase, Mode::replay}) {
    SCOPED_TRACE(to_string(mode));
    Verifier v(config(mode));
    Round r(v.config(), v.spec());
    const std::vector<int32_t> slots = {4, 0, 7};
    v.set_batch(kCpu, slots.data(), kRows);
    auto round = [&] {
      v.enqueue_round(kCpu, r.convs.data(), r.views.data(), kRows);
      v.enqueue_accept(kCpu, r.accepted.data(), kRows);
      if (mode_policy(mode).commit) v.enqueue_commit(kCpu, kRows);
    };
    round();  // warm-up: first-use setup (OpenMP's threads, NVTX's strings) may allocate once
    const AllocationCount count;
    round();
    EXPECT_EQ(count.allocations(), 0);
  }
}

TEST(EagerAllocation, AGraphRunnerRoundAllocatesNothingEagerOrReplayed) {
  for (Exec exec : {Exec::eager, Exec::graph}) {
    SCOPED_TRACE(to_string(exec));
    Verifier v(config(Mode::fused_accept));
    Round r(v.config(), v.spec());
    RoundHooks hooks;
    hooks.layer_inputs = [&](int32_t l) { return r.views[size_t(l)]; };
    hooks.conv_inputs = [&](int32_t l) { return r.convs[size_t(l)]; };
    hooks.sampler = [&](const Stream&, int32_t) { return static_cast<const int32_t*>(r.accepted.data()); };
    RunnerConfig rc;
    rc.exec = exec;
    GraphRunner runner(v, hooks, rc);
    runner.capture(kCpu);
    const std::vector<int32_t> slots = {4, 0, 7};
    runner.set_batch(kCpu, slots.data(), kRows);
    runner.run_round(kCpu);
    const AllocationCount count;
    runner.run_round(kCpu);
    EXPECT_EQ(count.allocations(), 0);
  }
}

// The counter counts: without this the zeros above would prove nothing.
TEST(EagerAllocation, TheCounterSeesAnAllocation) {
  const AllocationCount count;
  std::vector<int> v(100);
  EXPECT_GE(count.allocations(), 1);
  EXPECT_EQ(v.size(), 100u);
}

}  // namespace
}  // namespace kdagraph::test
