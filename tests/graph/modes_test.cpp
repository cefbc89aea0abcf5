// docs/modes.md on the program's runner (tests/common/runner.h [TAG_RUNNERS]): two-phase, fused-accept and
// replay agree bitwise, round after round, with joins, retirements and changing batches, eager and in
// the bucket's graph; materialize; slots outside a batch are untouched; prefill.
//
// Sized by runner (Matrix): 200 rounds of each state dtype on the CPU and the GPU, 20 of half the heads on
// the executor (a round there is each kernel's source run thread by thread); not with OS-thread lanes
// (the kernel cases run the kernels there).
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <set>
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

// The tests' small verifier (L 3, H 2, HV 4) at K = 32 on the CPU, 64 on the kernels.
VerifierConfig modes_verifier(Mode mode, int32_t layers = 3, int32_t tokens = 4) {
  VerifierConfig c = small_verifier(runner().memory(), mode, layers, tokens);
  c.model.head_k = c.model.head_v = case_head_dim(32);
  return c;
}

HostEngineConfig modes_engine(Mode mode, Exec exec, uint64_t seed) {
  HostEngineConfig c = small_engine(runner().memory(), mode, exec, seed);
  c.verifier.model.head_k = c.verifier.model.head_v = case_head_dim(32);
  return c;
}

void wait() { detail::wait_for_device(runner().memory()); }

void expect_same_history(HostEngine& a, HostEngine& b) {
  ASSERT_EQ(a.rounds().size(), b.rounds().size());
  for (size_t r = 0; r < a.rounds().size(); ++r) {
    ASSERT_EQ(a.rounds()[r].slots, b.rounds()[r].slots) << "round " << r;
    ASSERT_EQ(a.rounds()[r].outputs, b.rounds()[r].outputs) << "outputs differ in round " << r;
  }
  ASSERT_EQ(a.retired().size(), b.retired().size());
  for (size_t i = 0; i < a.retired().size(); ++i) {
    EXPECT_EQ(a.retired()[i].request, b.retired()[i].request);
    EXPECT_EQ(a.retired()[i].state, b.retired()[i].state) << "materialized state of request " << a.retired()[i].request;
  }
}

TEST(Modes, TwoPhaseAndFusedAcceptAgreeBitwiseOverManyRounds) {
  KDA_SKIP_UNLESS_ROUNDS_RUN();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  HostEngine two(modes_engine(Mode::two_phase, Exec::eager, seed));
  HostEngine fused(modes_engine(Mode::fused_accept, Exec::eager, seed));
  two.start(runner().stream);
  fused.start(runner().stream);
  for (int r = 0; r < by_matrix(60, 15, 0); ++r) {
    two.run_round(runner().stream);
    fused.run_round(runner().stream);
  }
  two.finish(runner().stream);
  fused.finish(runner().stream);
  EXPECT_GT(two.retired().size(), 6u) << "the run should retire requests along the way";
  expect_same_history(two, fused);
  // Every output was written (no zero-filled or stale rows): each round's outputs differ from the last.
  for (size_t r = 1; r < fused.rounds().size(); ++r) EXPECT_NE(fused.rounds()[r].outputs, fused.rounds()[r - 1].outputs);
  // Fused-accept never touched the pool between prefill and materialize; two-phase wrote it every round.
  EXPECT_EQ(snapshot(two.verifier()).pool, snapshot(fused.verifier()).pool);
}

const std::vector<Mode> kModes = {Mode::two_phase, Mode::fused_accept, Mode::replay};

// One verifier per mode, driven by hand: the accept lengths come from the host here.
struct ModeSet {
  std::vector<std::unique_ptr<Verifier>> v;
  detail::Buffer gate;  // the layers' weights: they outlive the rounds (a replay materialize reads them)
  explicit ModeSet(VerifierConfig c) : gate(gate_buffer(c)) {
    for (Mode m : kModes) {
      c.mode = m;
      v.push_back(std::make_unique<Verifier>(c));
    }
  }
  Verifier& two() { return *v[0]; }
  Verifier& fused() { return *v[1]; }
  Verifier& replay() { return *v[2]; }
};

// Runs one round of the same inputs through every mode and expects equal outputs, all written.
void round_all(ModeSet& m, const std::vector<int32_t>& slots, const std::vector<int32_t>& accept, std::mt19937_64& rng) {
  const VerifierConfig& c = m.two().config();
  const float* gate = m.gate.as<float>();
  std::vector<HostInputs> in;
  for (int l = 0; l < c.model.layers; ++l) in.emplace_back(c, int32_t(slots.size()), rng);
  std::vector<std::vector<std::vector<float>>> outs;
  for (auto& v : m.v) {
    std::vector<LayerInputs> views;
    for (auto& x : in) {
      std::fill(x.o.begin(), x.o.end(), NAN);
      views.push_back(x.view(gate));
    }
    v->set_batch(runner().stream, slots.data(), int32_t(slots.size()));
    v->enqueue_round(runner().stream, views.data(), int32_t(slots.size()));
    v->enqueue_accept_from_host(runner().stream, accept.data(), int32_t(accept.size()));
    if (mode_policy(v->config().mode).commit) v->enqueue_commit(runner().stream, int32_t(slots.size()));
    outs.emplace_back();
    for (auto& x : in) {
      x.fetch();
      outs.back().push_back(x.o);
    }
  }
  for (size_t i = 1; i < outs.size(); ++i)
    for (size_t l = 0; l < outs[0].size(); ++l) {
      for (float x : outs[i][l]) ASSERT_FALSE(std::isnan(x)) << to_string(kModes[i]) << ": an output was not written";
      EXPECT_EQ(0, std::memcmp(outs[0][l].data(), outs[i][l].data(), outs[0][l].size() * 4))
          << to_string(kModes[i]) << " differs from two-phase, layer " << l;
    }
}

// Every mode's pool states of `slots` after materializing them, equal bitwise.
void expect_same_materialized_pools(ModeSet& m, const std::vector<int32_t>& slots) {
  for (auto& v : m.v) v->enqueue_materialize(runner().stream, slots.data(), int32_t(slots.size()));
  const VerifierConfig& c = m.two().config();
  std::vector<uint8_t> want(m.two().slot_state_bytes() * size_t(c.model.layers)), got(want.size());
  for (int32_t slot : slots) {
    m.two().read_pool(runner().stream, slot, want.data());
    for (size_t i = 1; i < m.v.size(); ++i) {
      m.v[i]->read_pool(runner().stream, slot, got.data());
      EXPECT_EQ(want, got) << to_string(kModes[i]) << ", slot " << slot;
    }
  }
}

TEST(Modes, FusedRoundThatOverwritesItsSeedRowIsRight) {
  KDA_SKIP_UNLESS_ROUNDS_RUN();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  ModeSet m(modes_verifier(Mode::fused_accept));
  for (auto& v : m.v) randomize_storage(*v, seed);
  const std::vector<int32_t> slots = {3, 0, 11};
  // Round 1 accepts one token: round 2 seeds from scratch row slot*S + 0, which it overwrites.
  round_all(m, slots, {1, 1, 1}, rng);
  std::vector<int32_t> accept_len(12);
  wait();
  detail::copy_to_host(runner().memory(), accept_len.data(), m.fused().accept_len(), 48);
  EXPECT_EQ(accept_len[3], 1);
  round_all(m, slots, {1, 4, 2}, rng);
  round_all(m, slots, {3, 1, 4}, rng);
  expect_same_materialized_pools(m, slots);
}

TEST(Modes, SlotsOutsideTheBatchAreUntouched) {
  KDA_SKIP_UNLESS_ROUNDS_RUN();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (Mode mode : kModes) {
    SCOPED_TRACE(to_string(mode));
    Verifier v(modes_verifier(mode));
    randomize_storage(v, seed);
    std::vector<int32_t> accept_len = {0, 2, 4, 1, 0, 3, 0, 0, 1, 2, 0, 4};
    if (mode != Mode::two_phase)
      detail::copy_to_backend(runner().memory(), v.accept_len(), accept_len.data(), accept_len.size() * 4);
    const detail::Buffer gate = gate_buffer(v.config());
    for (int round = 0; round < 4; ++round) {
      std::vector<int32_t> all(12);
      for (int i = 0; i < 12; ++i) all[size_t(i)] = i;
      std::shuffle(all.begin(), all.end(), rng);
      const std::vector<int32_t> batch(all.begin(), all.begin() + 5);
      std::vector<HostInputs> in;
      std::vector<LayerInputs> views;
      for (int l = 0; l < 3; ++l) in.emplace_back(v.config(), 8, rng);
      for (auto& x : in) views.push_back(x.view(gate.as<float>()));
      wait();
      const StorageSnapshot before = snapshot(v);
      v.set_batch(runner().stream, batch.data(), 5);
      v.enqueue_round(runner().stream, views.data(), 8);  // 3 padded rows
      std::vector<int32_t> accepted(5);
      for (auto& a : accepted) a = std::uniform_int_distribution<int32_t>(1, 4)(rng);
      v.enqueue_accept_from_host(runner().stream, accepted.data(), 5);
      if (mode_policy(mode).commit) v.enqueue_commit(runner().stream, 8);
      wait();
      const StorageSnapshot after = snapshot(v);
      for (int32_t s = 0; s < 12; ++s)
        if (std::find(batch.begin(), batch.end(), s) == batch.end()) expect_slot_unchanged(v.config(), before, after, s);
      // Padded rows output zeros.
      for (auto& x : in) {
        x.fetch();
        for (size_t e = 5 * x.o.size() / 8; e < x.o.size(); ++e) ASSERT_EQ(x.o[e], 0.0f);
      }
    }
  }
}

// VerifierConfig::count_bytes: the kernels add the state and ring record bytes they move, counted here
// from the rules of docs/modes.md, docs/shapes.md for a round of n rows (3 of them padding): fused accept reads a seed
// and writes T post-states a head; two-phase too, and its commit copies one state in and out; replay's
// first round reads its checkpoint and writes its T records (u of every head, g of every value head, k
// of every query head), and its second also folds the accepted records and, flushing, writes the
// checkpoint back. Nothing is counted without count_bytes.
TEST(Modes, TheKernelsCountTheBytesTheyMove) {
  KDA_SKIP_UNLESS_ROUNDS_RUN();
  std::mt19937_64 rng(fresh_seed());
  for (Mode mode : kModes) {
    SCOPED_TRACE(to_string(mode));
    VerifierConfig c = modes_verifier(mode);
    c.count_bytes = true;
    c.ring = ReplayRing{0, 0};  // replay flushes every round
    Verifier v(c);
    const int64_t L = c.model.layers, T = c.tokens, H = c.model.heads, HV = c.model.value_heads;
    const int64_t K = c.model.head_k, V = c.model.head_v, n = 5, state = HV * V * K * int64_t(dtype_size(c.pool.state_dtype));
    const int64_t io = int64_t(dtype_size(c.io_dtype));
    const detail::Buffer gate = gate_buffer(c);
    const std::vector<int32_t> batch = {4, 9, 0, 11, 2};
    std::vector<int32_t> accepted = {1, 4, 2, 3, 1};
    auto round = [&] {
      std::vector<HostInputs> in;
      std::vector<LayerInputs> views;
      for (int64_t l = 0; l < L; ++l) in.emplace_back(c, 8, rng);
      for (auto& x : in) views.push_back(x.view(gate.as<float>()));
      v.clear_bytes_moved();
      v.set_batch(runner().stream, batch.data(), int32_t(n));
      v.enqueue_round(runner().stream, views.data(), 8);  // 3 padded rows
      v.enqueue_accept_from_host(runner().stream, accepted.data(), int32_t(n));
      if (mode_policy(mode).commit) v.enqueue_commit(runner().stream, 8);
      wait();
      return int64_t(v.bytes_moved());
    };
    const int64_t first = round();
    const int64_t records = T * (HV * V * 4 + (HV + H) * K * io);  // a row's T new records
    switch (mode) {
      case Mode::fused_accept: EXPECT_EQ(first, L * n * (1 + T) * state); break;
      case Mode::two_phase: EXPECT_EQ(first, L * n * (1 + T + 2) * state); break;
      case Mode::replay: EXPECT_EQ(first, L * n * (state + records)); break;
    }
    if (mode == Mode::replay) {
      // Folding reads each accepted record's u and, per unit of work, its k and g: at least one
      // unit a head, at most one a V row.
      int64_t folded = 0;
      for (int32_t a : accepted) folded += a;
      const int64_t second = round(), fixed = L * (n * (2 * state + records) + folded * HV * V * 4);
      EXPECT_GE(second, fixed + L * folded * HV * 2 * K * io);
      EXPECT_LE(second, fixed + L * folded * HV * V * 2 * K * io);
    }
    VerifierConfig quiet = modes_verifier(mode);
    Verifier w(quiet);
    EXPECT_EQ(w.bytes_moved(), 0u);
  }
}

TEST(Modes, MaterializeWithZeroAcceptChangesNothingAndTwiceEqualsOnce) {
  KDA_SKIP_UNLESS_ROUNDS_RUN();
  const uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  Verifier v(modes_verifier(Mode::fused_accept));
  randomize_storage(v, seed);
  const std::vector<int32_t> slots = {2, 7};
  const StorageSnapshot start = snapshot(v);
  v.enqueue_materialize(runner().stream, slots.data(), 2);  // accept_len is 0 everywhere
  EXPECT_TRUE(snapshot(v) == start);

  std::vector<HostInputs> in;
  std::vector<LayerInputs> views;
  const detail::Buffer gate = gate_buffer(v.config());
  for (int l = 0; l < 3; ++l) in.emplace_back(v.config(), 2, rng);
  for (auto& x : in) views.push_back(x.view(gate.as<float>()));
  v.set_batch(runner().stream, slots.data(), 2);
  v.enqueue_round(runner().stream, views.data(), 2);
  const std::vector<int32_t> accepted = {3, 1};
  v.enqueue_accept_from_host(runner().stream, accepted.data(), 2);
  const StorageSnapshot before = snapshot(v);
  EXPECT_EQ(before.accept_len[2], 3);
  v.enqueue_materialize(runner().stream, slots.data(), 2);
  const StorageSnapshot once = snapshot(v);
  EXPECT_EQ(once.accept_len[2], 0);
  EXPECT_EQ(once.accept_len[7], 0);
  EXPECT_NE(once.pool, before.pool);
  // pool[2] now holds scratch row 2*S + 2 of every layer.
  const StateGeometry g = geometry(v.config());
  for (int32_t l = 0; l < 3; ++l)
    EXPECT_EQ(0, std::memcmp(once.pool.data() + g.pool_offset(l, 2, 0) * 4,
                             once.scratch.data() + g.scratch_offset(l, scratch_row(2, 2, g.scratch_steps), 0) * 4,
                             size_t(g.slot_elems()) * 4));
  v.enqueue_materialize(runner().stream, slots.data(), 2);
  EXPECT_TRUE(snapshot(v) == once);
}


// A prefill writes pool[slot] of every layer and sets accept_len to 0; nothing else changes.
TEST(Modes, PrefillWritesOnlyItsSlot) {
  KDA_SKIP_UNLESS_ROUNDS_RUN();
  const uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  Verifier v(modes_verifier(Mode::fused_accept));
  randomize_storage(v, seed);
  std::vector<int32_t> accept_len(12, 2);
  detail::copy_to_backend(runner().memory(), v.accept_len(), accept_len.data(), 48);
  const StorageSnapshot before = snapshot(v);
  const size_t layers = size_t(v.config().model.layers), bytes = v.slot_state_bytes();
  std::vector<float> state(layers * bytes / 4);
  for (auto& x : state) x = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
  const detail::Buffer in_backend = detail::Buffer::copy_of(runner().memory(), state);
  for (bool from_backend : {true, false}) {
    const int32_t slot = from_backend ? 5 : 9;
    if (from_backend) v.enqueue_prefill(runner().stream, slot, in_backend.data());
    else v.prefill(runner().stream, slot, state.data());
    const StorageSnapshot after = snapshot(v);
    const StateGeometry g = geometry(v.config());
    for (size_t l = 0; l < layers; ++l)
      EXPECT_EQ(0, std::memcmp(after.pool.data() + g.pool_offset(int32_t(l), slot, 0) * 4,
                               reinterpret_cast<const char*>(state.data()) + l * bytes, bytes));
    EXPECT_EQ(after.accept_len[size_t(slot)], 0);
    for (int32_t s = 0; s < 12; ++s)
      if (s != 5 && s != 9) expect_slot_unchanged(v.config(), before, after, s);
  }
}

// docs/modes.md, issue 15: replay, fused-accept and two-phase agree bitwise, in every round's outputs and in
// every retired request's materialized state, over many rounds with joins, retirements, random
// acceptance and batches crossing buckets: two-phase eager as the reference, fused-accept, replay (its
// ring flushing at T + 1, every round, and only when full) and two-phase (its commit the graph's last
// node) replayed from graphs, and replay again with the sampler outside the graph. With a bf16 state
// replay rounds at its flushes only (docs/low_precision.md): its runs agree with each other, bitwise.
TEST(Modes, ReplayFusedAndTwoPhaseAgreeBitwiseOverManyRounds) {
  KDA_SKIP_UNLESS_ROUNDS_RUN();
  const int rounds = by_matrix(200, 20, 0);
  for (DType state : {DType::f32, DType::bf16}) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(std::string("state ") + to_string(state) + " seed=" + std::to_string(seed));
    HostEngineConfig base = modes_engine(Mode::two_phase, Exec::eager, seed);
    base.verifier.pool.state_dtype = state;
    base.verifier.model.layers = 2;
    if (runner().matrix != Matrix::full) base.verifier.model.heads = 1, base.verifier.model.value_heads = 2;
    struct Run {
      Mode mode;
      Exec exec;
      bool sampler_in_graph;
      int32_t flush_min = -1;  // replay: the default, T + 1
    };
    const int32_t T = base.verifier.tokens, R = 3 * T;
    // The executor leaves the other flushes to VerifierModes.TheRingAgreesBitwiseWhateverItsFlushMin.
    const std::vector<Run> runs = {{Mode::two_phase, Exec::eager, true},         {Mode::fused_accept, Exec::graph, true},
                                   {Mode::replay, Exec::graph, true},            {Mode::two_phase, Exec::graph, true},
                                   {Mode::replay, Exec::graph, false},           {Mode::replay, Exec::graph, true, 0},
                                   {Mode::replay, Exec::eager, true, R - T}};
    const size_t run_count = runner().matrix == Matrix::full ? runs.size() : 5;
    std::vector<std::unique_ptr<HostEngine>> engines;
    for (size_t i = 0; i < run_count; ++i) {
      const Run& run = runs[i];
      HostEngineConfig c = base;
      c.verifier.mode = run.mode;
      c.verifier.ring = ReplayRing{R, run.flush_min};
      c.runner.exec = run.exec;
      c.runner.sampler_in_graph = run.sampler_in_graph;
      engines.push_back(std::make_unique<HostEngine>(c));
    }
    std::set<size_t> batch_sizes;
    for (auto& e : engines) e->start(runner().stream);
    for (int r = 0; r < rounds; ++r)
      for (auto& e : engines) e->run_round(runner().stream);
    for (auto& e : engines) e->finish(runner().stream);
    for (const auto& r : engines[0]->rounds()) batch_sizes.insert(r.slots.size());
    EXPECT_GT(batch_sizes.size(), 3u) << "batches should cross buckets";
    EXPECT_GT(engines[0]->retired().size(), size_t(rounds / 10)) << "the run should retire requests along the way";
    for (size_t i = 1; i < engines.size(); ++i) {
      SCOPED_TRACE(std::string(to_string(runs[i].mode)) + " " + to_string(runs[i].exec) +
                   (runs[i].sampler_in_graph ? "" : ", sampler outside the graph") + " flush_min " +
                   std::to_string(runs[i].flush_min));
      const bool own_rounding = state != DType::f32 && runs[i].mode == Mode::replay;
      if (!own_rounding) expect_same_history(*engines[0], *engines[i]);
      else if (i != 2 && runs[i].flush_min == runs[2].flush_min) expect_same_history(*engines[2], *engines[i]);
      EXPECT_EQ(engines[i]->verifier().device_errors().count, 0u);
    }
  }
}

// Prefixes of a = 0 (a fresh request), 1 and T, in one batch and across rounds; then plain decode.
TEST(Modes, ReplayPrefixesOfZeroOneAndTAndPlainDecode) {
  KDA_SKIP_UNLESS_ROUNDS_RUN();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int32_t tokens : {4, 1}) {
    SCOPED_TRACE("T=" + std::to_string(tokens));
    ModeSet m(modes_verifier(Mode::replay, 3, tokens));
    for (auto& v : m.v) randomize_storage(*v, seed);
    const int32_t T = tokens;
    round_all(m, {3, 0, 11}, {1, T, 1}, rng);          // every slot fresh: a = 0
    round_all(m, {3, 0, 11, 5}, {T, 1, T, 1}, rng);    // a = 1, T, 1 and a fresh slot 5
    round_all(m, {11, 5, 3}, {1, T, T}, rng);          // a = T, 1, T
    std::vector<int32_t> accept_len(12);
    wait();
    detail::copy_to_host(runner().memory(), accept_len.data(), m.replay().accept_len(), 48);
    EXPECT_EQ(accept_len, (std::vector<int32_t>{1, 0, 0, T, 0, T, 0, 0, 0, 0, 0, 1}));
    round_all(m, {0, 3}, {T, 1}, rng);  // slot 0 replays a prefix that waited a round
    expect_same_materialized_pools(m, {0, 3, 5, 11});
  }
}

// Replay keeps no per-token states; its ring is the size docs/modes.md gives (R records of k and g in the io
// dtype and u in fp32 a slot, layer and head, each row rounded up to 16 bytes, and a cursor a slot), R
// and flush_min default to 3 T and T + 1, and a state transfer a round plus one on a flush is what it
// moves at most.
TEST(Modes, ReplayKeepsNoScratchAndItsRingIsTheSpecSize) {
  KDA_SKIP_UNLESS_ROUNDS_RUN();
  const VerifierConfig c = modes_verifier(Mode::replay);
  Verifier v(c);
  EXPECT_EQ(v.scratch_bytes(), 0u);
  EXPECT_EQ(v.scratch(), nullptr);
  const size_t T = size_t(c.tokens), H = size_t(c.model.heads), HV = size_t(c.model.value_heads);
  const size_t K = size_t(c.model.head_k), V = size_t(c.model.head_v), R = 3 * T;
  EXPECT_EQ(v.spec().ring.records, int32_t(R));
  EXPECT_EQ(v.spec().ring.flush_min, int32_t(T + 1));
  auto row = [](size_t bytes) { return (bytes + 15) / 16 * 16; };
  const size_t per_slot_and_layer = row(R * (H * K + HV * K) * dtype_size(c.io_dtype)) + row(R * HV * V * sizeof(float));
  const size_t slots = size_t(c.pool.slots);
  EXPECT_EQ(v.ring_bytes(), per_slot_and_layer * slots * size_t(c.model.layers) + 2 * slots * sizeof(int32_t));
  EXPECT_EQ(state_transfers_per_round(Mode::replay, c.tokens), 2);
  EXPECT_EQ(state_transfers_per_round(Mode::fused_accept, c.tokens), 1 + c.tokens);
  VerifierConfig fused = c;
  fused.mode = Mode::fused_accept;
  EXPECT_EQ(Verifier(fused).ring_bytes(), 0u);
}

// Materializing mid-stream (a prefix-cache snapshot, say) changes nothing that follows, in any mode; in
// replay it applies the pending prefix once: twice equals once, and a slot with a = 0 is left alone.
TEST(Modes, MaterializeMidStreamChangesNothingThatFollows) {
  KDA_SKIP_UNLESS_ROUNDS_RUN();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  ModeSet m(modes_verifier(Mode::replay));
  for (auto& v : m.v) randomize_storage(*v, seed);
  const std::vector<int32_t> slots = {4, 9, 1};
  round_all(m, slots, {2, 4, 1}, rng);
  round_all(m, slots, {3, 1, 4}, rng);
  expect_same_materialized_pools(m, {9, 1});
  const StorageSnapshot once = snapshot(m.replay());
  const std::vector<int32_t> again = {9, 1, 6};  // slot 6 never ran: a = 0
  m.replay().enqueue_materialize(runner().stream, again.data(), 3);
  EXPECT_TRUE(snapshot(m.replay()) == once);
  round_all(m, slots, {4, 2, 2}, rng);
  round_all(m, slots, {1, 1, 3}, rng);
  expect_same_materialized_pools(m, slots);
}

}  // namespace
}  // namespace kdagraph::test
