// A verify case launched as a round launches it (docs/graphs.md, [TAG_PDL]): right after the kernel that writes
// its inputs (a model's projections, the conv), both programmatic. The staging kernel copies the case's q,
// k, v, g and beta into the buffers the verify reads, below its own wait; until then those buffers hold
// poison (0xff bytes: NaN). With fiber lanes the executor runs the verify up to its wait before the
// staging kernel goes on, so a read of an input above the verify's wait gives NaN where the fp64
// reference has numbers. (OS-thread lanes run programmatic launches plainly: nothing is caught there.)
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/launch.cuh"
#include "kernels/verify.h"
#include "simt/executor.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {

using VerifyLauncher = cudaError_t (*)(const VerifyParams&, Launch);

// The verify's inputs the staging kernel writes, as bits: those poisoned until it has run.
enum StagedInput : unsigned { kQ = 1, kK = 2, kV = 4, kG = 8, kBeta = 16, kAllInputs = 31 };

struct StagedCopy {
  uint8_t* dst;
  const uint8_t* src;
  int64_t bytes;
};
struct StageArgs {
  StagedCopy copies[5];
};

inline __global__ void stage_inputs_kernel(StageArgs a) {
  grid_dependency_wait();
  trigger_dependent_launch();
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (const StagedCopy& c : a.copies)
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < c.bytes; i += stride) c.dst[i] = c.src[i];
}

// Runs `launch` on the case after the staging kernel, both programmatic, and waits for both: `c` then
// holds the verify's outputs and post-states (and its inputs again). Only the inputs in `poisoned` hold
// poison before the staging kernel writes them.
inline void run_after_staging(VerifyCase& c, VerifyLauncher launch, unsigned poisoned = kAllInputs) {
  ASSERT_EQ(simt::synchronize(), cudaSuccess) << simt::last_error();
  Tensor* inputs[5] = {&c.q, &c.k, &c.v, &c.g, &c.beta};
  std::vector<std::vector<uint8_t>> sources;
  sources.reserve(5);
  StageArgs args{};
  for (int i = 0; i < 5; ++i) {
    sources.push_back(inputs[i]->bytes);
    if (poisoned & (1u << i)) inputs[i]->poison();
    args.copies[i] = StagedCopy{inputs[i]->bytes.data(), sources.back().data(), int64_t(sources.back().size())};
  }
  ASSERT_EQ(launch_kernel(stage_inputs_kernel, 8, 128, Launch{nullptr, true}, args), cudaSuccess) << simt::last_error();
  ASSERT_EQ(launch(c.params(), Launch{nullptr, true}), cudaSuccess) << simt::last_error();
  ASSERT_EQ(simt::synchronize(), cudaSuccess) << simt::last_error();
  c.o.sync_values();
  c.scratch.sync_values();
}

}  // namespace kdagraph::test
