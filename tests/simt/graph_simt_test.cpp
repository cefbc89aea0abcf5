// SPEC §3, §5, §6 with the CUDA kernels in the loop: in the SIMT build the CPU backend's every operation
// (index build, verify, accept, commit, materialize, the synthetic inputs and sampler) runs the kernels'
// own source on the executor (graph/dispatch.h). So the Verifier, the CPU graph twin and the modes run
// the kernels here, on the tiny preset's shape (K = V = 64, which the kernels support), over >= 50
// rounds with joins, retirements and batches crossing buckets. Each test also checks that its rounds
// reached the executor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kdagraph/host_engine.hpp"
#include "kdagraph/verifier.hpp"
#include "tests/common/engines.h"
#include "tests/common/host_inputs.h"
#include "tests/common/storage.h"
#include "tests/common/verify_case.h"
#include "tests/simt/executor.h"

namespace kdagraph::test {
namespace {

const Stream kCpu{Backend::cpu, nullptr};
constexpr int kRounds = 50;

// The tiny preset of `kdagraph run` (L 2, H 2, HV 4, K = V = 64) in the tests' small engine.
const ModelShape kTiny{2, 2, 4, 64, 64};
// Half its heads (H 1, HV 2) and batches up to 4: the modes test runs four engines.
const ModelShape kSmall{2, 1, 2, 64, 64};

HostEngineConfig engine(const ModelShape& model, int32_t batch, Mode mode, Exec exec, uint64_t seed) {
  HostEngineConfig c = small_engine(Backend::cpu, mode, exec, seed);
  c.verifier.model = model;
  c.batch = batch;
  c.retire_rate = 0.15;
  return c;
}

VerifierConfig tiny_verifier(Mode mode) {
  VerifierConfig c = small_verifier(Backend::cpu, mode);
  c.model = kTiny;
  return c;
}

// Launches the executor ran since construction.
class LaunchCounter {
 public:
  uint64_t since() const { return simt::launches() - start_; }

 private:
  uint64_t start_ = simt::launches();
};

void expect_same_history(const HostEngine& want, const HostEngine& got, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(want.rounds().size(), got.rounds().size());
  for (size_t r = 0; r < want.rounds().size(); ++r) {
    ASSERT_EQ(want.rounds()[r].slots, got.rounds()[r].slots) << "round " << r;
    ASSERT_EQ(want.rounds()[r].outputs, got.rounds()[r].outputs) << "outputs differ in round " << r;
  }
  ASSERT_EQ(want.retired().size(), got.retired().size());
  for (size_t i = 0; i < want.retired().size(); ++i) {
    EXPECT_EQ(want.retired()[i].request, got.retired()[i].request);
    EXPECT_EQ(want.retired()[i].state, got.retired()[i].state) << "materialized state of request " << want.retired()[i].request;
  }
  EXPECT_EQ(got.tokens_accepted(), want.tokens_accepted());
}

void run(HostEngine& e, int rounds) {
  e.start(kCpu);
  for (int r = 0; r < rounds; ++r) e.run_round(kCpu);
  e.finish(kCpu);
}

// Two-phase, fused-accept and replay, eager, through the same rounds: bitwise equal outputs every
// round and bitwise equal materialized states of every retired request; and two-phase in the CPU graph
// twin (SPEC §5), sampler and accept in the graph and the commit its last node, equal to eager.
TEST(ModesSimt, TwoPhaseFusedAndReplayAgreeBitwiseEagerAndInTheGraph) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  const LaunchCounter launches;
  HostEngine two(engine(kSmall, 4, Mode::two_phase, Exec::eager, seed));
  HostEngine fused(engine(kSmall, 4, Mode::fused_accept, Exec::eager, seed));
  HostEngine replay(engine(kSmall, 4, Mode::replay, Exec::eager, seed));
  HostEngine two_graph(engine(kSmall, 4, Mode::two_phase, Exec::graph, seed));
  for (HostEngine* e : {&two, &fused, &replay, &two_graph}) run(*e, kRounds);
  // Each round: inputs and an index build, a verify per layer, the sampler and accept, per engine.
  EXPECT_GE(launches.since(), uint64_t(4 * kRounds * 5)) << "the rounds did not run on the executor";
  EXPECT_GT(two.retired().size(), 6u) << "the run should retire requests along the way";
  expect_same_history(two, fused, "fused-accept against two-phase");
  expect_same_history(two, replay, "replay against two-phase");
  expect_same_history(two, two_graph, "two-phase in the graph against eager");
  // Every output was written: each round's outputs differ from the last.
  for (size_t r = 1; r < fused.rounds().size(); ++r) EXPECT_NE(fused.rounds()[r].outputs, fused.rounds()[r - 1].outputs);
}

// A soak on the tiny preset: fused-accept and replay in the CPU graph twin, the sampler inside the graph
// and outside it, against a two-phase eager reference; batches up to 6 cross the buckets 1-8; joins and
// retirements throughout. Outputs of every round and every materialized state agree bitwise.
TEST(SoakSimt, TinyPresetGraphsMatchATwoPhaseEagerReference) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  const LaunchCounter launches;
  HostEngine ref(engine(kTiny, 6, Mode::two_phase, Exec::eager, seed));
  HostEngine fused(engine(kTiny, 6, Mode::fused_accept, Exec::graph, seed));
  HostEngineConfig replay_cfg = engine(kTiny, 6, Mode::replay, Exec::graph, seed);
  replay_cfg.runner.sampler_in_graph = false;
  HostEngine replay(replay_cfg);
  for (HostEngine* e : {&ref, &fused, &replay}) run(*e, kRounds);
  EXPECT_GE(launches.since(), uint64_t(3 * kRounds * 5)) << "the rounds did not run on the executor";
  std::set<size_t> batch_sizes;
  for (const auto& r : ref.rounds()) batch_sizes.insert(r.slots.size());
  EXPECT_GT(batch_sizes.size(), 3u) << "batches should cross buckets";
  EXPECT_GT(ref.retired().size(), 6u) << "the run should retire requests along the way";
  EXPECT_EQ(fused.verifier().device_errors().count, 0u);
  EXPECT_EQ(replay.verifier().device_errors().count, 0u);
  expect_same_history(ref, fused, "fused-accept graph, sampler in the graph");
  expect_same_history(ref, replay, "replay graph, sampler outside the graph");
}

// Another kernel wrote accept_len[slot] = 99: the simulated index build clamps it (to S, or to T in
// replay mode) and records it in the device error word, and the round equals one that had the clamped
// value all along.
TEST(ReliabilitySimt, CorruptAcceptLengthIsClampedAndRecorded) {
  for (Mode mode : {Mode::fused_accept, Mode::replay}) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(std::string(to_string(mode)) + " seed=" + std::to_string(seed));
    const VerifierConfig c = tiny_verifier(mode);
    Verifier corrupt(c), clean(c);
    randomize_storage(corrupt, seed);
    randomize_storage(clean, seed);
    std::vector<int32_t> accept_len(size_t(c.pool.slots), 0);
    accept_len[7] = 2;
    accept_len[3] = 99;
    detail::copy_to_backend(Backend::cpu, corrupt.accept_len(), accept_len.data(), accept_len.size() * 4);
    accept_len[3] = mode == Mode::replay ? c.tokens : c.pool.scratch_steps;
    detail::copy_to_backend(Backend::cpu, clean.accept_len(), accept_len.data(), accept_len.size() * 4);
    const std::vector<int32_t> slots = {7, 3};
    const std::vector<float> gate = gate_params(c);
    std::mt19937_64 rng_a(seed), rng_b(seed);
    std::vector<HostInputs> in_a, in_b;
    for (int l = 0; l < c.model.layers; ++l) {
      in_a.emplace_back(c, 2, rng_a);
      in_b.emplace_back(c, 2, rng_b);
    }
    std::vector<LayerInputs> views_a, views_b;
    for (int l = 0; l < c.model.layers; ++l) {
      views_a.push_back(in_a[size_t(l)].view(gate));
      views_b.push_back(in_b[size_t(l)].view(gate));
    }
    const LaunchCounter launches;
    corrupt.set_batch(kCpu, slots.data(), 2);
    corrupt.enqueue_round(kCpu, views_a.data(), 2);
    clean.set_batch(kCpu, slots.data(), 2);
    clean.enqueue_round(kCpu, views_b.data(), 2);
    EXPECT_GE(launches.since(), uint64_t(2 * (1 + c.model.layers)));
    const DeviceErrorWord e = corrupt.device_errors();
    EXPECT_EQ(e.code, uint32_t(DeviceErrorCode::accept_out_of_range));
    EXPECT_EQ(e.row, 1);
    EXPECT_EQ(e.value, 99);
    EXPECT_EQ(clean.device_errors().count, 0u);
    for (int l = 0; l < c.model.layers; ++l)
      EXPECT_EQ(0, std::memcmp(in_a[size_t(l)].o.data(), in_b[size_t(l)].o.data(), in_a[size_t(l)].o.size() * 4))
          << "layer " << l;
  }
}

// NaN and Inf in one request's inputs spoil that request's outputs only, never another's state.
TEST(ReliabilitySimt, NanAndInfStayInTheirRequest) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  for (Mode mode : {Mode::two_phase, Mode::fused_accept, Mode::replay}) {
    SCOPED_TRACE(to_string(mode));
    const VerifierConfig c = tiny_verifier(mode);
    Verifier clean(c), dirty(c);
    randomize_storage(clean, seed);
    randomize_storage(dirty, seed);
    const std::vector<int32_t> slots = {2, 6, 10, 0}, accepted = {2, 4, 1, 3};
    const std::vector<float> gate = gate_params(c);
    for (int round = 0; round < 2; ++round) {
      std::mt19937_64 rng_a(seed + uint64_t(round)), rng_b(seed + uint64_t(round));
      std::vector<HostInputs> a, b;
      for (int l = 0; l < c.model.layers; ++l) {
        a.emplace_back(c, 4, rng_a);
        b.emplace_back(c, 4, rng_b);
      }
      const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
      for (auto& x : b) {  // row 1 of the dirty run: NaN or Inf in every kind of input of every layer
        x.q[x.q.size() / 4 + 3] = nan;
        x.k[x.k.size() / 4 + 5] = inf;
        x.v[x.v.size() / 4 + 1] = -inf;
        x.g[x.g.size() / 4 + 2] = nan;
        x.beta[x.beta.size() / 4] = inf;
      }
      for (auto [v, in] : {std::pair{&clean, &a}, std::pair{&dirty, &b}}) {
        std::vector<LayerInputs> views;
        for (auto& x : *in) views.push_back(x.view(gate));
        v->set_batch(kCpu, slots.data(), 4);
        v->enqueue_round(kCpu, views.data(), 4);
        v->enqueue_accept_from_host(kCpu, accepted.data(), 4);
        if (mode_policy(mode).commit) v->enqueue_commit(kCpu, 4);
      }
      for (size_t l = 0; l < a.size(); ++l) {
        const size_t row = a[l].o.size() / 4;
        for (size_t e = 0; e < a[l].o.size(); ++e) {
          if (e / row == 1) continue;
          ASSERT_EQ(0, std::memcmp(&a[l].o[e], &b[l].o[e], 4)) << "row " << e / row << " layer " << l;
        }
      }
    }
    const StorageSnapshot s_clean = snapshot(clean), s_dirty = snapshot(dirty);
    for (int32_t s = 0; s < c.pool.slots; ++s)
      if (s != 6) expect_slot_unchanged(c, s_clean, s_dirty, s);
  }
}

}  // namespace
}  // namespace kdagraph::test
