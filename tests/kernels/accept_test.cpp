// docs/modes.md accept and docs/trees.md accepted paths on the program's runner (tests/common/runner.h
// [TAG_RUNNERS]): fused-accept writes each real row's length to its slot, two-phase records it per row;
// lengths outside [1, T] are clamped and recorded; a tree's path gives the length and the kept path.
// Checked against the rules written out here and, off the CPU, the CPU accept bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/accept.h"
#include "tests/common/runner.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {
namespace {

struct AcceptRun {
  int32_t rows = 0, tokens = 0;
  Mode mode = Mode::fused_accept;
  std::vector<int32_t> row_slot, accepted, accept_len, row_accept;
  std::vector<DeviceErrorWord> errors{DeviceErrorWord{}};

  AcceptParams params(Placement& at) {
    AcceptParams p;
    p.rows = rows;
    p.tokens = tokens;
    p.sets_slot = mode_policy(mode).accept_sets_slot;
    p.row_slot = at.in(row_slot);
    p.accepted = at.in(accepted);
    p.accept_len = at.out(accept_len);
    p.row_accept = at.out(row_accept);
    p.errors = at.out(errors);
    return p;
  }
};

// Random batches of up to 300 rows (several blocks) in both modes, with padded rows and lengths outside
// [1, T].
TEST(Accept, RandomBatchesInBothModes) {
  KDA_SKIP_WITHOUT_RUNNER();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 40; ++trial) {
    AcceptRun r;
    r.mode = trial % 2 ? Mode::two_phase : Mode::fused_accept;
    r.tokens = 1 + int32_t(rng() % 8);
    const int32_t slots = 1 + int32_t(rng() % 300);
    r.rows = 1 + int32_t(rng() % uint64_t(slots));
    std::vector<int32_t> perm(static_cast<size_t>(slots));
    for (int32_t s = 0; s < slots; ++s) perm[size_t(s)] = s;
    std::shuffle(perm.begin(), perm.end(), rng);
    const int32_t out_of_range[] = {-1, 0, r.tokens + 1};
    for (int32_t n = 0; n < r.rows; ++n) {
      r.row_slot.push_back(rng() % 5 == 0 ? -1 : perm[size_t(n)]);
      r.accepted.push_back(rng() % 10 == 0 ? out_of_range[rng() % 3] : 1 + int32_t(rng() % uint64_t(r.tokens)));
    }
    for (int32_t s = 0; s < slots; ++s) r.accept_len.push_back(int32_t(rng() % 9));
    r.row_accept.assign(size_t(r.rows), 0x5a5a5a5a);
    SCOPED_TRACE(std::string(to_string(r.mode)) + " rows=" + std::to_string(r.rows) + " T=" + std::to_string(r.tokens));
    AcceptRun want = r;
    uint32_t clamped = 0;
    for (int32_t n = 0; n < r.rows; ++n) {
      const int32_t slot = r.row_slot[size_t(n)];
      int32_t a = r.accepted[size_t(n)];
      if (slot >= 0 && (a < 1 || a > r.tokens)) a = std::clamp(a, 1, r.tokens), ++clamped;
      if (r.mode == Mode::fused_accept && slot >= 0) want.accept_len[size_t(slot)] = a;
      if (r.mode == Mode::two_phase) want.row_accept[size_t(n)] = slot >= 0 ? a : 0;
    }
    AcceptRun cpu = r;
    {
      Placement at(runner().memory());
      run_op<AcceptOp>(r.params(at));
      at.fetch();
    }
    EXPECT_EQ(first_difference(r.accept_len, want.accept_len), -1) << "accept_len";
    EXPECT_EQ(first_difference(r.row_accept, want.row_accept), -1) << "row_accept";
    EXPECT_EQ(r.errors[0].count, clamped) << "out-of-range accept lengths recorded";
    EXPECT_EQ(r.errors[0].code, clamped ? uint32_t(DeviceErrorCode::accept_out_of_range) : 0u);
    if (runner().kind != RunnerKind::cpu) {
      Placement host(Backend::cpu);
      accept_cpu(cpu.params(host));
      EXPECT_EQ(first_difference(r.accept_len, cpu.accept_len), -1) << "accept_len against the CPU";
      EXPECT_EQ(first_difference(r.row_accept, cpu.row_accept), -1) << "row_accept against the CPU";
    }
    if (HasFailure()) return;
  }
}

// docs/trees.md's accept of paths from device memory: the slot's accept length is the last good node + 1, and
// the path it keeps (replay, the conv's halves) is exactly the accepted prefix, token 0 alone where the
// path was cut to nothing.
TEST(TreeAccept, TheKeptPathIsWhatWasAccepted) {
  KDA_SKIP_WITHOUT_RUNNER();
  const int32_t T = 5;
  const std::vector<int32_t> parent = {-1, 0, 0, -1, 1, /* row 1 */ -1, 0, 1, 2, 3, /* row 2 */ -1, 0, 0, 2, 3};
  const std::vector<int32_t> paths = {0, 1, 4, -1, -1, /* row 1: 1 is no child of the seed */ 1, 2, -1, -1, -1,
                                      /* row 2: 4 is no child of 2 */ 0, 2, 4, -1, -1};
  const std::vector<int32_t> row_slot = {2, 0, 1};
  std::vector<int32_t> accept_len(3, 7), kept(size_t(3 * T), 9);
  std::vector<DeviceErrorWord> errors(1);
  Placement at(runner().memory());
  AcceptParams p;
  p.rows = 3;
  p.tokens = T;
  p.row_slot = at.in(row_slot);
  p.accept_index = at.in(paths);
  p.parent = at.in(parent);
  p.accept_len = at.out(accept_len);
  p.slot_path = at.out(kept);
  p.errors = at.out(errors);
  run_op<AcceptOp>(p);
  at.fetch();
  EXPECT_EQ(accept_len, (std::vector<int32_t>{1, 3, 5}));  // slots 0, 1, 2 <- rows 1, 2, 0
  EXPECT_EQ(kept, (std::vector<int32_t>{0, -1, -1, -1, -1, /* slot 1 */ 0, 2, -1, -1, -1, /* slot 2 */ 0, 1, 4, -1, -1}));
  EXPECT_EQ(DeviceErrorCode(errors[0].code), DeviceErrorCode::path_invalid);
  EXPECT_EQ(errors[0].count, 2u);
}

// docs/modes.md replay: accept moves each real row's slot cursor: pending <- (0 if the round flushed, else the
// pending records) + a, and on a flush the records start at the round's first (start + pending, around
// the ring); padded rows move nothing. Written out here, over random cursors, flushes and lengths.
TEST(RingAccept, TheCursorMovesAsTheRoundFlushed) {
  KDA_SKIP_WITHOUT_RUNNER();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 20; ++trial) {
    const int32_t T = 1 + int32_t(rng() % 8), R = 2 * T + int32_t(rng() % 9), slots = 1 + int32_t(rng() % 200);
    const int32_t rows = 1 + int32_t(rng() % uint64_t(slots));
    std::vector<int32_t> perm(static_cast<size_t>(slots));
    for (int32_t s = 0; s < slots; ++s) perm[size_t(s)] = s;
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int32_t> row_slot, accepted, row_pending, row_start, row_flush;
    for (int32_t n = 0; n < rows; ++n) {
      row_slot.push_back(rng() % 6 == 0 ? -1 : perm[size_t(n)]);
      accepted.push_back(1 + int32_t(rng() % uint64_t(T)));
      row_pending.push_back(int32_t(rng() % uint64_t(R - T + 1)));
      row_start.push_back(int32_t(rng() % uint64_t(R)));
      row_flush.push_back(int32_t(rng() % 2));
    }
    std::vector<int32_t> accept_len(static_cast<size_t>(slots), 0), pending(static_cast<size_t>(slots)),
        start(static_cast<size_t>(slots));
    for (int32_t s = 0; s < slots; ++s) pending[size_t(s)] = 1000 + s, start[size_t(s)] = 2000 + s;
    std::vector<int32_t> want_pending = pending, want_start = start;
    for (int32_t n = 0; n < rows; ++n) {
      const int32_t slot = row_slot[size_t(n)];
      if (slot < 0) continue;
      const bool flushed = row_flush[size_t(n)] != 0;
      want_pending[size_t(slot)] = (flushed ? 0 : row_pending[size_t(n)]) + accepted[size_t(n)];
      if (flushed) want_start[size_t(slot)] = (row_start[size_t(n)] + row_pending[size_t(n)]) % R;
    }
    std::vector<DeviceErrorWord> errors(1);
    Placement at(runner().memory());
    AcceptParams p;
    p.rows = rows;
    p.tokens = T;
    p.row_slot = at.in(row_slot);
    p.accepted = at.in(accepted);
    p.accept_len = at.out(accept_len);
    p.row_pending = at.in(row_pending);
    p.row_start = at.in(row_start);
    p.row_flush = at.in(row_flush);
    p.ring_pending = at.out(pending);
    p.ring_start = at.out(start);
    p.ring_records = R;
    p.errors = at.out(errors);
    run_op<AcceptOp>(p);
    at.fetch();
    EXPECT_EQ(first_difference(pending, want_pending), -1) << "ring_pending, T " << T << " R " << R;
    EXPECT_EQ(first_difference(start, want_start), -1) << "ring_start, T " << T << " R " << R;
    EXPECT_EQ(errors[0].count, 0u);
    if (HasFailure()) return;
  }
}

// docs/trees.md replay: a round's records sit at the round's first record + token; accepting a path moves its
// nodes' records (k, g and u of every layer) to the next pending places in path order, around the ring,
// and leaves every other record and slot alone. A path cut short moves its good prefix; token 0 alone
// moves nothing. Checked against the copy written out here.
TEST(RingAccept, ATreesPathRecordsMoveIntoPlace) {
  KDA_SKIP_WITHOUT_RUNNER();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int32_t T = 5, R = 12, L = 2, H = 1, HV = 2, K = 4, V = 8, P = 4;
  const std::vector<int32_t> parent = {-1, 0, 0, -1, 1, /* row 1 */ -1, 0, 1, 2, 3, /* row 2 */ -1, 0, 0, 2, 3,
                                       /* row 3 */ -1, 0, 1, 2, 3};
  const std::vector<int32_t> paths = {0, 1, 4, -1, -1, /* row 1: 1 is no child of the seed */ 1, 2, -1, -1, -1,
                                      /* row 2: 4 is no child of 2, 0 2 kept */ 0, 2, 4, -1, -1,
                                      /* row 3: a padded row */ 0, 1, 2, 3, 4};
  const std::vector<int32_t> row_slot = {2, 0, 1, -1}, row_pending = {3, 0, 6, 0}, row_start = {10, 4, 9, 0};
  const RingLayout layout{R, H, HV, K, V};
  const int64_t kg_row = layout.kg_row_elems(), u_row = layout.u_row_elems();
  std::vector<float> kg(size_t(L * P * kg_row)), u(size_t(L * P * u_row));
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (float& x : kg) x = d(rng);
  for (float& x : u) x = d(rng);
  std::vector<float> want_kg = kg, want_u = u;
  const int32_t nodes[] = {3, 0, 2, 0};  // each row's good path (row 1: token 0 alone, in place)
  for (int32_t n = 0; n < 3; ++n)
    for (int32_t l = 0; l < L; ++l)
      for (int32_t i = 0; i < nodes[n]; ++i) {
        const int32_t slot = row_slot[size_t(n)], node = paths[size_t(n * T + i)];
        const int32_t to = (row_start[size_t(n)] + row_pending[size_t(n)] + i) % R;
        const int32_t from = (row_start[size_t(n)] + row_pending[size_t(n)] + node) % R;
        const size_t kg_base = size_t((l * P + slot) * kg_row), u_base = size_t((l * P + slot) * u_row);
        for (int32_t e = 0; e < H * K; ++e)
          want_kg[kg_base + size_t(layout.k_offset(to, 0) + e)] = want_kg[kg_base + size_t(layout.k_offset(from, 0) + e)];
        for (int32_t e = 0; e < HV * K; ++e)
          want_kg[kg_base + size_t(layout.g_offset(to, 0) + e)] = want_kg[kg_base + size_t(layout.g_offset(from, 0) + e)];
        for (int32_t e = 0; e < HV * V; ++e)
          want_u[u_base + size_t(layout.u_offset(to, 0) + e)] = want_u[u_base + size_t(layout.u_offset(from, 0) + e)];
      }
  Placement at(runner().memory());
  CompactRingParams c;
  RingCompactParams& r = c.ring;
  r.rows = 4;
  r.tokens = T;
  r.layers = L;
  r.row_slot = at.in(row_slot);
  r.accept_index = at.in(paths);
  r.parent = at.in(parent);
  r.row_pending = at.in(row_pending);
  r.row_start = at.in(row_start);
  r.ring = layout;
  r.ring_kg = state_view(at.out(kg), DType::f32, L, P * kg_row, P, kg_row);
  r.ring_u = state_view(at.out(u), DType::f32, L, P * u_row, P, u_row);
  run_op<CompactRingOp>(c);
  at.fetch();
  EXPECT_EQ(first_difference(kg, want_kg), -1) << "k and g";
  EXPECT_EQ(first_difference(u, want_u), -1) << "u";
}

}  // namespace
}  // namespace kdagraph::test
