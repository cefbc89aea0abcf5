// Verify cases on the SIMT executor (tests/common/verify_case.h's cases, host memory standing in for
// device memory), checked against the fp64 reference and against the CPU backend.
#pragma once

#include <gtest/gtest.h>

#include <iostream>
#include <string>
#include <vector>

#include "kernels/verify.h"
#include "simt/executor.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {

inline bool threads_lanes() { return simt::options().lanes == simt::Lanes::threads; }

// A test that runs fewer of its cases with OS-thread lanes (ThreadSanitizer) says so in its output.
inline void note_subset(int run, int all) {
  if (run < all)
    std::cout << "[ subset   ] OS-thread lanes: " << run << " of " << all << " cases; all run in the fiber builds\n";
}

inline double tolerance(const CaseShape& s) { return s.io == DType::f32 && s.state == DType::f32 ? 1e-5 : 1e-2; }

// Runs `p` (pointing into `c`) on the executor, then refreshes the case's output and scratch values.
inline void run_simt(VerifyCase& c, const VerifyParams& p) {
  ASSERT_EQ(launch_verify(p, nullptr), cudaSuccess) << simt::last_error();
  c.o.sync_values();
  c.scratch.sync_values();
}

// The simulated kernel on a fresh case against fp64 (every output written, padded rows zero, no state
// written outside the real rows' write rows), then against verify_cpu on an identical case.
// With `parent` [N * T], the rows verify token trees (docs/trees.md).
inline void expect_simt_matches(const CaseShape& s, uint64_t seed, const std::vector<int32_t>& slots,
                                const std::vector<int32_t>& accept, const std::vector<int32_t>& parent = {}) {
  const double tol = tolerance(s);
  VerifyCase cpu(s, seed, slots, accept), simt(s, seed, slots, accept);
  cpu.parent = simt.parent = parent;
  verify_cpu(cpu.params());
  cpu.o.sync_values();
  cpu.scratch.sync_values();
  expect_verify_matches_reference(simt, tol, [](VerifyCase& c) { run_simt(c, c.params()); });
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_LE(rel_error(simt.o.values, cpu.o.values), tol) << "outputs against the CPU backend";
  EXPECT_LE(rel_error(simt.scratch.values, cpu.scratch.values), tol) << "scratch against the CPU backend";
}

}  // namespace kdagraph::test
