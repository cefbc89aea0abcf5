// [TAG_RUNNERS] One body per case. A kernel or graph test case (its inputs, its rounds, what it asserts)
// is written once, against the runner below, and compiled into one test program per backend, each of
// which links one runner file:
//   tests/common/runner_cpu.cpp   the library's CPU implementations (label cpu, test names "cpu.")
//   tests/simt/runner_simt.cpp    the CUDA kernels' own source on the SIMT executor (label simt, "simt.")
//   tests/common/runner_cuda.cpp  the GPU (label gpu, "cuda."), every case skipped where there is none
// A runner is a stream of the library's backend seam (graph/dispatch.h): Backend::cpu runs the CPU
// implementations, or in the SIMT build (tests/simt/) the kernels on the executor; Backend::cuda the GPU.
// A new backend adds a runner; a new kernel or mode adds cases.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "graph/dispatch.h"
#include "kdagraph/types.hpp"
#include "kernels/memory.h"
#include "tests/common/placement.h"

namespace kdagraph::test {

enum class RunnerKind { cpu, simt, cuda };

// How much of a sweep a runner runs: every case (the CPU implementations and the GPU take milliseconds
// a case); the subset that covers every tile, branch and barrier (the executor runs a block's threads one
// after another, about a thousand times slower); and a smaller one where its lanes are OS threads
// (ThreadSanitizer), which runs every member and barrier once.
enum class Matrix { full, executor, thread_lanes };

struct Runner {
  RunnerKind kind;
  Matrix matrix;
  Stream stream;  // where the operations run; its backend holds a case's buffers
  const char* name;
  // The executor under AddressSanitizer, for memory errors: whole-round cases run half their executor
  // rounds (by_matrix), enough for every kernel of a round in every mode.
  bool sanitized = false;

  Backend memory() const { return stream.backend; }
  bool on_executor() const { return kind == RunnerKind::simt; }
};

// The runner this program links (its runner file); its availability (a GPU for the CUDA runner).
const Runner& runner();
bool runner_available();
// Kernels the runner has launched so far, where it can count them (the executor); 0 elsewhere. A refused
// call must leave it as it was.
uint64_t runner_launches();
// Programmatic launches the runner held at their grid-dependency wait (the executor with fiber lanes,
// [TAG_PDL]); 0 elsewhere.
uint64_t runner_held_launches();

// A size (rounds, cases) by the runner's matrix (the executor's halved, at least 1, under AddressSanitizer).
inline int by_matrix(int full, int executor, int thread_lanes) {
  if (runner().matrix == Matrix::executor && runner().sanitized && executor > 1) return executor / 2;
  return runner().matrix == Matrix::full ? full : runner().matrix == Matrix::executor ? executor : thread_lanes;
}

// A head dim for a case about something other than the kernels' arithmetic: `cpu_dim` on the CPU backend,
// which takes any, else 64, the smaller head the kernels are built for.
inline int32_t case_head_dim(int32_t cpu_dim) { return runner().kind == RunnerKind::cpu ? cpu_dim : 64; }

// First statement of every case: reports the case SKIPPED, never passed, where its runner has no device.
#define KDA_SKIP_WITHOUT_RUNNER()                                                            \
  do {                                                                                       \
    if (!::kdagraph::test::runner_available()) GTEST_SKIP() << "no CUDA device";             \
  } while (0)

// First statement of a case of whole rounds: also skipped where the executor's lanes are OS threads (a
// round takes tens of seconds there, and the kernel cases run every kernel under them).
#define KDA_SKIP_UNLESS_ROUNDS_RUN()                                                                      \
  do {                                                                                                    \
    KDA_SKIP_WITHOUT_RUNNER();                                                                            \
    if (::kdagraph::test::runner().matrix == ::kdagraph::test::Matrix::thread_lanes)                      \
      GTEST_SKIP() << "OS-thread lanes: the kernel cases run the kernels";                                \
  } while (0)

// Runs operation Op (a kernel header's VerifyOp, IndexBuildOp, ...) with `p` on the runner, through the
// library's backend switch, and returns once its results are in the runner's memory.
template <class Op>
void run_op(const typename Op::Params& p) {
  detail::enqueue<Op>(runner().stream, p, false);
  detail::wait_for_device(runner().memory());
}

}  // namespace kdagraph::test
