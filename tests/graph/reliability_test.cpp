// Issue 7 on the program's runner (tests/common/runner.h [TAG_RUNNERS]): the device-side error word,
// NaN/Inf isolation between requests, and a 10,000-round soak against a fresh two-phase replay (on the CPU
// and the GPU; the executor runs the modes' rounds, tests/graph/modes_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "harness/host_engine.h"
#include "kdagraph/verifier.hpp"
#include "tests/common/engines.h"
#include "tests/common/host_inputs.h"
#include "tests/common/runner.h"
#include "tests/common/storage.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {
namespace {

// The tests' small verifier (L 3, H 2, HV 4, 12 slots) at K = 32 on the CPU, 64 on the kernels.
VerifierConfig reliability_verifier(Mode mode) {
  VerifierConfig c = small_verifier(runner().memory(), mode);
  c.model.head_k = c.model.head_v = case_head_dim(32);
  return c;
}

// A round's inputs. `gate` is the layers' weights (A_log, dt_bias, backend memory): the caller keeps one
// for all rounds, as an engine does, and replay refuses a gate that moved while a prefix may pend.
struct Round {
  std::vector<HostInputs> layers;
  std::vector<LayerInputs> views;
  Round(const VerifierConfig& c, int32_t rows, uint64_t seed, const detail::Buffer& gate) {
    std::mt19937_64 rng(seed);
    for (int l = 0; l < c.model.layers; ++l) layers.emplace_back(c, rows, rng);
    for (auto& x : layers) views.push_back(x.view(gate.as<float>()));
  }
  // The views again, after a test changed the host inputs.
  void reload(const detail::Buffer& gate) {
    for (size_t l = 0; l < layers.size(); ++l) views[l] = layers[l].view(gate.as<float>());
  }
  void fetch() {
    for (auto& x : layers) x.fetch();
  }
};

// Another kernel wrote accept_len[slot] = 99: the index build clamps it to S (fused-accept: seeding from
// the slot's last scratch row) or to T (replay: the tokens a cache row holds), and records what it met;
// the host reads it without a sync.
TEST(DeviceErrors, CorruptAcceptLengthIsClampedAndRecorded) {
  KDA_SKIP_UNLESS_ROUNDS_RUN();
  for (Mode mode : {Mode::fused_accept, Mode::replay}) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(std::string(to_string(mode)) + " seed=" + std::to_string(seed));
  const VerifierConfig c = reliability_verifier(mode);
  Verifier corrupt(c), clean(c);
  randomize_storage(corrupt, seed);
  randomize_storage(clean, seed);
  std::vector<int32_t> accept_len(12, 0);
  accept_len[7] = 2;
  accept_len[3] = 99;
  detail::copy_to_backend(runner().memory(), corrupt.accept_len(), accept_len.data(), 48);
  accept_len[3] = mode == Mode::replay ? c.tokens : c.pool.scratch_steps;  // what the clamp should produce
  detail::copy_to_backend(runner().memory(), clean.accept_len(), accept_len.data(), 48);
  const std::vector<int32_t> slots = {7, 3};
  const detail::Buffer gate = gate_buffer(c);
  Round a(c, 2, seed, gate), b(c, 2, seed, gate);
  for (auto [v, r] : {std::pair{&corrupt, &a}, std::pair{&clean, &b}}) {
    v->set_batch(runner().stream, slots.data(), 2);
    v->enqueue_round(runner().stream, r->views.data(), 2);
    r->fetch();
  }
  const DeviceErrorWord e = corrupt.device_errors();
  EXPECT_EQ(e.code, uint32_t(DeviceErrorCode::accept_out_of_range));
  EXPECT_EQ(e.row, 1);
  EXPECT_EQ(e.value, 99);
  EXPECT_EQ(e.count, 1u);
  EXPECT_EQ(clean.device_errors().count, 0u);
  for (size_t l = 0; l < a.layers.size(); ++l) EXPECT_EQ(a.layers[l].o, b.layers[l].o) << "layer " << l;
  corrupt.clear_device_errors();
  EXPECT_EQ(corrupt.device_errors().count, 0u);
  EXPECT_EQ(corrupt.device_errors().code, 0u);
  }
}

// The engine's sampler wrote accept lengths outside [1, T]: the accept step clamps and records them.
TEST(DeviceErrors, SamplerAcceptLengthOutOfRangeIsClamped) {
  KDA_SKIP_UNLESS_ROUNDS_RUN();
  for (Mode mode : {Mode::fused_accept, Mode::replay}) {
  SCOPED_TRACE(to_string(mode));
  const VerifierConfig c = reliability_verifier(mode);
  Verifier v(c);
  const std::vector<int32_t> slots = {5, 9, 1};
  const detail::Buffer gate = gate_buffer(c);
  Round r(c, 3, fresh_seed(), gate);
  v.set_batch(runner().stream, slots.data(), 3);
  v.enqueue_round(runner().stream, r.views.data(), 3);
  const detail::Buffer accepted = detail::Buffer::copy_of(runner().memory(), std::vector<int32_t>{0, 2, 17});
  v.enqueue_accept(runner().stream, accepted.as<int32_t>(), 3);
  detail::wait_for_device(runner().memory());
  std::vector<int32_t> accept_len(12);
  detail::copy_to_host(runner().memory(), accept_len.data(), v.accept_len(), 48);
  EXPECT_EQ(accept_len[5], 1);
  EXPECT_EQ(accept_len[9], 2);
  EXPECT_EQ(accept_len[1], c.tokens);
  const DeviceErrorWord e = v.device_errors();
  EXPECT_EQ(e.code, uint32_t(DeviceErrorCode::accept_out_of_range));
  // The first recorded is whichever row a core met first (on the CPU, row 0).
  EXPECT_TRUE((e.row == 0 && e.value == 0) || (e.row == 2 && e.value == 17)) << "row " << e.row << ", value " << e.value;
  EXPECT_EQ(e.count, 2u);
  }
}

// NaN and Inf in one request's inputs may spoil that request, never another's outputs or state.
TEST(Isolation, NanAndInfStayInTheirRequest) {
  KDA_SKIP_UNLESS_ROUNDS_RUN();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  for (Mode mode : {Mode::two_phase, Mode::fused_accept, Mode::replay}) {
    SCOPED_TRACE(to_string(mode));
    const VerifierConfig c = reliability_verifier(mode);
    Verifier clean(c), dirty(c);
    randomize_storage(clean, seed);
    randomize_storage(dirty, seed);
    const std::vector<int32_t> slots = {2, 6, 10, 0};
    const std::vector<int32_t> accepted = {2, 4, 1, 3};
    const detail::Buffer gate = gate_buffer(c);
    for (int round = 0; round < 3; ++round) {
      Round a(c, 4, seed + uint64_t(round), gate), b(c, 4, seed + uint64_t(round), gate);
      // Row 1 of the dirty run gets NaN and Inf in every kind of input of every layer.
      const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
      for (auto& x : b.layers) {
        const size_t qk_row = x.q.size() / 4, v_row = x.v.size() / 4, g_row = x.g.size() / 4, b_row = x.beta.size() / 4;
        x.q[qk_row + 3] = nan;
        x.k[qk_row + 5] = inf;
        x.v[v_row + 1] = -inf;
        x.g[g_row + 2] = nan;
        x.beta[b_row] = inf;
      }
      b.reload(gate);
      for (auto [v, r] : {std::pair{&clean, &a}, std::pair{&dirty, &b}}) {
        v->set_batch(runner().stream, slots.data(), 4);
        v->enqueue_round(runner().stream, r->views.data(), 4);
        v->enqueue_accept_from_host(runner().stream, accepted.data(), 4);
        if (mode_policy(mode).commit) v->enqueue_commit(runner().stream, 4);
        r->fetch();
      }
      for (size_t l = 0; l < a.layers.size(); ++l) {
        const size_t row = a.layers[l].o.size() / 4;
        for (size_t e = 0; e < a.layers[l].o.size(); ++e) {
          if (e / row == 1) continue;
          ASSERT_EQ(0, std::memcmp(&a.layers[l].o[e], &b.layers[l].o[e], 4)) << "row " << e / row << " layer " << l;
        }
      }
    }
    const StorageSnapshot s_clean = snapshot(clean), s_dirty = snapshot(dirty);
    for (int32_t s = 0; s < 12; ++s)
      if (s != 6) expect_slot_unchanged(c, s_clean, s_dirty, s);
  }
}

// 10,000 rounds of a fused-accept and a replay graph engine with joins, retirements, random accept
// lengths and batch sizes crossing buckets; every request's materialized state must equal a fresh
// two-phase eager run of the same history, bitwise.
TEST(Soak, TenThousandRoundsMatchATwoPhaseReference) {
  KDA_SKIP_WITHOUT_RUNNER();
  if (runner().on_executor()) GTEST_SKIP() << "the executor runs the modes' rounds (tests/graph/modes_test.cpp)";
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  HostEngineConfig ref_cfg = small_engine(runner().memory(), Mode::two_phase, Exec::eager, seed);
  ref_cfg.verifier.model.layers = 2;
  ref_cfg.verifier.model.head_k = ref_cfg.verifier.model.head_v = case_head_dim(16);
  ref_cfg.batch = 8;
  ref_cfg.keep_outputs = false;
  ref_cfg.retire_rate = 0.02;
  HostEngine ref(ref_cfg);
  ref.start(runner().stream);
  for (int r = 0; r < 10000; ++r) ref.run_round(runner().stream);
  ref.finish(runner().stream);
  EXPECT_GT(ref.retired().size(), 1000u);
  for (Mode mode : {Mode::fused_accept, Mode::replay}) {
    SCOPED_TRACE(to_string(mode));
    HostEngineConfig cfg = ref_cfg;
    cfg.verifier.mode = mode;
    cfg.runner.exec = Exec::graph;
    HostEngine run(cfg);
    run.start(runner().stream);
    for (int r = 0; r < 10000; ++r) run.run_round(runner().stream);
    run.finish(runner().stream);
    EXPECT_EQ(run.verifier().device_errors().count, 0u);
    ASSERT_EQ(run.retired().size(), ref.retired().size());
    for (size_t i = 0; i < run.retired().size(); ++i) {
      ASSERT_EQ(run.retired()[i].request, ref.retired()[i].request);
      ASSERT_EQ(run.retired()[i].rounds, ref.retired()[i].rounds);
      ASSERT_EQ(run.retired()[i].state, ref.retired()[i].state) << "request " << run.retired()[i].request;
    }
    EXPECT_EQ(run.tokens_accepted(), ref.tokens_accepted());
  }
}

}  // namespace
}  // namespace kdagraph::test
