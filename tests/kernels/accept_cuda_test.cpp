// SPEC §3 accept on the CUDA backend: the device accept equals the CPU accept bitwise in both modes,
// with padded rows and accept lengths outside [1, T] (clamped and recorded).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/accept.h"
#include "tests/common/gpu.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {
namespace {

struct AcceptCase {
  int32_t rows = 0, tokens = 0;
  Mode mode = Mode::fused_accept;
  std::vector<int32_t> row_slot, accepted, accept_len, row_accept;
};

AcceptParams params(const AcceptCase& c, const int32_t* row_slot, const int32_t* accepted,
                    int32_t* accept_len, int32_t* row_accept, DeviceErrorWord* errors) {
  AcceptParams p;
  p.rows = c.rows;
  p.tokens = c.tokens;
  p.sets_slot = mode_policy(c.mode).accept_sets_slot;
  p.row_slot = row_slot;
  p.accepted = accepted;
  p.accept_len = accept_len;
  p.row_accept = row_accept;
  p.errors = errors;
  return p;
}

struct AcceptResult {
  std::vector<int32_t> accept_len, row_accept;
  DeviceErrorWord errors;
};

TEST(AcceptCuda, MatchesCpuBitwiseInBothModes) {
  KDA_SKIP_WITHOUT_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const detail::StreamHandle stream = test_stream();
  for (int trial = 0; trial < 40; ++trial) {
    AcceptCase c;
    c.mode = trial % 2 ? Mode::two_phase : Mode::fused_accept;
    c.tokens = 1 + int32_t(rng() % 8);
    const int32_t slots = 1 + int32_t(rng() % 300);
    c.rows = 1 + int32_t(rng() % uint64_t(slots));  // up to 300 rows: several blocks
    std::vector<int32_t> perm(static_cast<size_t>(slots));
    for (int32_t s = 0; s < slots; ++s) perm[size_t(s)] = s;
    std::shuffle(perm.begin(), perm.end(), rng);
    const int32_t out_of_range[] = {-1, 0, c.tokens + 1};
    for (int32_t n = 0; n < c.rows; ++n) {
      c.row_slot.push_back(rng() % 5 == 0 ? -1 : perm[size_t(n)]);
      c.accepted.push_back(rng() % 10 == 0 ? out_of_range[rng() % 3]
                                           : 1 + int32_t(rng() % uint64_t(c.tokens)));
    }
    for (int32_t s = 0; s < slots; ++s) c.accept_len.push_back(int32_t(rng() % 9));
    c.row_accept.assign(size_t(c.rows), 0x5a5a5a5a);
    SCOPED_TRACE(std::string(to_string(c.mode)) + " rows=" + std::to_string(c.rows) +
                 " T=" + std::to_string(c.tokens));

    AcceptResult cpu{c.accept_len, c.row_accept, {}};
    accept_cpu(params(c, c.row_slot.data(), c.accepted.data(), cpu.accept_len.data(), cpu.row_accept.data(),
                      &cpu.errors));

    DeviceBuffer row_slot(c.row_slot), accepted(c.accepted), accept_len(c.accept_len),
        row_accept(c.row_accept), errors(std::vector<DeviceErrorWord>{DeviceErrorWord{}});
    ASSERT_EQ(
        launch_accept(params(c, row_slot.as<int32_t>(), accepted.as<int32_t>(), accept_len.as<int32_t>(),
                             row_accept.as<int32_t>(), errors.as<DeviceErrorWord>()),
                      stream.cuda()),
        cudaSuccess);
    stream.synchronize();
    EXPECT_EQ(first_difference(accept_len.download<int32_t>(), cpu.accept_len), -1) << "accept_len";
    EXPECT_EQ(first_difference(row_accept.download<int32_t>(), cpu.row_accept), -1) << "row_accept";
    EXPECT_EQ(errors.download<DeviceErrorWord>()[0].count, cpu.errors.count);
    if (HasFailure()) return;
  }
}

}  // namespace
}  // namespace kdagraph::test
