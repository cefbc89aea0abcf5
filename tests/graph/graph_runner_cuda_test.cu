// docs/graphs.md on the GPU alone (skipped without one): the host only launches between rounds. A kernel holds
// the device while a host thread issues 50 rounds of a captured bucket; they can all be issued only if
// nothing on the host path waits for the device. (The runner's other cases run on every backend:
// tests/graph/graph_runner_test.cpp.)
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "tests/common/device_clock.cuh"
#include "tests/common/gpu.h"
#include "tests/common/graph_harness.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {
namespace {

// Holds the device until the host releases it: any host synchronization while it spins would hang.
// Gives up after 20 s of device time, so a flag the device never sees fails the test instead of hanging.
__global__ void spin_until(const volatile int* flag) {
  const uint64_t t0 = global_ns();
  while (*flag == 0 && global_ns() - t0 < 20000000000ull) {
  }
}

TEST(GraphRunnerCuda, HostOnlyLaunchesBetweenRounds) {
  KDA_SKIP_WITHOUT_GPU();
  const detail::StreamHandle stream = test_stream();
  const Stream s{Backend::cuda, stream.cuda()};
  GraphHarness h(graph_harness_config(Backend::cuda, Mode::fused_accept, 8, 64), RunnerConfig{}, fresh_seed());
  h.runner->capture(s);
  const std::vector<int32_t> slots = {0, 3, 5};
  h.runner->set_batch(s, slots.data(), 3);
  stream.synchronize();
  int* flag = nullptr;
  KDA_TEST_CUDA(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped));
  *flag = 0;
  int* device_flag = nullptr;
  KDA_TEST_CUDA(cudaHostGetDevicePointer(&device_flag, flag, 0));
  spin_until<<<1, 1, 0, stream.cuda()>>>(device_flag);
  KDA_TEST_CUDA(cudaGetLastError());
  std::atomic<bool> issued{false};
  std::thread host([&] {
    for (int r = 0; r < 50; ++r) h.runner->run_round(s);
    issued = true;
  });
  for (int i = 0; i < 500 && !issued; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const bool all_issued_while_held = issued;
  *flag = 1;  // release the device
  host.join();
  stream.synchronize();  // the single synchronization, at the end
  cudaFreeHost(flag);
  EXPECT_TRUE(all_issued_while_held) << "the host waited for the device between rounds";
  EXPECT_EQ(h.verifier.device_errors().count, 0u);
}

}  // namespace
}  // namespace kdagraph::test
