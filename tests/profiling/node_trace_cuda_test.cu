// profiling/node_trace.h on a real device: graphs of kernels whose lengths the test sets, traced through
// CUPTI. Each launch is one timeline with every node; eager launches are not graph nodes; a host node
// between two kernels shows up as idle time. SKIPPED without a GPU, or where CUPTI cannot trace.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "graph/capture.h"
#include "kdagraph/error.hpp"
#include "profiling/node_trace.h"
#include "tests/common/device_clock.cuh"
#include "tests/common/gpu.h"

namespace kdagraph::test {
namespace {

// Runs for at least `ns` nanoseconds of the device's global timer.
__global__ void spin(uint64_t ns) {
  const uint64_t t0 = global_ns();
  while (global_ns() - t0 < ns) {
  }
}

void sleep_on_host(void* micros) {
  std::this_thread::sleep_for(std::chrono::microseconds(*static_cast<const int*>(micros)));
}

constexpr uint64_t kSpinNs = 20000;

// A stream and a graph captured on it, through the library's stream handle and capture guard.
struct CapturedGraph {
  detail::StreamHandle owner = detail::StreamHandle::create(Backend::cuda);
  cudaStream_t stream = owner.cuda();
  detail::Graph graph;

  // Captures `kernels` spins; with `host_gap_us` > 0, a host node sleeping that long after the first.
  CapturedGraph(int kernels, int* host_gap_us) {
    detail::CaptureGuard capture(owner.get(), "CapturedGraph");
    for (int i = 0; i < kernels; ++i) {
      spin<<<1, 32, 0, stream>>>(kSpinNs);
      if (i == 0 && host_gap_us != nullptr)
        KDA_TEST_CUDA(cudaLaunchHostFunc(stream, sleep_on_host, host_gap_us));
    }
    graph = capture.end();
  }
};

#define KDA_START_TRACE(trace)                                          \
  std::unique_ptr<profiling::NodeTrace> trace;                          \
  try {                                                                 \
    trace = std::make_unique<profiling::NodeTrace>();                   \
  } catch (const Error& e) {                                            \
    GTEST_SKIP() << "CUPTI cannot trace on this machine: " << e.what(); \
  }

TEST(NodeTraceCuda, EachGraphLaunchIsOneTimelineWithEveryNode) {
  KDA_SKIP_WITHOUT_GPU();
  CapturedGraph g(5, nullptr);
  KDA_START_TRACE(trace);
  for (int i = 0; i < 3; ++i) spin<<<1, 32, 0, g.stream>>>(kSpinNs);  // eager: no graph, not counted
  for (int i = 0; i < 4; ++i) g.graph.launch(g.owner.get());
  KDA_TEST_CUDA(cudaStreamSynchronize(g.stream));
  const std::vector<profiling::LaunchTimeline> launches = trace->take();
  ASSERT_EQ(launches.size(), 4u);
  for (const profiling::LaunchTimeline& t : launches) {
    EXPECT_EQ(t.nodes, 5);
    EXPECT_GE(t.busy_us, 5 * kSpinNs * 1e-3 * 0.9);  // the global timer may tick coarsely
    EXPECT_GE(t.span_us, t.busy_us);
    EXPECT_LT(t.idle_fraction(), 0.5)
        << "five back-to-back kernels idle " << t.idle_fraction() << " of the span";
  }
  EXPECT_TRUE(trace->take().empty()) << "take() hands each launch out once";
}

TEST(NodeTraceCuda, AHostNodeBetweenKernelsIsIdleTime) {
  KDA_SKIP_WITHOUT_GPU();
  int gap_us = 2000;
  CapturedGraph g(2, &gap_us);
  KDA_START_TRACE(trace);
  g.graph.launch(g.owner.get());
  KDA_TEST_CUDA(cudaStreamSynchronize(g.stream));
  const std::vector<profiling::LaunchTimeline> launches = trace->take();
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_EQ(launches[0].nodes, 2);  // the host node is not a device node
  EXPECT_GE(launches[0].largest_gap_us, 0.9 * gap_us);
  EXPECT_GT(launches[0].idle_fraction(), 0.9);
}

}  // namespace
}  // namespace kdagraph::test
