// SPEC §3 commit and materialize on the CUDA backend: the device copy equals the CPU copy bitwise, in
// 16-byte words and in the 2-byte fallback, with skipped entries and clamped accept lengths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/state_copy.h"
#include "tests/common/gpu.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {
namespace {

struct CopyCase {
  StateGeometry geo;
  DType dtype = DType::f32;
  std::vector<uint8_t> pool, scratch;
  std::vector<int32_t> slot_of, accept_of, accept_len;
  bool commit = true;  // accept_of per entry (commit) or accept_len[slot] (materialize)
};

std::string describe(const CopyCase& c) {
  return std::string(c.commit ? "commit" : "materialize") + " L=" + std::to_string(c.geo.layers) +
         " P=" + std::to_string(c.geo.slots) + " S=" + std::to_string(c.geo.scratch_steps) +
         " HV=" + std::to_string(c.geo.value_heads) + " V=" + std::to_string(c.geo.head_v) +
         " K=" + std::to_string(c.geo.head_k) + " dtype=" + to_string(c.dtype);
}

// Random state bytes (any bit pattern: the copy is bitwise); entries are distinct slots plus a skipped
// one (-1) and one out of range; accept lengths in [0, S] plus one below and one above.
CopyCase random_case(std::mt19937_64& rng, StateGeometry geo, DType dtype, bool commit) {
  CopyCase c;
  c.geo = geo;
  c.dtype = dtype;
  c.commit = commit;
  const size_t es = dtype_size(dtype);
  c.pool.resize(size_t(geo.pool_elems()) * es);
  c.scratch.resize(size_t(geo.scratch_elems()) * es);
  for (auto& b : c.pool) b = uint8_t(rng());
  for (auto& b : c.scratch) b = uint8_t(rng());
  std::vector<int32_t> slots(size_t(geo.slots));
  for (int32_t s = 0; s < geo.slots; ++s) slots[size_t(s)] = s;
  std::shuffle(slots.begin(), slots.end(), rng);
  c.slot_of.assign(slots.begin(), slots.end());
  c.slot_of.insert(c.slot_of.begin() + 1, -1);
  c.slot_of.push_back(geo.slots + 2);
  const int32_t S = geo.scratch_steps;
  auto accept = [&](size_t i) { return i == 2 ? -1 : i == 3 ? S + 1 : int32_t(rng() % uint64_t(S + 1)); };
  for (size_t i = 0; i < c.slot_of.size(); ++i) c.accept_of.push_back(accept(i));
  for (int32_t s = 0; s < geo.slots; ++s) c.accept_len.push_back(accept(size_t(s)));
  return c;
}

StateCopyParams params(const CopyCase& c, void* pool, const void* scratch, const int32_t* slot_of,
                       const int32_t* accept_of, int32_t* accept_len, DeviceErrorWord* errors) {
  StateCopyParams p;
  p.count = int32_t(c.slot_of.size());
  p.slot_of = slot_of;
  p.accept_of = c.commit ? accept_of : nullptr;
  p.accept_len = accept_len;
  p.slots = c.geo.slots;
  p.scratch_steps = c.geo.scratch_steps;
  p.row_elems = c.geo.slot_elems();
  p.pool = pool_view(c.geo, pool, c.dtype);
  p.scratch = scratch_view(c.geo, const_cast<void*>(scratch), c.dtype);
  p.errors = errors;
  return p;
}

struct CopyResult {
  std::vector<uint8_t> pool;
  std::vector<int32_t> accept_len;
  DeviceErrorWord errors;
};

CopyResult run_on_cpu(CopyCase c) {
  CopyResult r;
  const StateCopyParams p = params(c, c.pool.data(), c.scratch.data(), c.slot_of.data(), c.accept_of.data(),
                                   c.accept_len.data(), &r.errors);
  copy_accepted_states_cpu(p);
  if (!c.commit) reset_accept_len_cpu(p);
  r.pool = c.pool;
  r.accept_len = c.accept_len;
  return r;
}

CopyResult run_on_device(const CopyCase& c) {
  DeviceBuffer pool(c.pool), scratch(c.scratch), slot_of(c.slot_of), accept_of(c.accept_of),
      accept_len(c.accept_len), errors(std::vector<DeviceErrorWord>{DeviceErrorWord{}});
  const detail::StreamHandle stream = test_stream();
  const StateCopyParams p = params(c, pool.as(), scratch.as(), slot_of.as<int32_t>(), accept_of.as<int32_t>(),
                                   accept_len.as<int32_t>(), errors.as<DeviceErrorWord>());
  EXPECT_EQ(launch_copy_accepted_states(p, stream.cuda()), cudaSuccess);
  if (!c.commit) {
    EXPECT_EQ(launch_reset_accept_len(p, stream.cuda()), cudaSuccess);
  }
  stream.synchronize();
  CopyResult r;
  r.pool = pool.download<uint8_t>();
  r.accept_len = accept_len.download<int32_t>();
  r.errors = errors.download<DeviceErrorWord>()[0];
  return r;
}

TEST(StateCopyCuda, CommitAndMaterializeMatchCpuBitwise) {
  KDA_SKIP_WITHOUT_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  // {L, P, S, HV, V, K, row stride}: compact rows, and rows with a gap after each (SPEC §10 views).
  const std::vector<std::pair<StateGeometry, DType>> shapes{
      {StateGeometry{3, 6, 4, 2, 64, 64}, DType::f32},
      {StateGeometry{2, 4, 3, 2, 128, 128}, DType::bf16},
      {StateGeometry{2, 5, 3, 1, 64, 64, 64 * 64 + 8}, DType::bf16},
      {StateGeometry{2, 5, 2, 3, 64, 64, 3 * 64 * 64 + 4}, DType::f32},
  };
  for (const auto& [geo, dtype] : shapes)
    for (bool commit : {true, false}) {
      const CopyCase c = random_case(rng, geo, dtype, commit);
      SCOPED_TRACE(describe(c));
      const CopyResult cpu = run_on_cpu(c), gpu = run_on_device(c);
      EXPECT_EQ(first_difference(gpu.pool, cpu.pool), -1) << "pool byte";
      EXPECT_EQ(first_difference(gpu.accept_len, cpu.accept_len), -1) << "accept_len";
      EXPECT_EQ(gpu.errors.count, cpu.errors.count);
      EXPECT_EQ(gpu.errors.count, c.commit ? 2u : 3u) << "one report per clamped entry (and a materialize list's bad slot), not per layer or block";
    }
}

}  // namespace
}  // namespace kdagraph::test
