// Programmatic dependent launch on the SIMT executor (simt/executor.h, [TAG_PDL]), on small kernels
// written here: a kernel held at its grid_dependency_wait lets the next one run up to its own wait first,
// so a read above the wait sees memory before the previous kernel wrote it, plain loads and cp.async
// alike; what completes a held kernel; each held block keeps its own shared memory; the device fills
// up; a held kernel's failure surfaces at the call that completes it; and a trigger before the wait fails
// the launch. With OS-thread lanes (ThreadSanitizer) programmatic launches run as plain ones: the tests of
// the hold report skipped there, the trigger rule is checked on both engines.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include <cuda_pipeline.h>

#include "kernels/launch.cuh"
#include "simt/executor.h"

namespace kdagraph::test {
namespace {

using simt::Lanes;
using simt::Schedule;

constexpr int kThreads = 64;
constexpr int32_t kBefore = 7;   // what the memory holds before the writer's part below its wait
constexpr int32_t kUnset = -5;   // what the reader's outputs hold before it ran

int32_t written(int i) { return 1000 + i; }

struct WriterArgs {
  int32_t* data;
};

// The previous kernel: writes data below its wait.
__global__ void writer_kernel(WriterArgs a) {
  grid_dependency_wait();
  trigger_dependent_launch();
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  a.data[i] = written(i);
}

struct ReaderArgs {
  const int32_t* data;
  int32_t* early;  // read above the wait
  int32_t* late;   // read below it
  int32_t* copied;  // a cp.async issued above the wait, waited for below it
};

struct alignas(16) Staged {
  int32_t v[kThreads];
};

__global__ void reader_kernel(ReaderArgs a) {
  int32_t* staged = shared_object<Staged>().v;
  const int t = int(threadIdx.x), i = int(blockIdx.x * blockDim.x) + t;
  const int32_t early = a.data[i];
  if (t % 4 == 0) __pipeline_memcpy_async(&staged[t], &a.data[i], 16);
  __pipeline_commit();
  grid_dependency_wait();
  trigger_dependent_launch();
  __pipeline_wait_prior(0);
  __syncthreads();
  a.early[i] = early;
  a.late[i] = a.data[i];
  a.copied[i] = staged[t];
}

// Each block keeps its index in shared memory across the wait.
struct SharedArgs {
  int32_t* out;
  int32_t base;
};
__global__ void shared_kernel(SharedArgs a) {
  auto& mine = shared_object<int32_t[kThreads]>();
  const int t = int(threadIdx.x);
  mine[t] = a.base + int32_t(blockIdx.x);
  grid_dependency_wait();
  trigger_dependent_launch();
  __syncthreads();
  a.out[blockIdx.x * blockDim.x + t] = mine[(t + 1) % kThreads];
}

// Fails below its wait: thread 0 skips the barrier.
__global__ void failing_kernel(WriterArgs a) {
  grid_dependency_wait();
  trigger_dependent_launch();
  if (threadIdx.x != 0) __syncthreads();
  a.data[threadIdx.x] = 1;
}

__global__ void trigger_first_kernel(WriterArgs a) {
  trigger_dependent_launch();
  grid_dependency_wait();
  a.data[threadIdx.x] = 1;
}

// Runs on each kind of lanes this build has (fibers are not built under ThreadSanitizer).
class ExecutorPdlTest : public ::testing::TestWithParam<Lanes> {
 protected:
  void SetUp() override { ASSERT_EQ(simt::synchronize(), cudaSuccess) << "a kernel of an earlier test was still held"; }
  void TearDown() override { EXPECT_EQ(simt::synchronize(), cudaSuccess) << simt::last_error(); }
  simt::Options with(Schedule s = Schedule::rotate) const { return simt::Options{GetParam(), s}; }
};
// Fiber lanes hold a programmatic kernel at its wait; OS-thread lanes run it as a plain launch.
class FiberPdlTest : public ExecutorPdlTest {};
class ThreadPdlTest : public ExecutorPdlTest {};

struct Buffers {
  explicit Buffers(int blocks)
      : data(size_t(blocks) * kThreads, kBefore),
        early(data.size(), kUnset),
        late(data.size(), kUnset),
        copied(data.size(), kUnset) {}
  ReaderArgs reader() { return ReaderArgs{data.data(), early.data(), late.data(), copied.data()}; }
  // cp.async moves 16 bytes: lane t % 4 == 0 brings t .. t + 3 (malloc aligns to 16).
  std::vector<int32_t> data;
  std::vector<int32_t> early, late, copied;
};

TEST_P(FiberPdlTest, ReadsAboveTheWaitSeeMemoryBeforeThePreviousKernelWrote) {
  for (Schedule s : {Schedule::ascending, Schedule::descending, Schedule::round_robin, Schedule::random}) {
    simt::ScopedOptions opt(with(s));
    Buffers b(3);
    const uint64_t held = simt::held_launches();
    ASSERT_EQ(launch_kernel(writer_kernel, 3, kThreads, Launch{nullptr, true}, WriterArgs{b.data.data()}), cudaSuccess);
    EXPECT_TRUE(simt::holding()) << "the writer is held at its wait";
    EXPECT_EQ(b.data[0], kBefore) << "nothing of the writer below its wait has run";
    ASSERT_EQ(launch_kernel(reader_kernel, 3, kThreads, Launch{nullptr, true}, b.reader()), cudaSuccess)
        << simt::last_error();
    EXPECT_EQ(simt::held_launches(), held + 2);
    EXPECT_EQ(b.late[0], kUnset) << "the reader is held in turn";
    EXPECT_EQ(b.data[5], written(5)) << "the writer went on once the reader had reached its wait";
    ASSERT_EQ(simt::synchronize(), cudaSuccess) << simt::last_error();
    EXPECT_FALSE(simt::holding());
    for (size_t i = 0; i < b.data.size(); ++i) {
      ASSERT_EQ(b.early[i], kBefore) << "element " << i << ", " << to_string(s);
      ASSERT_EQ(b.copied[i], kBefore) << "a cp.async above the wait reads when issued: element " << i;
      ASSERT_EQ(b.late[i], written(int(i))) << "element " << i;
    }
  }
}

// OS-thread lanes: the same launches run one after the other, so every read sees the writer's data.
TEST_P(ThreadPdlTest, ThreadLanesRunProgrammaticLaunchesPlainly) {
  simt::ScopedOptions opt(with());
  Buffers b(2);
  const uint64_t held = simt::held_launches();
  ASSERT_EQ(launch_kernel(writer_kernel, 2, kThreads, Launch{nullptr, true}, WriterArgs{b.data.data()}), cudaSuccess);
  ASSERT_EQ(launch_kernel(reader_kernel, 2, kThreads, Launch{nullptr, true}, b.reader()), cudaSuccess);
  EXPECT_FALSE(simt::holding());
  EXPECT_EQ(simt::held_launches(), held);
  for (size_t i = 0; i < b.data.size(); ++i) ASSERT_EQ(b.early[i], written(int(i))) << "element " << i;
}

TEST_P(FiberPdlTest, APlainLaunchCompletesTheHeldKernelFirst) {
  simt::ScopedOptions opt(with());
  Buffers b(2);
  ASSERT_EQ(launch_kernel(writer_kernel, 2, kThreads, Launch{nullptr, true}, WriterArgs{b.data.data()}), cudaSuccess);
  ASSERT_EQ(launch_kernel(reader_kernel, 2, kThreads, nullptr, b.reader()), cudaSuccess) << simt::last_error();
  EXPECT_FALSE(simt::holding()) << "a plain launch holds nothing";
  for (size_t i = 0; i < b.data.size(); ++i) {
    ASSERT_EQ(b.early[i], written(int(i))) << "element " << i;
    ASSERT_EQ(b.copied[i], written(int(i))) << "element " << i;
  }
}

// Held blocks of two grids at once, each with its own shared memory: none sees another block's.
TEST_P(FiberPdlTest, HeldBlocksKeepTheirOwnSharedMemory) {
  simt::ScopedOptions opt(with());
  std::vector<int32_t> first(4 * kThreads, kUnset), second(4 * kThreads, kUnset);
  ASSERT_EQ(launch_kernel(shared_kernel, 4, kThreads, Launch{nullptr, true}, SharedArgs{first.data(), 100}), cudaSuccess);
  ASSERT_EQ(launch_kernel(shared_kernel, 4, kThreads, Launch{nullptr, true}, SharedArgs{second.data(), 200}), cudaSuccess);
  ASSERT_EQ(simt::synchronize(), cudaSuccess) << simt::last_error();
  for (int i = 0; i < 4 * kThreads; ++i) {
    ASSERT_EQ(first[size_t(i)], 100 + i / kThreads) << "thread " << i << " of the first grid";
    ASSERT_EQ(second[size_t(i)], 200 + i / kThreads) << "thread " << i << " of the second grid";
  }
}

// Grids larger than the executor holds: the writer's blocks past the first kFit run to their end at once;
// the reader's first kFit blocks read above their wait before the writer went on, the later ones after
// it completed; every block reads the written data below its wait.
TEST_P(FiberPdlTest, TheDeviceFillsUp) {
  simt::ScopedOptions opt(with(Schedule::ascending));  // the first kFit blocks of each grid are held
  constexpr int kFit = simt::kMaxHeldLanes / kThreads, kBlocks = kFit + 5;
  Buffers b(kBlocks);
  ASSERT_EQ(launch_kernel(writer_kernel, kBlocks, kThreads, Launch{nullptr, true}, WriterArgs{b.data.data()}), cudaSuccess);
  ASSERT_EQ(launch_kernel(reader_kernel, kBlocks, kThreads, Launch{nullptr, true}, b.reader()), cudaSuccess)
      << simt::last_error();
  ASSERT_EQ(simt::synchronize(), cudaSuccess) << simt::last_error();
  int before = 0;
  for (int blk = 0; blk < kBlocks; ++blk) {
    const size_t first = size_t(blk) * kThreads;
    const bool held = b.early[first] == kBefore;
    before += held;
    for (int t = 0; t < kThreads; ++t) {
      const size_t i = first + size_t(t);
      ASSERT_EQ(b.early[i], held ? kBefore : written(int(i))) << "block " << blk << " read one side of the writer";
      ASSERT_EQ(b.late[i], written(int(i))) << "block " << blk;
    }
  }
  EXPECT_EQ(before, kFit) << "blocks held above their wait";
}

TEST_P(FiberPdlTest, AHeldKernelsFailureSurfacesWhereItIsCompleted) {
  simt::ScopedOptions opt(with());
  std::vector<int32_t> out(kThreads, 0);
  const uint64_t failed = simt::failed_launches();
  ASSERT_EQ(launch_kernel(failing_kernel, 1, kThreads, Launch{nullptr, true}, WriterArgs{out.data()}), cudaSuccess)
      << "held above the mistake";
  EXPECT_EQ(simt::synchronize(), cudaErrorLaunchFailure);
  EXPECT_EQ(simt::failed_launches(), failed + 1);
  const std::string msg = simt::last_error();
  EXPECT_NE(msg.find("held at its grid_dependency_wait"), std::string::npos) << msg;
  EXPECT_NE(msg.find("__syncthreads"), std::string::npos) << msg;
  EXPECT_FALSE(simt::holding());
}

TEST_P(ExecutorPdlTest, TriggerBeforeTheWaitFailsWithItsCallSite) {
  simt::ScopedOptions opt(with());
  std::vector<int32_t> out(kThreads, 0);
  for (const bool pdl : {true, false}) {
    const uint64_t failed = simt::failed_launches();
    EXPECT_EQ(launch_kernel(trigger_first_kernel, 1, kThreads, Launch{nullptr, pdl}, WriterArgs{out.data()}),
              cudaErrorLaunchFailure);
    EXPECT_EQ(simt::failed_launches(), failed + 1);
    const std::string msg = simt::last_error();
    EXPECT_NE(msg.find("trigger_dependent_launch at "), std::string::npos) << msg;
    EXPECT_NE(msg.find("executor_pdl_test.cpp:"), std::string::npos) << "the call site: " << msg;
    EXPECT_NE(msg.find("before grid_dependency_wait"), std::string::npos) << msg;
    EXPECT_FALSE(simt::holding());
  }
}

std::string lanes_name(const ::testing::TestParamInfo<Lanes>& p) { return simt::to_string(p.param); }
INSTANTIATE_TEST_SUITE_P(Lanes, ExecutorPdlTest, ::testing::ValuesIn(simt::built_lanes()), lanes_name);
INSTANTIATE_TEST_SUITE_P(Lanes, FiberPdlTest, ::testing::ValuesIn(simt::built_fibers()), lanes_name);
INSTANTIATE_TEST_SUITE_P(Lanes, ThreadPdlTest, ::testing::Values(Lanes::threads), lanes_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(FiberPdlTest);  // a build without fibers

}  // namespace
}  // namespace kdagraph::test
