// SPEC §4 on the CUDA backend: the device index build equals the CPU build bitwise, for random
// batches with padding, bad slots and out-of-range accept lengths, and leaves nothing stale behind.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/indices.h"
#include "tests/common/gpu.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {
namespace {

struct IndexInputs {
  int32_t pool_slots = 0, scratch_steps = 0, tokens = 0, rows = 0;
  std::vector<int32_t> slots, n_real, accept_len;
};

// The five arrays one build writes, in one allocation: row_slot, seed_pool, seed_scratch, seed_accept
// ([N] each), then write_row [N, T]. (row_accept is the accept step's.)
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

IndexBuildParams params(const IndexInputs& in, const int32_t* slots, const int32_t* n_real,
                        const int32_t* accept_len, DeviceErrorWord* errors, RoundIndices out) {
  IndexBuildParams p;
  p.slots = slots;
  p.n_real = n_real;
  p.accept_len = accept_len;
  p.pool_slots = in.pool_slots;
  p.scratch_steps = in.scratch_steps;
  p.tokens = in.tokens;
  p.rows = in.rows;
  p.errors = errors;
  p.out = out;
  return p;
}

size_t output_count(const IndexInputs& in) { return size_t(in.rows) * (4 + size_t(in.tokens)); }

// Random inputs: distinct slots for most rows, with some padding (-1), out-of-range and repeated
// slots, accept lengths in [0, S] with a few outside it, and n_real anywhere in [-1, N + 1].
IndexInputs random_inputs(std::mt19937_64& rng) {
  auto pick = [&](int32_t lo, int32_t hi) { return int32_t(lo + int64_t(rng() % uint64_t(hi - lo + 1))); };
  IndexInputs in;
  in.pool_slots = pick(1, 64);
  in.scratch_steps = pick(1, 8);
  in.tokens = pick(1, in.scratch_steps);
  in.rows = pick(1, 48);
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
    in.accept_len.push_back(kind == 0   ? -pick(1, 3)
                            : kind == 1 ? in.scratch_steps + pick(1, 3)
                                        : pick(0, in.scratch_steps));
  }
  return in;
}

struct BuildResult {
  std::vector<int32_t> out;
  DeviceErrorWord errors;
};

BuildResult build_on_cpu(const IndexInputs& in) {
  BuildResult r;
  r.out.assign(output_count(in), 0x5a5a5a5a);
  build_indices_cpu(params(in, in.slots.data(), in.n_real.data(), in.accept_len.data(), &r.errors,
                           index_view(r.out.data(), in.rows, in.tokens)));
  return r;
}

// Builds on the device into `out` (not cleared first, so stale contents would show).
BuildResult build_on_device(const IndexInputs& in, DeviceBuffer& out, cudaStream_t stream) {
  DeviceBuffer slots(in.slots), n_real(in.n_real), accept_len(in.accept_len);
  DeviceBuffer errors(std::vector<DeviceErrorWord>{DeviceErrorWord{}});
  const IndexBuildParams p = params(in, slots.as<int32_t>(), n_real.as<int32_t>(), accept_len.as<int32_t>(),
                                    errors.as<DeviceErrorWord>(), index_view(out.as<int32_t>(), in.rows, in.tokens));
  EXPECT_EQ(launch_build_indices(p, stream), cudaSuccess);
  KDA_TEST_CUDA(cudaStreamSynchronize(stream));
  BuildResult r;
  r.out = out.download<int32_t>();
  r.out.resize(output_count(in));
  r.errors = errors.download<DeviceErrorWord>()[0];
  return r;
}

std::string describe(const IndexInputs& in) {
  std::string s = "P=" + std::to_string(in.pool_slots) + " S=" + std::to_string(in.scratch_steps) +
                  " T=" + std::to_string(in.tokens) + " N=" + std::to_string(in.rows) +
                  " n_real=" + std::to_string(in.n_real[0]) + " slots=";
  for (int32_t x : in.slots) s += std::to_string(x) + ",";
  s += " accept_len=";
  for (int32_t x : in.accept_len) s += std::to_string(x) + ",";
  return s;
}

void expect_same_build(const BuildResult& cpu, const BuildResult& gpu) {
  EXPECT_EQ(first_difference(gpu.out, cpu.out), -1) << "index entry (row_slot, seed_pool, seed_scratch, "
                                                       "seed_accept: N each, then write_row)";
  // Which error is recorded first is a race on the device; how many are recorded is not.
  EXPECT_EQ(gpu.errors.count, cpu.errors.count);
  EXPECT_EQ(gpu.errors.code == 0, cpu.errors.code == 0);
}

TEST(IndicesCuda, RandomBatchesMatchCpuBitwise) {
  KDA_SKIP_WITHOUT_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const detail::StreamHandle stream = test_stream();
  for (int trial = 0; trial < 300; ++trial) {
    const IndexInputs in = random_inputs(rng);
    SCOPED_TRACE(describe(in));
    DeviceBuffer out(output_count(in) * sizeof(int32_t));
    out.fill(0x5a);
    expect_same_build(build_on_cpu(in), build_on_device(in, out, stream.cuda()));
    if (HasFailure()) return;
  }
}

// SPEC §4.5: a later batch rebuilt into the same buffers leaves nothing of the earlier one.
TEST(IndicesCuda, RebuildLeavesNothingStale) {
  KDA_SKIP_WITHOUT_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const detail::StreamHandle stream = test_stream();
  IndexInputs first;
  first.pool_slots = 16;
  first.scratch_steps = 4;
  first.tokens = 4;
  first.rows = 8;
  first.slots = {3, 1, 4, 0, 5, 9, 2, 6};
  first.n_real = {8};
  for (int32_t s = 0; s < 16; ++s) first.accept_len.push_back(int32_t(rng() % 5));
  IndexInputs second = first;
  second.slots = {7, 8, 10, -1, -1, -1, -1, -1};
  second.n_real = {3};
  for (auto& a : second.accept_len) a = int32_t(rng() % 5);

  DeviceBuffer out(output_count(first) * sizeof(int32_t));
  build_on_device(first, out, stream.cuda());
  expect_same_build(build_on_cpu(second), build_on_device(second, out, stream.cuda()));
}

}  // namespace
}  // namespace kdagraph::test
