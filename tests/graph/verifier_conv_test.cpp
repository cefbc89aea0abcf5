// docs/conv.md through the Verifier and the host engine on the CPU backend: with the short convolution the
// three modes agree bitwise over 200 rounds with joins and retirements, in every round's outputs and in
// every retired request's materialized state and conv window; graph replays equal eager rounds; the conv
// really feeds the verify; a prefill sets the window; what a conv needs is refused by name when missing.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/host_engine.h"
#include "kdagraph/graph_runner.hpp"
#include "kdagraph/verifier.hpp"
#include "tests/common/engines.h"
#include "tests/common/storage.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {
namespace {

const Stream kCpu{Backend::cpu, nullptr};

void expect_same_history(HostEngine& a, HostEngine& b) {
  ASSERT_EQ(a.rounds().size(), b.rounds().size());
  for (size_t r = 0; r < a.rounds().size(); ++r) {
    ASSERT_EQ(a.rounds()[r].slots, b.rounds()[r].slots) << "round " << r;
    ASSERT_TRUE(a.rounds()[r].outputs == b.rounds()[r].outputs) << "outputs differ in round " << r;
  }
  ASSERT_EQ(a.retired().size(), b.retired().size());
  for (size_t i = 0; i < a.retired().size(); ++i) {
    const RetiredRequest &x = a.retired()[i], &y = b.retired()[i];
    EXPECT_EQ(x.request, y.request);
    EXPECT_TRUE(x.state == y.state) << "materialized state of request " << x.request;
    EXPECT_TRUE(x.conv_window == y.conv_window) << "materialized conv window of request " << x.request;
  }
}

TEST(VerifierConv, ModesAgreeBitwiseOver200RoundsWithJoinsAndRetirements) {
  const std::vector<Mode> modes = {Mode::two_phase, Mode::fused_accept, Mode::replay};
  for (DType io : {DType::f32, DType::bf16}) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(std::string("io ") + to_string(io) + " seed=" + std::to_string(seed));
    HostEngineConfig base = with_conv(small_engine(Backend::cpu, Mode::two_phase, Exec::eager, seed));
    base.verifier.io_dtype = io;
    base.verifier.model.layers = 2;
    std::vector<std::unique_ptr<HostEngine>> engines;
    for (Mode mode : modes) {
      HostEngineConfig c = base;
      c.verifier.mode = mode;
      c.runner.exec = mode == Mode::two_phase ? Exec::eager : Exec::graph;
      engines.push_back(std::make_unique<HostEngine>(c));
    }
    for (auto& e : engines) e->start(kCpu);
    for (int r = 0; r < 200; ++r)
      for (auto& e : engines) e->run_round(kCpu);
    for (auto& e : engines) e->finish(kCpu);
    EXPECT_GT(engines[0]->retired().size(), 20u) << "the run should retire requests along the way";
    const size_t window_bytes = engines[0]->verifier().conv_window_bytes() * 2;
    for (const RetiredRequest& r : engines[0]->retired())
      ASSERT_EQ(r.conv_window.size(), window_bytes) << "every retired request carries its windows";
    for (size_t i = 1; i < engines.size(); ++i) {
      SCOPED_TRACE(to_string(modes[i]));
      expect_same_history(*engines[0], *engines[i]);
      EXPECT_EQ(engines[i]->verifier().device_errors().count, 0u);
    }
  }
}

// Graph replays of every bucket equal eager rounds, two-phase included (its commit moves the window).
TEST(VerifierConv, GraphReplaysEqualEagerRoundsInTwoPhase) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  HostEngine eager(with_conv(small_engine(Backend::cpu, Mode::two_phase, Exec::eager, seed), 3));
  HostEngine graph(with_conv(small_engine(Backend::cpu, Mode::two_phase, Exec::graph, seed), 3));
  for (HostEngine* e : {&eager, &graph}) {
    e->start(kCpu);
    for (int r = 0; r < 40; ++r) e->run_round(kCpu);
    e->finish(kCpu);
  }
  expect_same_history(eager, graph);
}

// The conv is what the verify reads: the same run without it gives other outputs from round 0.
TEST(VerifierConv, TheConvFeedsTheVerify) {
  const uint64_t seed = fresh_seed();
  HostEngine with(with_conv(small_engine(Backend::cpu, Mode::fused_accept, Exec::graph, seed)));
  HostEngine without(small_engine(Backend::cpu, Mode::fused_accept, Exec::graph, seed));
  for (HostEngine* e : {&with, &without}) {
    e->start(kCpu);
    e->run_round(kCpu);
  }
  ASSERT_EQ(with.rounds()[0].outputs.size(), without.rounds()[0].outputs.size());
  EXPECT_FALSE(with.rounds()[0].outputs == without.rounds()[0].outputs);
}

VerifierConfig conv_verifier(Mode mode) {
  VerifierConfig c = small_verifier(Backend::cpu, mode);
  c.conv = ConvShape{conv_channels(c.model), 4, ConvActivation::silu};
  return c;
}

// A prefill writes the slot's window at columns [0, W - 1) of every layer (half 0's base in the
// offset-window modes, with the slot's round parity back to 0) and nothing else of the conv state;
// read_conv_window reads it back.
TEST(VerifierConv, PrefillSetsTheWindowOfItsSlotOnly) {
  std::mt19937_64 rng(fresh_seed());
  for (Mode mode : {Mode::two_phase, Mode::fused_accept, Mode::replay}) {
    SCOPED_TRACE(to_string(mode));
    Verifier v(conv_verifier(mode));
    const VerifierConfig& c = v.config();
    std::vector<uint8_t> poison(v.conv_state_bytes(), 0x5a);
    detail::copy_to_backend(Backend::cpu, v.conv_state(), poison.data(), poison.size());
    std::vector<float> states(v.slot_state_bytes() * size_t(c.model.layers) / 4, 0.25f);
    std::vector<float> window(v.conv_window_bytes() * size_t(c.model.layers) / 4);
    for (auto& x : window) x = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
    int32_t* parity = v.storage().round_parity;
    EXPECT_EQ(parity != nullptr, mode != Mode::two_phase) << "a round parity with the conv's halves only";
    if (parity != nullptr) parity[5] = 1;  // as a round accepted before a re-prefill leaves it
    v.prefill(kCpu, 5, states.data(), window.data());
    if (parity != nullptr) {
      EXPECT_EQ(parity[5], 0) << "a prefill leaves the window in half 0";
    }
    std::vector<float> back(window.size());
    v.read_conv_window(kCpu, 5, back.data());
    EXPECT_EQ(back, window);
    std::vector<uint8_t> after(v.conv_state_bytes());
    detail::copy_to_host(Backend::cpu, after.data(), v.conv_state(), after.size());
    const size_t row = v.conv_state_bytes() / size_t(c.model.layers) / size_t(c.pool.slots);
    size_t changed = 0;
    for (size_t i = 0; i < after.size(); ++i) {
      const size_t slot = i / row % size_t(c.pool.slots), in_row = i % row;
      if (slot == 5 && in_row < v.conv_window_bytes()) continue;
      changed += after[i] != poison[i];
    }
    EXPECT_EQ(changed, 0u) << "bytes outside slot 5's windows changed";
    EXPECT_EQ(v.conv_scratch_bytes() > 0, mode == Mode::two_phase) << "a conv scratch in two-phase only";
  }
}

void expect_refused(const std::function<void()>& call, const std::string& argument) {
  try {
    call();
    ADD_FAILURE() << "a call with a bad " << argument << " was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
  }
}

TEST(VerifierConv, WhatAConvNeedsIsRefusedByName) {
  VerifierConfig bad = conv_verifier(Mode::fused_accept);
  bad.conv.channels += 1;
  expect_refused([&] { Verifier v(bad); }, "conv.channels");
  bad = conv_verifier(Mode::fused_accept);
  bad.conv.width = 1;
  expect_refused([&] { Verifier v(bad); }, "conv.width");

  Verifier conv(conv_verifier(Mode::fused_accept));
  Verifier plain(small_verifier(Backend::cpu, Mode::fused_accept));
  std::vector<float> states(conv.slot_state_bytes() * 3 / 4), window(conv.conv_window_bytes() * 3 / 4);
  expect_refused([&] { conv.prefill(kCpu, 1, states.data()); }, "conv_window");
  expect_refused([&] { conv.enqueue_prefill(kCpu, 1, states.data()); }, "conv_window");
  expect_refused([&] { plain.prefill(kCpu, 1, states.data(), window.data()); }, "conv_window");
  expect_refused([&] { plain.read_conv_window(kCpu, 1, window.data()); }, "conv.width");
  const std::vector<int32_t> slots = {0, 1};
  conv.set_batch(kCpu, slots.data(), 2);
  std::vector<LayerInputs> layers(3);
  expect_refused([&] { conv.enqueue_round(kCpu, layers.data(), 2); }, "convs");
  RoundHooks hooks;
  hooks.layer_inputs = [](int32_t) { return LayerInputs{}; };
  expect_refused([&] { GraphRunner r(conv, hooks, {}); }, "hooks.conv_inputs");
  hooks.conv_inputs = [](int32_t) { return ConvLayerInputs{}; };
  expect_refused([&] { GraphRunner r(plain, hooks, {}); }, "hooks.conv_inputs");
}

}  // namespace
}  // namespace kdagraph::test
