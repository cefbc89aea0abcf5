// SPEC §4: the five required behaviours of the fused-accept index build, each its own test, over cases
// with S = T and S > T, slots 0 and P - 1, padded rows in the middle and at the end.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kernels/indices.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {
namespace {

// The index arrays a build writes, held in separate vectors.
RoundIndices arrays(int32_t rows, int32_t tokens, std::vector<int32_t>& row_slot, std::vector<int32_t>& seed_pool,
                    std::vector<int32_t>& seed_scratch, std::vector<int32_t>& seed_accept,
                    std::vector<int32_t>& write_row) {
  RoundIndices idx;
  idx.capacity = rows;
  idx.tokens = tokens;
  idx.row_slot = row_slot.data();
  idx.seed_pool = seed_pool.data();
  idx.seed_scratch = seed_scratch.data();
  idx.seed_accept = seed_accept.data();
  idx.write_row = write_row.data();
  return idx;
}

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

struct Built {
  std::vector<int32_t> row_slot, seed_pool, seed_scratch, seed_accept, write_row;
  DeviceErrorWord errors;
};

Built build(const IndexCase& c, const std::vector<int32_t>& accept_len, const int32_t* accept_ptr = nullptr,
            Mode mode = Mode::fused_accept) {
  const int32_t N = int32_t(c.slots.size());
  Built b;
  b.row_slot.assign(size_t(N), 77);
  b.seed_pool.assign(size_t(N), 77);
  b.seed_scratch.assign(size_t(N), 77);
  b.seed_accept.assign(size_t(N), 77);
  b.write_row.assign(size_t(N) * c.T, 77);
  IndexBuildParams p;
  p.slots = c.slots.data();
  p.n_real = &c.n_real;
  p.accept_len = accept_ptr ? accept_ptr : accept_len.data();
  p.pool_slots = c.P;
  p.scratch_steps = c.S;
  p.tokens = c.T;
  p.rows = N;
  p.errors = &b.errors;
  p.policy = mode_policy(mode);
  const std::vector<int32_t> parity(size_t(c.P), 0);
  p.round_parity = parity.data();
  p.out = arrays(N, c.T, b.row_slot, b.seed_pool, b.seed_scratch, b.seed_accept, b.write_row);
  build_indices_cpu(p);
  return b;
}

std::vector<int32_t> random_accepts(int32_t P, int32_t S, std::mt19937_64& rng) {
  std::vector<int32_t> a(static_cast<size_t>(P));
  for (auto& x : a) x = std::uniform_int_distribution<int32_t>(0, S)(rng);
  return a;
}

bool is_real(const IndexCase& c, int32_t n) { return n < c.n_real && c.slots[size_t(n)] >= 0; }

TEST(Indices, RealRowsAddressExactlyTheirOwnScratchRows) {
  std::mt19937_64 rng(fresh_seed());
  for (const IndexCase& c : cases()) {
    SCOPED_TRACE(c.name);
    const auto accept = random_accepts(c.P, c.S, rng);
    const Built b = build(c, accept);
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
    EXPECT_EQ(b.errors.count, 0u);
  }
}

// The mode's policy says what rows address: two-phase seeds from the pool whatever accept_len holds
// and writes per-token rows; replay seeds from the pool and writes no scratch row at all.
TEST(Indices, TheModeDecidesWhereSeedsAndPostStatesGo) {
  std::mt19937_64 rng(fresh_seed());
  for (Mode mode : {Mode::two_phase, Mode::replay}) {
    for (const IndexCase& c : cases()) {
      SCOPED_TRACE(std::string(to_string(mode)) + " " + c.name);
      const auto accept = random_accepts(c.P, c.T, rng);
      const Built b = build(c, accept, nullptr, mode);
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

// The round parity (replay's token cache rows, a conv's halves) is gathered per row where the storage
// keeps one, -1 for padded rows and wherever it is not kept; replay's cache rows follow it.
TEST(Indices, TheRoundParityIsGatheredWhereKept) {
  std::mt19937_64 rng(fresh_seed());
  for (Mode mode : {Mode::fused_accept, Mode::replay}) {
    for (bool kept : {true, false}) {
      if (mode == Mode::replay && !kept) continue;  // replay always keeps it
      for (const IndexCase& c : cases()) {
        SCOPED_TRACE(std::string(to_string(mode)) + (kept ? " kept " : " not kept ") + c.name);
        const int32_t N = int32_t(c.slots.size());
        std::vector<int32_t> parity(size_t(c.P));
        for (auto& p : parity) p = int32_t(rng() % 2);
        const auto accept = random_accepts(c.P, c.T, rng);
        const size_t rows = static_cast<size_t>(N);
        std::vector<int32_t> row_slot(rows), seed_pool(rows), seed_scratch(rows), seed_accept(rows),
            write_row(rows * size_t(c.T)), row_parity(rows, 77), replay_from(rows, 77), cache_to(rows, 77);
        IndexBuildParams p;
        p.slots = c.slots.data();
        p.n_real = &c.n_real;
        p.accept_len = accept.data();
        p.pool_slots = c.P;
        p.scratch_steps = c.S;
        p.tokens = c.T;
        p.rows = N;
        p.policy = mode_policy(mode);
        p.round_parity = kept ? parity.data() : nullptr;
        p.out = arrays(N, c.T, row_slot, seed_pool, seed_scratch, seed_accept, write_row);
        p.out.row_parity = row_parity.data();
        p.out.replay_from = replay_from.data();
        p.out.cache_to = cache_to.data();
        build_indices_cpu(p);
        for (int32_t n = 0; n < N; ++n) {
          const int32_t slot = c.slots[size_t(n)];
          if (!is_real(c, n) || !kept) {
            EXPECT_EQ(row_parity[size_t(n)], -1) << "row " << n;
            continue;
          }
          EXPECT_EQ(row_parity[size_t(n)], parity[size_t(slot)]) << "row " << n;
          if (mode != Mode::replay) continue;
          EXPECT_EQ(cache_to[size_t(n)], slot * 2 + 1 - parity[size_t(slot)]) << "row " << n;
          EXPECT_EQ(replay_from[size_t(n)], accept[size_t(slot)] > 0 ? slot * 2 + parity[size_t(slot)] : -1) << "row " << n;
        }
      }
    }
  }
}

// SPEC §5: a verify that loads its seed before its grid dependency wait predicts it from the batch and
// the slots' accept lengths and parities with the build's own functions, unchecked (resolve_row without
// the repeated-slot scan). For every row the build makes real, the prediction is what the build writes.
TEST(Indices, APredictionFromPreRoundDataIsWhatTheBuildWrites) {
  std::mt19937_64 rng(fresh_seed());
  for (Mode mode : {Mode::two_phase, Mode::fused_accept, Mode::replay}) {
    for (const IndexCase& c : cases()) {
      SCOPED_TRACE(std::string(to_string(mode)) + " " + c.name);
      const int32_t N = int32_t(c.slots.size());
      std::vector<int32_t> parity(size_t(c.P));
      for (auto& p : parity) p = int32_t(rng() % 2);
      const auto accept = random_accepts(c.P, mode == Mode::replay ? c.T : c.S, rng);
      const size_t rows = static_cast<size_t>(N);
      std::vector<int32_t> row_slot(rows), seed_pool(rows), seed_scratch(rows), seed_accept(rows),
          write_row(rows * size_t(c.T)), row_parity(rows), replay_from(rows), cache_to(rows);
      IndexBuildParams p;
      p.slots = c.slots.data();
      p.n_real = &c.n_real;
      p.accept_len = accept.data();
      p.pool_slots = c.P;
      p.scratch_steps = c.S;
      p.tokens = c.T;
      p.rows = N;
      p.policy = mode_policy(mode);
      p.round_parity = parity.data();
      p.out = arrays(N, c.T, row_slot, seed_pool, seed_scratch, seed_accept, write_row);
      p.out.row_parity = row_parity.data();
      p.out.replay_from = replay_from.data();
      p.out.cache_to = cache_to.data();
      build_indices_cpu(p);
      for (int32_t n = 0; n < N; ++n) {
        const RowIndices predicted = row_indices(p, resolve_row(p, n, false));
        if (row_slot[size_t(n)] < 0) continue;  // padding: the build's word is final
        EXPECT_EQ(predicted.slot, row_slot[size_t(n)]) << "row " << n;
        EXPECT_EQ(predicted.accept, seed_accept[size_t(n)]) << "row " << n;
        EXPECT_EQ(predicted.seed_pool, seed_pool[size_t(n)]) << "row " << n;
        EXPECT_EQ(predicted.seed_scratch, seed_scratch[size_t(n)]) << "row " << n;
        EXPECT_EQ(predicted.parity, row_parity[size_t(n)]) << "row " << n;
        EXPECT_EQ(predicted.replay_from, replay_from[size_t(n)]) << "row " << n;
        EXPECT_EQ(predicted.cache_to, cache_to[size_t(n)]) << "row " << n;
      }
    }
  }
}

TEST(Indices, PaddedRowsAreFullyNegative) {
  std::mt19937_64 rng(fresh_seed());
  for (const IndexCase& c : cases()) {
    SCOPED_TRACE(c.name);
    const Built b = build(c, random_accepts(c.P, c.S, rng));
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
  std::mt19937_64 rng(fresh_seed());
  for (const IndexCase& c : cases()) {
    SCOPED_TRACE(c.name);
    // accept_len sits between two guard words no in-range gather can see.
    const int32_t guard = 999;
    std::vector<int32_t> guarded(size_t(c.P) + 2, guard);
    const auto accept = random_accepts(c.P, c.S, rng);
    std::copy(accept.begin(), accept.end(), guarded.begin() + 1);
    const Built b = build(c, {}, guarded.data() + 1);
    for (int32_t n = 0; n < int32_t(c.slots.size()); ++n) {
      const int32_t want = is_real(c, n) ? accept[size_t(c.slots[size_t(n)])] : -1;
      EXPECT_EQ(b.seed_accept[size_t(n)], want) << "row " << n;
    }
    EXPECT_EQ(b.errors.count, 0u) << "a guard word was read as an accept length";
  }
}

// All layers of one forward read one build. Rebuilding before each layer (after the previous layer's
// verify wrote its scratch rows) must give the same rows: the build depends only on slots, n_real and
// accept_len, which a verify never writes.
TEST(Indices, OneBuildSharedByAllLayersEqualsABuildPerLayer) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  CaseShape s;
  s.rows = 4;
  s.tokens = 3;
  s.slots = 6;
  s.scratch_steps = 4;
  s.head_k = s.head_v = 16;
  const int layers = 3;
  std::vector<int32_t> accept = {0, 2, 0, 1, 4, 3};
  VerifyCase shared(s, seed, {5, 1, 3, -1}, accept);
  const std::vector<int32_t> first_rows = shared.write_row, first_pool = shared.seed_pool,
                             first_scratch = shared.seed_scratch;
  for (int l = 0; l < layers; ++l) {
    VerifyCase per_layer(s, seed + 1 + uint64_t(l), {5, 1, 3, -1}, accept);
    verify_cpu(per_layer.params());  // this layer writes scratch; accept_len is untouched
    per_layer.build_indices();
    EXPECT_EQ(per_layer.write_row, first_rows) << "layer " << l;
    EXPECT_EQ(per_layer.seed_pool, first_pool) << "layer " << l;
    EXPECT_EQ(per_layer.seed_scratch, first_scratch) << "layer " << l;
  }
}

TEST(Indices, ADifferentBatchBuildsDifferentRowsAndNothingStaleSurvives) {
  std::mt19937_64 rng(fresh_seed());
  const int32_t P = 8, S = 5, T = 4, N = 6;
  std::vector<int32_t> row_slot(N), seed_pool(N), seed_scratch(N), seed_accept(N), write_row(size_t(N) * T);
  auto accept = random_accepts(P, S, rng);
  auto run = [&](std::vector<int32_t> slots, int32_t n_real) {
    IndexBuildParams p;
    p.slots = slots.data();
    p.n_real = &n_real;
    p.accept_len = accept.data();
    p.pool_slots = P;
    p.scratch_steps = S;
    p.tokens = T;
    p.rows = N;
    p.out = arrays(N, T, row_slot, seed_pool, seed_scratch, seed_accept, write_row);
    build_indices_cpu(p);
  };
  run({7, 0, 3, 5, 1, 2}, 6);
  const auto first = write_row;
  run({4, 6, 0, 0, 0, 0}, 2);  // stale slots beyond n_real must not count
  EXPECT_NE(write_row, first);
  for (int32_t n = 0; n < N; ++n) {
    for (int32_t t = 0; t < T; ++t) {
      const int32_t want = n == 0 ? 4 * S + t : n == 1 ? 6 * S + t : -1;
      EXPECT_EQ(write_row[size_t(n) * T + t], want) << "row " << n << " step " << t;
    }
    EXPECT_EQ(row_slot[size_t(n)], n == 0 ? 4 : n == 1 ? 6 : -1);
  }
  // A replay after accept_len changed picks up the new seeds.
  accept[4] = 0;
  accept[6] = 2;
  run({4, 6, 0, 0, 0, 0}, 2);
  EXPECT_EQ(seed_pool[0], 4);
  EXPECT_EQ(seed_scratch[0], -1);
  EXPECT_EQ(seed_pool[1], -1);
  EXPECT_EQ(seed_scratch[1], 6 * S + 1);
}

// SPEC §6: what only the device can see is clamped and recorded, never followed out of bounds.
TEST(Indices, BadDeviceValuesAreClampedAndRecorded) {
  const int32_t P = 4, S = 3, T = 3;
  IndexCase c{"bad", P, S, T, {2, 9, 2, 1}, 4};
  std::vector<int32_t> accept = {0, 7, 1, 0};  // slot 1's accept length 7 > S
  const Built b = build(c, accept);
  EXPECT_EQ(b.row_slot[0], 2);
  EXPECT_EQ(b.row_slot[1], -1) << "slot 9 is out of range: padding";
  EXPECT_EQ(b.row_slot[2], -1) << "slot 2 repeats row 0: padding";
  EXPECT_EQ(b.row_slot[3], 1);
  EXPECT_EQ(b.seed_scratch[3], 1 * S + S - 1) << "accept 7 clamps to S";
  EXPECT_EQ(b.errors.count, 3u);
  EXPECT_EQ(b.errors.code, uint32_t(DeviceErrorCode::slot_out_of_range));
  EXPECT_EQ(b.errors.row, 1);
  EXPECT_EQ(b.errors.value, 9);
}

}  // namespace
}  // namespace kdagraph::test
