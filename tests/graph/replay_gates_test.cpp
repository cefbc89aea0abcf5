// docs/modes.md, docs/errors.md: in replay mode with the gate in the kernel a verify replays the slots' accepted prefixes
// with its own A_log and dt_bias, so they are the layer's weights. The Verifier refuses, naming the
// argument and changing nothing, a verify whose gate parameters moved while a prefix verified with the
// old ones may be pending (Verifier::check_gates), and lets them move once none may.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kdagraph/graph_runner.hpp"
#include "kdagraph/verifier.hpp"
#include "tests/common/engines.h"
#include "tests/common/host_inputs.h"
#include "tests/common/storage.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {
namespace {

const Stream kCpu{Backend::cpu, nullptr};

// Expects `fn` to throw InvalidArgument naming `argument`, with each of `parts` in its message.
void expect_refused(const std::function<void()>& fn, const std::string& argument, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error for moved " << argument;
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
    for (const std::string& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "'" << part << "' missing: " << e.what();
  }
}

std::string address(const void* p) { return std::to_string(reinterpret_cast<uintptr_t>(p)); }

enum class Conv { none, fused, unfused };

const char* to_string(Conv c) {
  switch (c) {
    case Conv::none: return "none";
    case Conv::fused: return "fused";
    case Conv::unfused: return "unfused";
  }
  return "?";
}

VerifierConfig gate_config(Mode mode, Conv conv) {
  VerifierConfig c = small_verifier(Backend::cpu, mode);
  if (conv != Conv::none) c.conv = ConvShape{conv_channels(c.model), 4, ConvActivation::silu};
  c.fuse_conv = conv == Conv::fused;
  return c;
}

// Rounds of one Verifier over random states and inputs at max_rows, each layer with its own gate.
struct GateRounds {
  Verifier v;
  std::mt19937_64 rng;
  std::vector<HostInputs> in;                     // per layer
  std::vector<std::vector<float>> gates;          // per layer: A_log [HV] then dt_bias [HV * K], distinct
  std::vector<std::vector<float>> x, weight;      // per layer, with a conv
  std::vector<int32_t> slots = {3, 0, 11};

  GateRounds(const VerifierConfig& c, uint64_t seed) : v(c), rng(seed) {
    randomize_storage(v, seed);
    gates = fresh_gates();
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    for (int32_t l = 0; l < c.model.layers; ++l) {
      in.emplace_back(c, c.max_rows, rng);
      if (c.conv.width == 0) continue;
      x.emplace_back(size_t(c.max_rows) * size_t(c.tokens) * size_t(c.conv.channels));
      weight.emplace_back(size_t(c.conv.channels) * size_t(c.conv.width));
      for (float& e : x.back()) e = d(rng);
      for (float& e : weight.back()) e = 0.5f * d(rng);
    }
  }

  // New gate parameters for every layer: other values, at other addresses.
  std::vector<std::vector<float>> fresh_gates() {
    std::uniform_real_distribution<float> d(-0.5f, 0.5f);
    std::vector<std::vector<float>> out(size_t(v.config().model.layers), gate_params(v.config()));
    for (auto& gate : out)
      for (float& e : gate) e = d(rng);
    return out;
  }

  std::vector<LayerInputs> layers(const std::vector<std::vector<float>>& g) {
    std::vector<LayerInputs> out;
    for (size_t l = 0; l < in.size(); ++l) out.push_back(in[l].view(g[l].data()));
    return out;
  }
  std::vector<ConvLayerInputs> convs() {
    std::vector<ConvLayerInputs> out;
    for (size_t l = 0; l < x.size(); ++l)
      out.push_back(conv_into_verify_inputs(v.spec(), x[l].data(), weight[l].data(), nullptr, in[l].q.data(),
                                            in[l].k.data(), in[l].v.data()));
    return out;
  }
  void enqueue_round(const std::vector<LayerInputs>& layer_inputs) {
    const std::vector<ConvLayerInputs> c = convs();
    if (c.empty()) v.enqueue_round(kCpu, layer_inputs.data(), int32_t(slots.size()));
    else v.enqueue_round(kCpu, c.data(), layer_inputs.data(), int32_t(slots.size()));
  }
  // A round of `g` over the batch, its outputs poisoned first and then all written, and its accept.
  void round(const std::vector<std::vector<float>>& g) {
    poison_outputs();
    v.set_batch(kCpu, slots.data(), int32_t(slots.size()));
    enqueue_round(layers(g));
    for (const HostInputs& i : in)
      for (size_t e = 0; e < i.o.size() * slots.size() / size_t(v.config().max_rows); ++e)
        ASSERT_FALSE(std::isnan(i.o[e])) << "an output of the round was not written";
    std::vector<int32_t> accepted(slots.size());
    for (int32_t& a : accepted) a = 1 + int32_t(rng() % uint64_t(v.config().tokens));
    v.enqueue_accept_from_host(kCpu, accepted.data(), int32_t(accepted.size()));
  }
  void poison_outputs() {
    for (HostInputs& i : in) std::fill(i.o.begin(), i.o.end(), NAN);
  }
  bool outputs_poisoned() const {
    for (const HostInputs& i : in)
      for (float e : i.o)
        if (!std::isnan(e)) return false;
    return true;
  }
};

class ReplayGates : public ::testing::TestWithParam<Conv> {};

TEST_P(ReplayGates, MovedGatesAreRefusedByNameWhileAPrefixMayPend) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  GateRounds r(gate_config(Mode::replay, GetParam()), seed);
  r.round(r.gates);
  ASSERT_FALSE(HasFatalFailure());
  r.poison_outputs();
  const StorageSnapshot before = snapshot(r.v);
  // Layer 1's weights copied elsewhere, the same values: the Verifier cannot see values, only where
  // they are, and a prefix of layer 1 pends on the old place.
  std::vector<std::vector<float>> moved = r.gates;
  const int32_t HV = r.v.config().model.value_heads;
  std::vector<LayerInputs> a_log = r.layers(r.gates), dt_bias = a_log;
  a_log[1].A_log = moved[1].data();
  dt_bias[2].dt_bias = moved[2].data() + HV;
  const std::string old_a_log = address(r.gates[1].data()), old_dt_bias = address(r.gates[2].data() + HV);

  expect_refused([&] { r.enqueue_round(a_log); }, "A_log", {"layer 1", address(moved[1].data()), old_a_log});
  expect_refused([&] { r.enqueue_round(dt_bias); }, "dt_bias", {"layer 2", address(moved[2].data() + HV), old_dt_bias});
  expect_refused([&] { r.v.check_gates(1, a_log[1]); }, "A_log", {"Verifier::check_gates", old_a_log});
  EXPECT_TRUE(snapshot(r.v) == before) << "a refused round changed the storage";
  r.v.enqueue_indices(kCpu, int32_t(r.slots.size()));  // writes the indices alone
  if (GetParam() == Conv::fused)
    expect_refused([&] { r.v.enqueue_conv_verify(kCpu, 2, r.convs()[2], dt_bias[2], int32_t(r.slots.size())); },
                   "dt_bias", {"Verifier::enqueue_conv_verify", old_dt_bias});
  else
    expect_refused([&] { r.v.enqueue_verify(kCpu, 1, a_log[1], int32_t(r.slots.size())); }, "A_log",
                   {"Verifier::enqueue_verify", old_a_log});
  EXPECT_TRUE(snapshot(r.v) == before) << "a refused verify changed the storage";
  EXPECT_TRUE(r.outputs_poisoned()) << "a refused call wrote outputs";
  // The gates where they were still run.
  r.round(r.gates);
}

INSTANTIATE_TEST_SUITE_P(Convs, ReplayGates, ::testing::Values(Conv::none, Conv::fused, Conv::unfused),
                         [](const auto& param_info) { return std::string(to_string(param_info.param)); });

TEST(ReplayGates, TheyMayMoveOnceEverySlotIsMaterializedOrPrefilled) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  GateRounds r(gate_config(Mode::replay, Conv::none), seed);
  r.round(r.gates);
  const std::vector<std::vector<float>> moved = r.fresh_gates();
  // Every slot but 5: the host cannot tell that slot 5, in no batch, holds no prefix.
  std::vector<int32_t> all_but_5;
  for (int32_t slot = 0; slot < r.v.config().pool.slots; ++slot)
    if (slot != 5) all_but_5.push_back(slot);
  r.v.enqueue_materialize(kCpu, all_but_5.data(), int32_t(all_but_5.size()));
  r.v.set_batch(kCpu, r.slots.data(), int32_t(r.slots.size()));
  expect_refused([&] { r.enqueue_round(r.layers(moved)); }, "A_log", {"layer 0", "materialize or prefill every slot"});

  std::vector<uint8_t> state(r.v.slot_state_bytes() * size_t(r.v.config().model.layers));
  r.v.read_pool(kCpu, 5, state.data());
  r.v.prefill(kCpu, 5, state.data());
  r.round(moved);
  ASSERT_FALSE(HasFatalFailure());
  // Now the prefixes pend on the moved ones.
  r.v.set_batch(kCpu, r.slots.data(), int32_t(r.slots.size()));
  expect_refused([&] { r.enqueue_round(r.layers(r.gates)); }, "A_log", {"layer 0", address(moved[0].data())});
}

TEST(ReplayGates, ACapturedRoundFixesThemForTheVerifiersLife) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  GateRounds r(gate_config(Mode::replay, Conv::none), seed);
  const std::vector<std::vector<float>> moved = r.fresh_gates();
  auto runner_over = [](Verifier& v, const std::vector<LayerInputs>* layers, Exec exec) {
    RoundHooks hooks;
    hooks.layer_inputs = [layers](int32_t l) { return (*layers)[size_t(l)]; };
    RunnerConfig rc;
    rc.buckets = {1, 2, 4, 8};
    rc.exec = exec;
    return std::make_unique<GraphRunner>(v, std::move(hooks), rc);
  };
  const std::vector<LayerInputs> layers = r.layers(r.gates);
  const std::unique_ptr<GraphRunner> graphs = runner_over(r.v, &layers, Exec::graph);
  graphs->capture(kCpu);
  graphs->set_batch(kCpu, r.slots.data(), int32_t(r.slots.size()));
  graphs->run_round(kCpu);
  const std::vector<int32_t> accepted(r.slots.size(), 2);
  r.v.enqueue_accept_from_host(kCpu, accepted.data(), int32_t(accepted.size()));
  std::vector<int32_t> all(size_t(r.v.config().pool.slots));
  for (int32_t slot = 0; slot < int32_t(all.size()); ++slot) all[size_t(slot)] = slot;
  r.v.enqueue_materialize(kCpu, all.data(), int32_t(all.size()));

  r.poison_outputs();
  const StorageSnapshot before = snapshot(r.v);
  // The graphs may replay at any time, unseen, with the old ones: materializing every slot does not
  // free them. Layer 1 moved alone: a refusal after layer 0's verify would have changed the pool.
  std::vector<LayerInputs> one_moved = layers;
  one_moved[1].A_log = moved[1].data();
  expect_refused([&] { r.enqueue_round(one_moved); }, "A_log", {"layer 1", "captured graph"});
  const std::unique_ptr<GraphRunner> eager = runner_over(r.v, &one_moved, Exec::eager);
  eager->set_batch(kCpu, r.slots.data(), int32_t(r.slots.size()));
  expect_refused([&] { eager->run_round(kCpu); }, "A_log", {"layer 1", address(r.gates[1].data())});
  EXPECT_TRUE(snapshot(r.v) == before) << "a refused round changed the storage";
  EXPECT_TRUE(r.outputs_poisoned()) << "a refused round wrote outputs";
  graphs->run_round(kCpu);
}

// Nothing else replays a prefix with a later call's gate: the other modes, and replay with the decay
// given precomputed, take new gate pointers every round.
TEST(ReplayGates, OtherModesAndAPrecomputedGateMayMoveThemEveryRound) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  VerifierConfig precomputed = gate_config(Mode::replay, Conv::none);
  precomputed.options.gate = GateMode::precomputed;
  for (const VerifierConfig& c : {gate_config(Mode::two_phase, Conv::none), gate_config(Mode::fused_accept, Conv::none),
                                  precomputed}) {
    SCOPED_TRACE(std::string(to_string(c.mode)) + " gate " + std::to_string(int(c.options.gate)));
    GateRounds r(c, seed);
    for (int round = 0; round < 3; ++round) {
      const std::vector<std::vector<float>> g = r.fresh_gates();
      r.round(g);
      if (c.mode == Mode::two_phase) r.v.enqueue_commit(kCpu, int32_t(r.slots.size()));
    }
  }
}

}  // namespace
}  // namespace kdagraph::test
