// Verify cases (tests/common/verify_case.h) on the program's runner (tests/common/runner.h [TAG_RUNNERS]):
// placed in its memory, run through the library's backend seam, and checked against the fp64 reference
// and, off the CPU runner, against the CPU backend.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/verify.h"
#include "tests/common/runner.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {

// The kernels' tolerance against fp64 (relative): fp32 1e-5, anything in bf16 or f16 1e-2.
inline double verify_tolerance(const CaseShape& s) {
  return s.io == DType::f32 && s.state == DType::f32 ? 1e-5 : 1e-2;
}

// Runs `p`, made by c.params(at), on the runner and brings what it wrote back into `c`.
inline void run_verify(VerifyCase& c, Placement& at, const VerifyParams& p) {
  run_op<VerifyOp>(p);
  at.fetch();
  c.sync();
}
inline void run_verify(VerifyCase& c) {
  Placement at(runner().memory());
  run_verify(c, at, c.params(at));
}

// A fresh case on the runner against fp64 (every output written, padded rows zero, no state written
// outside the real rows' write rows), then, off the CPU runner, against the CPU backend on an identical
// case. With `parent` [N * T], the rows verify token trees (docs/trees.md).
inline void expect_verify_on_runner(const CaseShape& s, uint64_t seed, const std::vector<int32_t>& slots,
                                    const std::vector<int32_t>& accept, const std::vector<int32_t>& parent = {}) {
  const double tol = verify_tolerance(s);
  VerifyCase got(s, seed, slots, accept);
  got.parent = parent;
  expect_verify_matches_reference(got, tol, [](VerifyCase& c) { run_verify(c); });
  if (::testing::Test::HasFatalFailure() || runner().kind == RunnerKind::cpu) return;
  VerifyCase cpu(s, seed, slots, accept);
  cpu.parent = parent;
  verify_cpu(cpu.params());
  cpu.sync();
  EXPECT_LE(rel_error(got.o.values, cpu.o.values), tol) << "outputs against the CPU backend";
  EXPECT_LE(rel_error(got.scratch.values, cpu.scratch.values), tol) << "scratch against the CPU backend";
}

}  // namespace kdagraph::test
