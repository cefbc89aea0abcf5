// docs/modes.md commit and materialize on the program's runner (tests/common/runner.h [TAG_RUNNERS]): each
// listed slot's pool row in every layer becomes its accepted scratch row, bitwise, in 16-byte words and
// in the 2-byte fallback, through a layer stride or a per-layer table (docs/ops.md); skipped entries and
// clamped accept lengths recorded once each. Checked against the copy written out here and, off the CPU,
// the CPU copy bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kernels/state_copy.h"
#include "tests/common/runner.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {
namespace {

struct CopyRun {
  StateGeometry geo;
  DType dtype = DType::f32;
  bool commit = true;        // accept_of per entry (commit), or accept_len[slot] (materialize)
  bool layer_table = false;  // the pool addressed through a per-layer table instead of a layer stride
  std::vector<uint8_t> pool, scratch;
  std::vector<int32_t> slot_of, accept_of, accept_len;
  std::vector<DeviceErrorWord> errors{DeviceErrorWord{}};
  std::vector<void*> pool_layers;

  StateCopyParams params(Placement& at) {
    StateCopyParams p;
    p.count = int32_t(slot_of.size());
    p.slot_of = at.in(slot_of);
    p.accept_of = commit ? at.in(accept_of) : nullptr;
    p.accept_len = at.out(accept_len);
    p.slots = geo.slots;
    p.scratch_steps = geo.scratch_steps;
    p.row_elems = geo.slot_elems();
    p.pool = pool_view(geo, at.out(pool), dtype);
    p.scratch = scratch_view(geo, const_cast<uint8_t*>(at.in(scratch)), dtype);
    if (layer_table) {
      pool_layers.clear();
      for (int32_t l = 0; l < geo.layers; ++l)
        pool_layers.push_back(static_cast<char*>(p.pool.base) + size_t(geo.pool_offset(l, 0, 0)) * dtype_size(dtype));
      p.pool.base = nullptr;
      p.pool.layer_stride = 0;
      p.pool.layer_table = const_cast<void**>(at.in(pool_layers));
    }
    p.errors = at.out(errors);
    return p;
  }
};

// Random state bytes (any bit pattern: the copy is bitwise); entries are every slot shuffled plus a
// skipped one (-1) and one out of range (and, in a materialize list, a repeat: skipped and recorded);
// accept lengths in [0, S] plus one below and one above.
CopyRun random_run(std::mt19937_64& rng, StateGeometry geo, DType dtype, bool commit) {
  CopyRun c;
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
  if (!commit) c.slot_of.push_back(c.slot_of[0]);
  const int32_t S = geo.scratch_steps;
  auto accept = [&](size_t i) { return i == 2 ? -1 : i == 3 ? S + 1 : int32_t(rng() % uint64_t(S + 1)); };
  for (size_t i = 0; i < c.slot_of.size(); ++i) c.accept_of.push_back(accept(i));
  for (int32_t s = 0; s < geo.slots; ++s) c.accept_len.push_back(accept(size_t(s)));
  return c;
}

// What the copy must leave, from docs/modes.md: the pool with each good entry's accepted rows, accept_len (reset
// by a materialize), and how many entries it records.
struct CopyWant {
  std::vector<uint8_t> pool;
  std::vector<int32_t> accept_len;
  uint32_t recorded = 0;
};

CopyWant want_of(const CopyRun& c) {
  CopyWant w{c.pool, c.accept_len, 0};
  const size_t es = dtype_size(c.dtype), row = size_t(c.geo.slot_elems()) * es;
  const int32_t S = c.geo.scratch_steps;
  std::set<int32_t> seen;
  for (size_t e = 0; e < c.slot_of.size(); ++e) {
    const int32_t slot = c.slot_of[e];
    if (slot < 0 || slot >= c.geo.slots) {
      w.recorded += !c.commit && slot != -1;  // a materialize list's bad slot is the caller's error
      continue;
    }
    if (!c.commit && !seen.insert(slot).second) {
      ++w.recorded;  // repeated: worked on once
      continue;
    }
    int32_t a = c.commit ? c.accept_of[e] : c.accept_len[size_t(slot)];
    if (a < 0 || a > S) a = std::clamp(a, 0, S), ++w.recorded;
    if (a > 0)
      for (int32_t l = 0; l < c.geo.layers; ++l)
        std::memcpy(w.pool.data() + size_t(c.geo.pool_offset(l, slot, 0)) * es,
                    c.scratch.data() + size_t(c.geo.scratch_offset(l, slot * S + a - 1, 0)) * es, row);
    if (!c.commit) w.accept_len[size_t(slot)] = 0;
  }
  return w;
}

TEST(StateCopy, CommitAndMaterializeCopyTheAcceptedRows) {
  KDA_SKIP_WITHOUT_RUNNER();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  // {L, P, S, HV, V, K, row stride}: compact rows, and rows with a gap after each (docs/ops.md views); the
  // last shape's pool through a per-layer table.
  const std::vector<std::pair<StateGeometry, DType>> shapes{
      {StateGeometry{3, 6, 4, 2, 64, 64}, DType::f32},
      {StateGeometry{2, 4, 3, 2, 128, 128}, DType::bf16},
      {StateGeometry{2, 5, 3, 1, 64, 64, 64 * 64 + 8}, DType::bf16},
      {StateGeometry{2, 5, 2, 3, 64, 64, 3 * 64 * 64 + 4}, DType::f32},
  };
  for (const auto& [geo, dtype] : shapes)
    for (bool commit : {true, false}) {
      CopyRun c = random_run(rng, geo, dtype, commit);
      c.layer_table = &geo == &shapes.back().first;
      SCOPED_TRACE(std::string(commit ? "commit" : "materialize") + " L=" + std::to_string(geo.layers) +
                   " HV=" + std::to_string(geo.value_heads) + " V=" + std::to_string(geo.head_v) +
                   " K=" + std::to_string(geo.head_k) + " stride=" + std::to_string(geo.row_stride()) + " " +
                   to_string(dtype) + (c.layer_table ? " layer table" : ""));
      const CopyWant want = want_of(c);
      ASSERT_NE(want.pool, c.pool) << "the case copies something";
      CopyRun cpu = c;
      {
        Placement at(runner().memory());
        const StateCopyParams p = c.params(at);
        run_op<CopyAcceptedStatesOp>(p);
        if (!commit) run_op<ResetAcceptLenOp>(p);
        at.fetch();
      }
      EXPECT_EQ(first_difference(c.pool, want.pool), -1) << "pool byte";
      EXPECT_EQ(first_difference(c.accept_len, want.accept_len), -1) << "accept_len";
      EXPECT_EQ(c.errors[0].count, want.recorded)
          << "one report per clamped entry (and a materialize list's bad and repeated slot), not per layer or block";
      if (runner().kind != RunnerKind::cpu) {
        Placement host(Backend::cpu);
        const StateCopyParams p = cpu.params(host);
        copy_accepted_states_cpu(p);
        if (!commit) reset_accept_len_cpu(p);
        EXPECT_EQ(first_difference(c.pool, cpu.pool), -1) << "pool byte against the CPU";
      }
    }
}

}  // namespace
}  // namespace kdagraph::test
