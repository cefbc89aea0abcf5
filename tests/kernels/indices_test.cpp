// docs/indices.md on the program's runner (tests/common/runner.h [TAG_RUNNERS]): the five required behaviours of
// the fused-accept index build, each its own test, over cases with S = T and S > T, slots 0 and P - 1,
// padded rows in the middle and at the end; what each mode addresses; random batches with padding, bad
// slots and out-of-range accept lengths against docs/indices.md's rules written out here (and, off the CPU,
// the CPU build bitwise); what only the device sees, clamped and recorded.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kernels/indices.h"
#include "kernels/verify.h"
#include "tests/common/runner.h"
#include "tests/common/verify_case.h"
#include "tests/common/verify_runs.h"

namespace kdagraph::test {
namespace {

// One index build: its inputs and, once run, what it wrote (every output poisoned with 77 first, unless
// it keeps an earlier build's to show that nothing of it survives).
struct IndexRun {
  int32_t P = 0, S = 0, T = 0, N = 0;
  std::vector<int32_t> slots, n_real{0};
  std::vector<int32_t> accept_len;  // [P], or [P + 2] with a guard word at either end (guarded)
  bool guarded = false;
  std::vector<int32_t> round_parity;  // [P], or empty: no parity kept
  Mode mode = Mode::fused_accept;
  // Replay: the slots' ring cursors [P] (all 0 unless a case sets them) and the ring.
  std::vector<int32_t> slot_pending, slot_start;
  ReplayRing ring;
  std::vector<int32_t> row_slot, seed_pool, seed_scratch, seed_accept, write_row, row_parity, ring_pending, ring_start,
      ring_flush;
  std::vector<DeviceErrorWord> errors{DeviceErrorWord{}};

  IndexRun(int32_t pool_slots, int32_t scratch_steps, int32_t tokens, std::vector<int32_t> batch, int32_t real)
      : P(pool_slots), S(scratch_steps), T(tokens), N(int32_t(batch.size())), slots(std::move(batch)), n_real{real} {
    poison();
  }
  void poison() {
    for (auto* v : {&row_slot, &seed_pool, &seed_scratch, &seed_accept, &row_parity, &ring_pending, &ring_start,
                    &ring_flush})
      v->assign(size_t(N), 77);
    write_row.assign(size_t(N) * size_t(T), 77);
  }
  // The slots' accept lengths, as the build reads them.
  int32_t accept_of(int32_t slot) const { return accept_len[size_t(slot + (guarded ? 1 : 0))]; }

  IndexBuildParams params(Placement& at) {
    IndexBuildParams p;
    p.slots = at.in(slots);
    p.n_real = at.in(n_real);
    p.accept_len = at.in(accept_len) + (guarded ? 1 : 0);
    p.pool_slots = P;
    p.scratch_steps = S;
    p.tokens = T;
    p.rows = N;
    p.policy = mode_policy(mode);
    p.round_parity = round_parity.empty() ? nullptr : at.in(round_parity);
    if (mode_policy(mode).ring) {
      if (slot_pending.empty()) slot_pending.assign(size_t(P), 0);
      if (slot_start.empty()) slot_start.assign(size_t(P), 0);
      if (ring.records == 0) ring = ReplayRing{3 * T, T + 1};
      p.ring_pending = at.in(slot_pending);
      p.ring_start = at.in(slot_start);
      p.ring = ring;
    }
    p.errors = at.out(errors);
    p.out.capacity = N;
    p.out.tokens = T;
    p.out.row_slot = at.out(row_slot);
    p.out.seed_pool = at.out(seed_pool);
    p.out.seed_scratch = at.out(seed_scratch);
    p.out.seed_accept = at.out(seed_accept);
    p.out.write_row = at.out(write_row);
    p.out.row_parity = at.out(row_parity);
    p.out.ring_pending = at.out(ring_pending);
    p.out.ring_start = at.out(ring_start);
    p.out.ring_flush = at.out(ring_flush);
    return p;
  }
  void run() {
    Placement at(runner().memory());
    run_op<BuildIndicesOp>(params(at));
    at.fetch();
  }
  // Every output, in one array: row_slot, seed_pool, seed_scratch, seed_accept, write_row, row_parity,
  // ring_pending, ring_start, ring_flush.
  std::vector<int32_t> all() const {
    std::vector<int32_t> out;
    for (const auto* v : {&row_slot, &seed_pool, &seed_scratch, &seed_accept, &write_row, &row_parity, &ring_pending,
                          &ring_start, &ring_flush})
      out.insert(out.end(), v->begin(), v->end());
    return out;
  }
};

struct IndexCase {
  std::string name;
  int32_t P, S, T;
  std::vector<int32_t> slots;  // -1: padding
  int32_t n_real;
};

std::vector<IndexCase> cases() {
  return {
      {"S_eq_T_padding_at_end", 6, 4, 4, {0, 5, 2, -1, -1}, 3},
      {"S_gt_T_padding_in_middle", 6, 8, 3, {5, -1, 0, 3}, 4},
      {"S_gt_T_n_real_cuts", 9, 6, 2, {8, 0, 4, 7}, 2},
      {"single_row_last_slot", 3, 2, 2, {2}, 1},
      {"plain_decode_T1", 4, 1, 1, {1, 3, -1, 0}, 4},
  };
}

IndexRun run_case(const IndexCase& c, std::vector<int32_t> accept, Mode mode = Mode::fused_accept,
                  std::vector<int32_t> parity = {}) {
  IndexRun r(c.P, c.S, c.T, c.slots, c.n_real);
  r.accept_len = std::move(accept);
  r.mode = mode;
  r.round_parity = std::move(parity);
  r.run();
  return r;
}

std::vector<int32_t> random_accepts(int32_t P, int32_t S, std::mt19937_64& rng) {
  std::vector<int32_t> a(static_cast<size_t>(P));
  for (auto& x : a) x = std::uniform_int_distribution<int32_t>(0, S)(rng);
  return a;
}

bool is_real(const IndexCase& c, int32_t n) { return n < c.n_real && c.slots[size_t(n)] >= 0; }

TEST(Indices, RealRowsAddressExactlyTheirOwnScratchRows) {
  KDA_SKIP_WITHOUT_RUNNER();
  std::mt19937_64 rng(fresh_seed());
  for (const IndexCase& c : cases()) {
    SCOPED_TRACE(c.name);
    const auto accept = random_accepts(c.P, c.S, rng);
    const IndexRun b = run_case(c, accept);
    for (int32_t n = 0; n < int32_t(c.slots.size()); ++n) {
      if (!is_real(c, n)) continue;
      const int32_t slot = c.slots[size_t(n)];
      EXPECT_EQ(b.row_slot[size_t(n)], slot);
      for (int32_t t = 0; t < c.T; ++t) {
        const int32_t row = b.write_row[size_t(n) * c.T + t];
        EXPECT_EQ(row, slot * c.S + t);
        EXPECT_EQ(row / c.S, slot) << "row " << n << " writes outside its slot";
      }
      // The seed is exactly one of pool[slot] or the slot's own scratch row a - 1.
      const int32_t a = accept[size_t(slot)];
      EXPECT_EQ(b.seed_pool[size_t(n)], a == 0 ? slot : -1);
      EXPECT_EQ(b.seed_scratch[size_t(n)], a == 0 ? -1 : slot * c.S + a - 1);
    }
    EXPECT_EQ(b.errors[0].count, 0u);
  }
}

// The mode's policy says what rows address: two-phase seeds from the pool whatever accept_len holds
// and writes per-token rows; replay seeds from the pool and writes no scratch row at all.
TEST(Indices, TheModeDecidesWhereSeedsAndPostStatesGo) {
  KDA_SKIP_WITHOUT_RUNNER();
  std::mt19937_64 rng(fresh_seed());
  for (Mode mode : {Mode::two_phase, Mode::replay}) {
    for (const IndexCase& c : cases()) {
      SCOPED_TRACE(std::string(to_string(mode)) + " " + c.name);
      const auto accept = random_accepts(c.P, c.T, rng);
      const IndexRun b = run_case(c, accept, mode);
      for (int32_t n = 0; n < int32_t(c.slots.size()); ++n) {
        if (!is_real(c, n)) continue;
        const int32_t slot = c.slots[size_t(n)];
        EXPECT_EQ(b.seed_pool[size_t(n)], slot);
        EXPECT_EQ(b.seed_scratch[size_t(n)], -1);
        EXPECT_EQ(b.seed_accept[size_t(n)], accept[size_t(slot)]);
        for (int32_t t = 0; t < c.T; ++t)
          EXPECT_EQ(b.write_row[size_t(n) * c.T + t], mode == Mode::replay ? -1 : slot * c.S + t);
      }
    }
  }
}

// The round parity (a conv's halves) is gathered per row where the storage keeps one, -1 for padded
// rows and wherever it is not kept.
TEST(Indices, TheRoundParityIsGatheredWhereKept) {
  KDA_SKIP_WITHOUT_RUNNER();
  std::mt19937_64 rng(fresh_seed());
  for (bool kept : {true, false}) {
    for (const IndexCase& c : cases()) {
      SCOPED_TRACE(std::string(kept ? "kept " : "not kept ") + c.name);
      std::vector<int32_t> parity(size_t(c.P));
      for (auto& p : parity) p = int32_t(rng() % 2);
      const IndexRun b = run_case(c, random_accepts(c.P, c.T, rng), Mode::fused_accept,
                                  kept ? parity : std::vector<int32_t>{});
      for (int32_t n = 0; n < int32_t(c.slots.size()); ++n) {
        const bool real = is_real(c, n) && kept;
        EXPECT_EQ(b.row_parity[size_t(n)], real ? parity[size_t(c.slots[size_t(n)])] : -1) << "row " << n;
      }
    }
  }
}

// docs/modes.md replay: each real row gets its slot's ring cursor and whether the round flushes (at least
// flush_min pending records, or too many for another round: pending + T > R - T); padded rows -1. A
// cursor outside the ring (pending above R - T, a start outside [0, R)) is clamped and recorded.
TEST(Indices, TheRingCursorIsGatheredAndTheFlushDecided) {
  KDA_SKIP_WITHOUT_RUNNER();
  std::mt19937_64 rng(fresh_seed());
  for (const IndexCase& c : cases()) {
    for (int32_t flush_min : {0, c.T + 1, 2 * c.T}) {
      SCOPED_TRACE(c.name + " flush_min " + std::to_string(flush_min));
      IndexRun r(c.P, c.S, c.T, c.slots, c.n_real);
      r.mode = Mode::replay;
      r.accept_len = random_accepts(c.P, c.T, rng);
      r.ring = ReplayRing{3 * c.T, flush_min};
      const int32_t R = r.ring.records;
      r.slot_pending.resize(size_t(c.P));
      r.slot_start.resize(size_t(c.P));
      for (int32_t slot = 0; slot < c.P; ++slot) {
        r.slot_pending[size_t(slot)] = int32_t(rng() % uint64_t(R - c.T + 1));
        r.slot_start[size_t(slot)] = int32_t(rng() % uint64_t(R));
      }
      const int32_t first = c.slots[0];  // every case's row 0 is real: its cursor, out of range
      r.slot_pending[size_t(first)] = R - c.T + 1 + int32_t(rng() % 4);
      r.slot_start[size_t(first)] = -1 - int32_t(rng() % 4);
      r.run();
      for (int32_t n = 0; n < int32_t(c.slots.size()); ++n) {
        if (!is_real(c, n)) {
          EXPECT_EQ(r.ring_pending[size_t(n)], -1) << "row " << n;
          EXPECT_EQ(r.ring_start[size_t(n)], -1) << "row " << n;
          EXPECT_EQ(r.ring_flush[size_t(n)], -1) << "row " << n;
          continue;
        }
        const int32_t slot = c.slots[size_t(n)];
        const int32_t pending = slot == first ? R - c.T : r.slot_pending[size_t(slot)];
        const int32_t start = slot == first ? 0 : r.slot_start[size_t(slot)];
        EXPECT_EQ(r.ring_pending[size_t(n)], pending) << "row " << n;
        EXPECT_EQ(r.ring_start[size_t(n)], start) << "row " << n;
        const bool flush = pending >= flush_min || pending + c.T > R - c.T;
        EXPECT_EQ(r.ring_flush[size_t(n)], flush ? 1 : 0) << "row " << n << " pending " << pending;
      }
      EXPECT_EQ(r.errors[0].count, 2u) << "the first row's pending count and start";
      EXPECT_EQ(DeviceErrorCode(r.errors[0].code), DeviceErrorCode::ring_out_of_range);
    }
  }
}

// docs/graphs.md: a verify that loads its seed before its grid dependency wait predicts it from the batch and
// the slots' accept lengths and parities with the build's own functions, unchecked (resolve_row without
// the repeated-slot scan). For every row the build makes real, the prediction is what the build writes.
TEST(Indices, APredictionFromPreRoundDataIsWhatTheBuildWrites) {
  KDA_SKIP_WITHOUT_RUNNER();
  std::mt19937_64 rng(fresh_seed());
  for (Mode mode : {Mode::two_phase, Mode::fused_accept, Mode::replay}) {
    for (const IndexCase& c : cases()) {
      SCOPED_TRACE(std::string(to_string(mode)) + " " + c.name);
      std::vector<int32_t> parity(size_t(c.P));
      for (auto& p : parity) p = int32_t(rng() % 2);
      const auto accept = random_accepts(c.P, mode == Mode::replay ? c.T : c.S, rng);
      IndexRun b = run_case(c, accept, mode, parity);
      Placement host(Backend::cpu);
      const IndexBuildParams p = b.params(host);
      for (int32_t n = 0; n < b.N; ++n) {
        const RowIndices predicted = row_indices(p, resolve_row(p, n, false));
        if (b.row_slot[size_t(n)] < 0) continue;  // padding: the build's word is final
        EXPECT_EQ(predicted.slot, b.row_slot[size_t(n)]) << "row " << n;
        EXPECT_EQ(predicted.accept, b.seed_accept[size_t(n)]) << "row " << n;
        EXPECT_EQ(predicted.seed_pool, b.seed_pool[size_t(n)]) << "row " << n;
        EXPECT_EQ(predicted.seed_scratch, b.seed_scratch[size_t(n)]) << "row " << n;
        EXPECT_EQ(predicted.parity, b.row_parity[size_t(n)]) << "row " << n;
        EXPECT_EQ(predicted.ring_pending, b.ring_pending[size_t(n)]) << "row " << n;
        EXPECT_EQ(predicted.ring_start, b.ring_start[size_t(n)]) << "row " << n;
        EXPECT_EQ(predicted.ring_flush, b.ring_flush[size_t(n)]) << "row " << n;
      }
    }
  }
}

TEST(Indices, PaddedRowsAreFullyNegative) {
  KDA_SKIP_WITHOUT_RUNNER();
  std::mt19937_64 rng(fresh_seed());
  for (const IndexCase& c : cases()) {
    SCOPED_TRACE(c.name);
    const IndexRun b = run_case(c, random_accepts(c.P, c.S, rng));
    int padded = 0;
    for (int32_t n = 0; n < int32_t(c.slots.size()); ++n) {
      if (is_real(c, n)) continue;
      ++padded;
      EXPECT_LT(b.row_slot[size_t(n)], 0);
      EXPECT_LT(b.seed_pool[size_t(n)], 0);
      EXPECT_LT(b.seed_scratch[size_t(n)], 0);
      EXPECT_LT(b.seed_accept[size_t(n)], 0);
      for (int32_t t = 0; t < c.T; ++t) EXPECT_LT(b.write_row[size_t(n) * c.T + t], 0);
    }
    if (c.name != "single_row_last_slot") {
      EXPECT_GT(padded, 0);
    }
  }
}

TEST(Indices, AcceptGatherReadsThePoolsValuesAndStaysInBounds) {
  KDA_SKIP_WITHOUT_RUNNER();
  std::mt19937_64 rng(fresh_seed());
  for (const IndexCase& c : cases()) {
    SCOPED_TRACE(c.name);
    // accept_len sits between two guard words no in-range gather can see.
    const auto accept = random_accepts(c.P, c.S, rng);
    IndexRun b(c.P, c.S, c.T, c.slots, c.n_real);
    b.guarded = true;
    b.accept_len.assign(size_t(c.P) + 2, 999);
    std::copy(accept.begin(), accept.end(), b.accept_len.begin() + 1);
    b.run();
    for (int32_t n = 0; n < int32_t(c.slots.size()); ++n) {
      const int32_t want = is_real(c, n) ? accept[size_t(c.slots[size_t(n)])] : -1;
      EXPECT_EQ(b.seed_accept[size_t(n)], want) << "row " << n;
    }
    EXPECT_EQ(b.errors[0].count, 0u) << "a guard word was read as an accept length";
  }
}

// All layers of one forward read one build. Rebuilding before each layer (after the previous layer's
// verify wrote its scratch rows) must give the same rows: the build depends only on slots, n_real and
// accept_len, which a verify never writes.
TEST(Indices, OneBuildSharedByAllLayersEqualsABuildPerLayer) {
  KDA_SKIP_WITHOUT_RUNNER();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  CaseShape s;
  s.rows = 4;
  s.tokens = 3;
  s.slots = 6;
  s.scratch_steps = 4;
  const std::vector<int32_t> batch = {5, 1, 3, -1}, accept = {0, 2, 0, 1, 4, 3};
  IndexRun shared(s.slots, s.scratch_steps, s.tokens, batch, 3);
  shared.accept_len = accept;
  shared.run();
  for (int l = 0; l < 3; ++l) {
    VerifyCase layer(s, seed + 1 + uint64_t(l), batch, accept);  // this layer's verify writes scratch
    run_verify(layer);
    IndexRun again(s.slots, s.scratch_steps, s.tokens, batch, 3);
    again.accept_len = layer.accept_len;  // untouched by the verify
    again.run();
    EXPECT_EQ(first_difference(again.all(), shared.all()), -1) << "layer " << l;
  }
}

// docs/indices.md: a later batch built into the same buffers leaves nothing of the earlier one, and a build
// after accept_len changed picks up the new seeds.
TEST(Indices, ADifferentBatchBuildsDifferentRowsAndNothingStaleSurvives) {
  KDA_SKIP_WITHOUT_RUNNER();
  std::mt19937_64 rng(fresh_seed());
  const int32_t P = 8, S = 5, T = 4, N = 6;
  IndexRun b(P, S, T, {7, 0, 3, 5, 1, 2}, N);
  b.accept_len = random_accepts(P, S, rng);
  b.run();
  const auto first = b.write_row;
  b.slots = {4, 6, 0, 0, 0, 0};  // stale slots beyond n_real must not count
  b.n_real = {2};
  b.run();
  EXPECT_NE(b.write_row, first);
  for (int32_t n = 0; n < N; ++n) {
    for (int32_t t = 0; t < T; ++t) {
      const int32_t want = n == 0 ? 4 * S + t : n == 1 ? 6 * S + t : -1;
      EXPECT_EQ(b.write_row[size_t(n) * T + t], want) << "row " << n << " step " << t;
    }
    EXPECT_EQ(b.row_slot[size_t(n)], n == 0 ? 4 : n == 1 ? 6 : -1);
  }
  b.accept_len[4] = 0;
  b.accept_len[6] = 2;
  b.run();
  EXPECT_EQ(b.seed_pool[0], 4);
  EXPECT_EQ(b.seed_scratch[0], -1);
  EXPECT_EQ(b.seed_pool[1], -1);
  EXPECT_EQ(b.seed_scratch[1], 6 * S + 1);
}

// docs/errors.md: what only the device can see is clamped and recorded, never followed out of bounds.
TEST(Indices, BadDeviceValuesAreClampedAndRecorded) {
  KDA_SKIP_WITHOUT_RUNNER();
  const int32_t P = 4, S = 3, T = 3;
  const IndexRun b = run_case(IndexCase{"bad", P, S, T, {2, 9, 2, 1}, 4}, {0, 7, 1, 0});  // slot 1's 7 > S
  EXPECT_EQ(b.row_slot[0], 2);
  EXPECT_EQ(b.row_slot[1], -1) << "slot 9 is out of range: padding";
  EXPECT_EQ(b.row_slot[2], -1) << "slot 2 repeats row 0: padding";
  EXPECT_EQ(b.row_slot[3], 1);
  EXPECT_EQ(b.seed_scratch[3], 1 * S + S - 1) << "accept 7 clamps to S";
  EXPECT_EQ(b.errors[0].count, 3u);
  if (runner().kind == RunnerKind::cpu) {  // the device records whichever error it meets first
    EXPECT_EQ(b.errors[0].code, uint32_t(DeviceErrorCode::slot_out_of_range));
    EXPECT_EQ(b.errors[0].row, 1);
    EXPECT_EQ(b.errors[0].value, 9);
  }
}

// Random batches (distinct slots for most rows, with padding, out-of-range and repeated slots, accept
// lengths mostly in [0, S], n_real anywhere in [-1, N + 1]; up to 300 rows, so several blocks) against
// the rules of docs/indices.md, docs/errors.md written out here, and, off the CPU, the CPU build bitwise.
IndexRun random_run(std::mt19937_64& rng) {
  auto pick = [&](int32_t lo, int32_t hi) { return int32_t(lo + int64_t(rng() % uint64_t(hi - lo + 1))); };
  const int32_t P = pick(1, 320), S = pick(1, 9), T = pick(1, S), N = pick(1, 300);
  std::vector<int32_t> free_slots(static_cast<size_t>(P)), slots;
  for (int32_t s = 0; s < P; ++s) free_slots[size_t(s)] = s;
  std::shuffle(free_slots.begin(), free_slots.end(), rng);
  for (int32_t n = 0; n < N; ++n) {
    const int32_t kind = pick(0, 19);
    int32_t slot = n < P ? free_slots[size_t(n)] : -1;
    if (kind == 0) slot = -1;
    if (kind == 1) slot = P + pick(0, 3);
    if (kind == 2) slot = -2 - pick(0, 3);
    if (kind == 3 && n > 0) slot = slots[size_t(pick(0, n - 1))];
    slots.push_back(slot);
  }
  IndexRun r(P, S, T, slots, pick(0, 9) == 0 ? pick(-1, N + 1) : pick(0, N));
  for (int32_t s = 0; s < P; ++s) {
    const int32_t kind = pick(0, 19);
    r.accept_len.push_back(kind == 0 ? -pick(1, 3) : kind == 1 ? S + pick(1, 3) : pick(0, S));
  }
  return r;
}

TEST(Indices, RandomBatchesFollowTheRules) {
  KDA_SKIP_WITHOUT_RUNNER();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int trials = runner().matrix == Matrix::thread_lanes ? 40 : 200;
  for (int trial = 0; trial < trials; ++trial) {
    IndexRun r = random_run(rng);
    SCOPED_TRACE("trial " + std::to_string(trial) + " N=" + std::to_string(r.N) + " P=" + std::to_string(r.P) +
                 " T=" + std::to_string(r.T) + " n_real=" + std::to_string(r.n_real[0]));
    r.run();
    const int32_t real = std::clamp(r.n_real[0], 0, r.N);
    uint32_t recorded = 0;
    std::set<int32_t> taken;
    for (int32_t n = 0; n < r.N; ++n) {
      int32_t slot = n < real ? r.slots[size_t(n)] : -1;
      if (n < real && slot >= 0 && slot < r.P && !taken.insert(slot).second) slot = -1, ++recorded;  // repeated
      else if (n < real && (slot >= r.P || slot < -1)) slot = -1, ++recorded;                          // out of range
      int32_t a = slot >= 0 ? r.accept_of(slot) : -1;
      if (slot >= 0 && (a < 0 || a > r.S)) a = std::clamp(a, 0, r.S), ++recorded;
      ASSERT_EQ(r.row_slot[size_t(n)], slot) << "row " << n;
      ASSERT_EQ(r.seed_accept[size_t(n)], a) << "row " << n;
      ASSERT_EQ(r.seed_pool[size_t(n)], slot >= 0 && a == 0 ? slot : -1) << "row " << n;
      ASSERT_EQ(r.seed_scratch[size_t(n)], slot >= 0 && a > 0 ? slot * r.S + a - 1 : -1) << "row " << n;
      for (int32_t t = 0; t < r.T; ++t)
        ASSERT_EQ(r.write_row[size_t(n) * r.T + t], slot >= 0 ? slot * r.S + t : -1) << "row " << n << " t " << t;
    }
    EXPECT_EQ(r.errors[0].count, recorded);
    EXPECT_EQ(r.errors[0].code == 0, recorded == 0);
    if (runner().kind != RunnerKind::cpu) {
      IndexRun cpu = r;
      cpu.poison();
      cpu.errors = {DeviceErrorWord{}};
      Placement host(Backend::cpu);
      build_indices_cpu(cpu.params(host));
      EXPECT_EQ(first_difference(r.all(), cpu.all()), -1) << "index entry against the CPU build";
    }
    if (HasFailure()) return;
  }
}

}  // namespace
}  // namespace kdagraph::test
