// The other kernels' own source on the SIMT executor, each against its CPU twin bitwise, on the cases
// of their GPU tests: the index build (SPEC §4, through its launcher: see indices_launch.cpp), accept
// with out-of-range lengths recorded in the device error word, the commit and materialize copies
// (SPEC §3), and the command line's synthetic inputs, sampler and joining states (SPEC §8).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/accept.h"
#include "kernels/indices.h"
#include "kernels/state_copy.h"
#include "kernels/synthetic.h"
#include "tests/common/verify_case.h"
#include "tests/simt/simt_case.h"

namespace kdagraph::test {
namespace {

#define KDA_EXPECT_LAUNCH(call) ASSERT_EQ((call), cudaSuccess) << simt::last_error()

// ---- index build ---------------------------------------------------------------------------------

struct IndexInputs {
  int32_t pool_slots = 0, scratch_steps = 0, tokens = 0, rows = 0;
  std::vector<int32_t> slots, n_real, accept_len;
};

// The five arrays one build writes, in one array: row_slot, seed_pool, seed_scratch, seed_accept ([N]
// each), then write_row [N, T].
RoundIndices index_view(int32_t* base, int32_t rows, int32_t tokens) {
  RoundIndices idx;
  idx.capacity = rows;
  idx.tokens = tokens;
  idx.row_slot = base;
  idx.seed_pool = base + rows;
  idx.seed_scratch = base + 2 * rows;
  idx.seed_accept = base + 3 * rows;
  idx.write_row = base + 4 * rows;
  return idx;
}

IndexBuildParams index_params(const IndexInputs& in, DeviceErrorWord* errors, int32_t* out) {
  IndexBuildParams p;
  p.slots = in.slots.data();
  p.n_real = in.n_real.data();
  p.accept_len = in.accept_len.data();
  p.pool_slots = in.pool_slots;
  p.scratch_steps = in.scratch_steps;
  p.tokens = in.tokens;
  p.rows = in.rows;
  p.errors = errors;
  p.out = index_view(out, in.rows, in.tokens);
  return p;
}

size_t index_count(const IndexInputs& in) { return size_t(in.rows) * (4 + size_t(in.tokens)); }

// Distinct slots for most rows, with padding, out-of-range and repeated slots, accept lengths mostly
// in [0, S], and n_real anywhere in [-1, N + 1]; up to 300 rows, so several blocks.
IndexInputs random_index_inputs(std::mt19937_64& rng) {
  auto pick = [&](int32_t lo, int32_t hi) { return int32_t(lo + int64_t(rng() % uint64_t(hi - lo + 1))); };
  IndexInputs in;
  in.pool_slots = pick(1, 320);
  in.scratch_steps = pick(1, 9);
  in.tokens = pick(1, in.scratch_steps);
  in.rows = pick(1, 300);
  std::vector<int32_t> free_slots(size_t(in.pool_slots));
  for (int32_t s = 0; s < in.pool_slots; ++s) free_slots[size_t(s)] = s;
  std::shuffle(free_slots.begin(), free_slots.end(), rng);
  for (int32_t n = 0; n < in.rows; ++n) {
    const int32_t kind = pick(0, 19);
    int32_t slot = n < in.pool_slots ? free_slots[size_t(n)] : -1;
    if (kind == 0) slot = -1;
    if (kind == 1) slot = in.pool_slots + pick(0, 3);
    if (kind == 2) slot = -2 - pick(0, 3);
    if (kind == 3 && n > 0) slot = in.slots[size_t(pick(0, n - 1))];
    in.slots.push_back(slot);
  }
  in.n_real = {pick(0, 9) == 0 ? pick(-1, in.rows + 1) : pick(0, in.rows)};
  for (int32_t s = 0; s < in.pool_slots; ++s) {
    const int32_t kind = pick(0, 19);
    in.accept_len.push_back(kind == 0 ? -pick(1, 3) : kind == 1 ? in.scratch_steps + pick(1, 3) : pick(0, in.scratch_steps));
  }
  return in;
}

TEST(IndicesSimt, RandomBatchesMatchCpuBitwise) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int trials = threads_lanes() ? 40 : 200;
  note_subset(trials, 200);
  for (int trial = 0; trial < trials; ++trial) {
    const IndexInputs in = random_index_inputs(rng);
    SCOPED_TRACE("trial " + std::to_string(trial) + " N=" + std::to_string(in.rows) + " P=" +
                 std::to_string(in.pool_slots) + " T=" + std::to_string(in.tokens));
    std::vector<int32_t> cpu(index_count(in), 0x5a5a5a5a), simt(index_count(in), 0x5a5a5a5a);
    DeviceErrorWord cpu_errors, simt_errors;
    build_indices_cpu(index_params(in, &cpu_errors, cpu.data()));
    KDA_EXPECT_LAUNCH(launch_build_indices(index_params(in, &simt_errors, simt.data()), nullptr));
    EXPECT_EQ(first_difference(simt, cpu), -1) << "index entry (row_slot, seed_pool, seed_scratch, seed_accept, write_row)";
    // Which error is recorded first depends on the order threads run; how many are recorded does not.
    EXPECT_EQ(simt_errors.count, cpu_errors.count);
    EXPECT_EQ(simt_errors.code == 0, cpu_errors.code == 0);
    if (HasFailure()) return;
  }
}

// SPEC §4.5: a later batch rebuilt into the same buffers leaves nothing of the earlier one.
TEST(IndicesSimt, RebuildLeavesNothingStale) {
  IndexInputs first;
  first.pool_slots = 16;
  first.scratch_steps = 4;
  first.tokens = 4;
  first.rows = 8;
  first.slots = {3, 1, 4, 0, 5, 9, 2, 6};
  first.n_real = {8};
  first.accept_len = {0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0};
  IndexInputs second = first;
  second.slots = {7, 8, 10, -1, -1, -1, -1, -1};
  second.n_real = {3};
  std::reverse(second.accept_len.begin(), second.accept_len.end());
  std::vector<int32_t> out(index_count(first), 0x5a5a5a5a), cpu(index_count(second), 0x5a5a5a5a);
  DeviceErrorWord errors;
  KDA_EXPECT_LAUNCH(launch_build_indices(index_params(first, &errors, out.data()), nullptr));
  KDA_EXPECT_LAUNCH(launch_build_indices(index_params(second, &errors, out.data()), nullptr));
  build_indices_cpu(index_params(second, &errors, cpu.data()));
  EXPECT_EQ(first_difference(out, cpu), -1);
}

// ---- accept ----------------------------------------------------------------------------------------

AcceptParams accept_params(int32_t rows, int32_t tokens, Mode mode, const std::vector<int32_t>& row_slot,
                           const std::vector<int32_t>& accepted, std::vector<int32_t>& accept_len,
                           std::vector<int32_t>& row_accept, DeviceErrorWord* errors) {
  AcceptParams p;
  p.rows = rows;
  p.tokens = tokens;
  p.sets_slot = mode_policy(mode).accept_sets_slot;
  p.row_slot = row_slot.data();
  p.accepted = accepted.data();
  p.accept_len = accept_len.data();
  p.row_accept = row_accept.data();
  p.errors = errors;
  return p;
}

TEST(AcceptSimt, MatchesCpuBitwiseInBothModes) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 40; ++trial) {
    const Mode mode = trial % 2 ? Mode::two_phase : Mode::fused_accept;
    const int32_t tokens = 1 + int32_t(rng() % 8), slots = 1 + int32_t(rng() % 300);
    const int32_t rows = 1 + int32_t(rng() % uint64_t(slots));
    std::vector<int32_t> perm(static_cast<size_t>(slots));
    for (int32_t s = 0; s < slots; ++s) perm[size_t(s)] = s;
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int32_t> row_slot, accepted, accept_len;
    const int32_t out_of_range[] = {-1, 0, tokens + 1};
    for (int32_t n = 0; n < rows; ++n) {
      row_slot.push_back(rng() % 5 == 0 ? -1 : perm[size_t(n)]);
      accepted.push_back(rng() % 10 == 0 ? out_of_range[rng() % 3] : 1 + int32_t(rng() % uint64_t(tokens)));
    }
    for (int32_t s = 0; s < slots; ++s) accept_len.push_back(int32_t(rng() % 9));
    SCOPED_TRACE(std::string(to_string(mode)) + " rows=" + std::to_string(rows) + " T=" + std::to_string(tokens));
    std::vector<int32_t> cpu_len = accept_len, simt_len = accept_len;
    std::vector<int32_t> cpu_rows(size_t(rows), 0x5a5a5a5a), simt_rows(size_t(rows), 0x5a5a5a5a);
    DeviceErrorWord cpu_errors, simt_errors;
    accept_cpu(accept_params(rows, tokens, mode, row_slot, accepted, cpu_len, cpu_rows, &cpu_errors));
    KDA_EXPECT_LAUNCH(
        launch_accept(accept_params(rows, tokens, mode, row_slot, accepted, simt_len, simt_rows, &simt_errors), nullptr));
    EXPECT_EQ(first_difference(simt_len, cpu_len), -1) << "accept_len";
    EXPECT_EQ(first_difference(simt_rows, cpu_rows), -1) << "row_accept";
    EXPECT_EQ(simt_errors.count, cpu_errors.count) << "out-of-range accept lengths recorded";
    EXPECT_EQ(simt_errors.code, cpu_errors.count ? uint32_t(DeviceErrorCode::accept_out_of_range) : 0u);
    if (HasFailure()) return;
  }
}

// ---- commit and materialize --------------------------------------------------------------------------

struct CopyCase {
  StateGeometry geo;
  DType dtype = DType::f32;
  bool commit = true;      // accept_of per entry (commit), or accept_len[slot] (materialize)
  bool layer_table = false;  // the pool addressed through a per-layer table instead of a layer stride
  std::vector<uint8_t> pool, scratch;
  std::vector<int32_t> slot_of, accept_of, accept_len;
  std::vector<void*> pool_layers;
};

// Random state bytes; entries are every slot shuffled plus a skipped one (-1) and one out of range;
// accept lengths in [0, S] plus one below and one above.
CopyCase random_copy_case(std::mt19937_64& rng, StateGeometry geo, DType dtype, bool commit) {
  CopyCase c;
  c.geo = geo;
  c.dtype = dtype;
  c.commit = commit;
  c.pool.resize(size_t(geo.pool_elems()) * dtype_size(dtype));
  c.scratch.resize(size_t(geo.scratch_elems()) * dtype_size(dtype));
  for (auto& b : c.pool) b = uint8_t(rng());
  for (auto& b : c.scratch) b = uint8_t(rng());
  for (int32_t s = 0; s < geo.slots; ++s) c.slot_of.push_back(s);
  std::shuffle(c.slot_of.begin(), c.slot_of.end(), rng);
  c.slot_of.insert(c.slot_of.begin() + 1, -1);
  c.slot_of.push_back(geo.slots + 2);
  if (!commit) c.slot_of.push_back(c.slot_of[0]);  // a materialize list's repeat: skipped and recorded
  const int32_t S = geo.scratch_steps;
  auto accept = [&](size_t i) { return i == 2 ? -1 : i == 3 ? S + 1 : int32_t(rng() % uint64_t(S + 1)); };
  for (size_t i = 0; i < c.slot_of.size(); ++i) c.accept_of.push_back(accept(i));
  for (int32_t s = 0; s < geo.slots; ++s) c.accept_len.push_back(accept(size_t(s)));
  return c;
}

StateCopyParams copy_params(CopyCase& c, DeviceErrorWord* errors) {
  StateCopyParams p;
  p.count = int32_t(c.slot_of.size());
  p.slot_of = c.slot_of.data();
  p.accept_of = c.commit ? c.accept_of.data() : nullptr;
  p.accept_len = c.accept_len.data();
  p.slots = c.geo.slots;
  p.scratch_steps = c.geo.scratch_steps;
  p.row_elems = c.geo.slot_elems();
  p.pool = pool_view(c.geo, c.pool.data(), c.dtype);
  p.scratch = scratch_view(c.geo, c.scratch.data(), c.dtype);
  if (c.layer_table) {
    c.pool_layers.clear();
    for (int32_t l = 0; l < c.geo.layers; ++l)
      c.pool_layers.push_back(c.pool.data() + size_t(c.geo.pool_offset(l, 0, 0)) * dtype_size(c.dtype));
    p.pool.base = nullptr;
    p.pool.layer_stride = 0;
    p.pool.layer_table = c.pool_layers.data();
  }
  p.errors = errors;
  return p;
}

TEST(StateCopySimt, CommitAndMaterializeMatchCpuBitwise) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  // {L, P, S, HV, V, K, row stride}: compact rows, and rows with a gap after each (SPEC §10 views); the
  // last shape's pool through a per-layer table.
  const std::vector<std::pair<StateGeometry, DType>> shapes{
      {StateGeometry{3, 6, 4, 2, 64, 64}, DType::f32},
      {StateGeometry{2, 4, 3, 2, 128, 128}, DType::bf16},
      {StateGeometry{2, 5, 3, 1, 64, 64, 64 * 64 + 8}, DType::bf16},
      {StateGeometry{2, 5, 2, 3, 64, 64, 3 * 64 * 64 + 4}, DType::f32},
  };
  for (const auto& [geo, dtype] : shapes)
    for (bool commit : {true, false}) {
      CopyCase cpu = random_copy_case(rng, geo, dtype, commit);
      cpu.layer_table = &geo == &shapes.back().first;
      CopyCase simt = cpu;
      SCOPED_TRACE(std::string(commit ? "commit" : "materialize") + " L=" + std::to_string(geo.layers) +
                   " HV=" + std::to_string(geo.value_heads) + " V=" + std::to_string(geo.head_v) +
                   " K=" + std::to_string(geo.head_k) + " stride=" + std::to_string(geo.row_stride()) + " " +
                   to_string(dtype) + (cpu.layer_table ? " layer table" : ""));
      const std::vector<uint8_t> pool_before = cpu.pool;
      DeviceErrorWord cpu_errors, simt_errors;
      const StateCopyParams pc = copy_params(cpu, &cpu_errors), ps = copy_params(simt, &simt_errors);
      copy_accepted_states_cpu(pc);
      KDA_EXPECT_LAUNCH(launch_copy_accepted_states(ps, nullptr));
      if (!commit) {
        reset_accept_len_cpu(pc);
        KDA_EXPECT_LAUNCH(launch_reset_accept_len(ps, nullptr));
      }
      EXPECT_NE(first_difference(cpu.pool, pool_before), -1) << "the case copies something";
      EXPECT_EQ(first_difference(simt.pool, cpu.pool), -1) << "pool byte";
      EXPECT_EQ(first_difference(simt.accept_len, cpu.accept_len), -1) << "accept_len";
      EXPECT_EQ(simt_errors.count, commit ? 2u : 4u)
          << "one report per clamped entry (and a materialize list's bad and repeated slot), not per layer or block";
      EXPECT_EQ(cpu_errors.count, commit ? 2u : 4u);
    }
}

// ---- synthetic inputs, sampler, joining states ---------------------------------------------------

TEST(SyntheticSimt, InputsMatchCpuBitwise) {
  for (DType io : {DType::f32, DType::bf16}) {
    const int64_t round = 7;
    const std::vector<int32_t> slots{5, 2, 9, -1}, n_real{3};
    SyntheticInputParams p;
    p.seed = fresh_seed();
    p.round = &round;
    p.slots = slots.data();
    p.n_real = n_real.data();
    p.rows = 4;
    p.tokens = 3;
    p.heads = 2;
    p.value_heads = 4;
    p.head_k = p.head_v = 64;
    p.layer = 3;
    p.io_dtype = io;
    p.raw_gate = true;
    p.beta_logit = true;
    const size_t es = dtype_size(io), tok = size_t(p.rows) * p.tokens;
    const size_t qk = tok * 2 * 64 * es, vv = tok * 4 * 64 * es, bb = tok * 4 * es;
    std::vector<uint8_t> cpu(2 * qk + 2 * vv + bb, 0xff), simt = cpu;  // q, k, v, g (HV * K = HV * V), beta
    auto bind = [&](SyntheticInputParams& x, std::vector<uint8_t>& buf) {
      x.q = buf.data();
      x.k = buf.data() + qk;
      x.v = buf.data() + 2 * qk;
      x.g = buf.data() + 2 * qk + vv;
      x.beta = buf.data() + 2 * qk + 2 * vv;
    };
    SyntheticInputParams pc = p, ps = p;
    bind(pc, cpu);
    bind(ps, simt);
    synthetic_inputs_cpu(pc);
    KDA_EXPECT_LAUNCH(launch_synthetic_inputs(ps, nullptr));
    EXPECT_EQ(first_difference(simt, cpu), -1) << to_string(io);
    for (size_t e = 0; e < simt.size(); e += es)  // 0xff bytes are NaN, which no input is
      ASSERT_FALSE(std::all_of(simt.begin() + ptrdiff_t(e), simt.begin() + ptrdiff_t(e + es),
                               [](uint8_t b) { return b == 0xff; }))
          << "element at byte " << e << " not written";
  }
}

// One block: every row reads the round, then thread 0 advances it after the barrier.
TEST(SyntheticSimt, SamplerMatchesCpuBitwise) {
  std::vector<int32_t> slots(300);
  for (int32_t n = 0; n < 300; ++n) slots[size_t(n)] = (n * 7) % 311;
  const std::vector<int32_t> n_real{290};
  int64_t cpu_round = 11, simt_round = 11;
  std::vector<int32_t> cpu(300, -5), simt(300, -5);
  SyntheticSamplerParams p;
  p.seed = fresh_seed();
  p.slots = slots.data();
  p.n_real = n_real.data();
  p.rows = 300;
  p.tokens = 6;
  p.accept_rate = 0.7f;
  SyntheticSamplerParams pc = p, ps = p;
  pc.round = &cpu_round;
  pc.accepted = cpu.data();
  ps.round = &simt_round;
  ps.accepted = simt.data();
  synthetic_sampler_cpu(pc);
  KDA_EXPECT_LAUNCH(launch_synthetic_sampler(ps, nullptr));
  EXPECT_EQ(first_difference(simt, cpu), -1);
  EXPECT_EQ(simt_round, 12);
  EXPECT_EQ(cpu_round, 12);
}

TEST(SyntheticSimt, JoiningStateMatchesCpuBitwise) {
  if (threads_lanes())
    GTEST_SKIP() << "OS-thread lanes: the kernel's fixed grid is 1024 blocks of 256 threads";
  for (DType dtype : {DType::f32, DType::bf16}) {
    SyntheticStateParams p;
    p.seed = fresh_seed();
    p.request = 17;
    p.layers = 3;
    p.slot_elems = 2 * 64 * 64;
    p.state_dtype = dtype;
    std::vector<uint8_t> cpu(size_t(p.layers * p.slot_elems) * dtype_size(dtype), 0xff), simt = cpu;
    SyntheticStateParams pc = p, ps = p;
    pc.out = cpu.data();
    ps.out = simt.data();
    synthetic_state_cpu(pc);
    KDA_EXPECT_LAUNCH(launch_synthetic_state(ps, nullptr));
    EXPECT_EQ(first_difference(simt, cpu), -1) << to_string(dtype);
  }
}

}  // namespace
}  // namespace kdagraph::test
