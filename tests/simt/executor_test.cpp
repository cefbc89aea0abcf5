// The SIMT executor itself (simt/executor.h), on small kernels written here: the built-in
// variables, the barrier, warp exchanges against CUDA's rules, shared memory poisoned per block, deferred
// cp.async copies, the schedules, and every undefined case it must report instead of running. Each test
// runs on both lane engines (fibers are not built under ThreadSanitizer: reported as skipped there).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include <cuda_pipeline.h>

#include "kernels/launch.cuh"
#include "simt/executor.h"

namespace kdagraph::test {
namespace {

using simt::Lanes;
using simt::Schedule;

constexpr int32_t kPoison = -1;  // shared memory's 0xff bytes as an int32

struct Out {
  int32_t* data;
};

// ---- kernels ---------------------------------------------------------------------------------------

__global__ void builtins_kernel(Out out) {
  const uint32_t threads = blockDim.x * blockDim.y * blockDim.z;
  const uint32_t tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const uint32_t block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  int32_t* e = out.data + 8 * (block * threads + tid);
  const int32_t v[8] = {int32_t(threadIdx.x), int32_t(threadIdx.y), int32_t(threadIdx.z), int32_t(blockIdx.x),
                        int32_t(blockIdx.y), int32_t(blockIdx.z), int32_t(gridDim.x * 1000 + blockDim.x),
                        e[7] + 1};
  for (int i = 0; i < 8; ++i) e[i] = v[i];
}

// Each thread publishes its index, then reads its right neighbour's; `barrier` off leaves the race.
template <bool barrier>
__global__ void neighbour_kernel(Out out) {
  auto& s = shared_object<int32_t[128]>();
  const int t = int(threadIdx.x), n = int(blockDim.x);
  s[t] = t;
  if (barrier) __syncthreads();
  out.data[int(blockIdx.x) * n + t] = s[(t + 1) % n];
}

// Reads shared memory before anything of this block wrote it, then writes it for the next block.
__global__ void stale_shared_kernel(Out out) {
  auto& s = shared_object<int32_t[64]>();
  const int t = int(threadIdx.x);
  out.data[int(blockIdx.x) * 64 + t] = s[t];
  __syncthreads();
  s[t] = 7;
}

// The same through dynamic shared memory (blockDim.x int32 of it): stale reads are poison, and each
// thread's right neighbour's value arrives across the barrier.
__global__ void dynamic_shared_kernel(Out out) {
  int32_t* s = dynamic_shared<int32_t>();
  const int t = int(threadIdx.x), n = int(blockDim.x);
  out.data[(int(blockIdx.x) * n + t) * 2] = s[t];
  __syncthreads();
  s[t] = t + 100 * int(blockIdx.x);
  __syncthreads();
  out.data[(int(blockIdx.x) * n + t) * 2 + 1] = s[(t + 1) % n];
}

struct ShuffleArgs {
  int32_t* out;  // [widths][masks][32]
};
constexpr int kWidths[] = {32, 16, 8, 4, 2, 1};
constexpr int kMasks[] = {1, 2, 4, 8, 16, 3, 31};

__global__ void shuffle_kernel(ShuffleArgs a) {
  const int lane = int(threadIdx.x);
  int32_t* out = a.out;
  for (int w : kWidths)
    for (int m : kMasks) {
      out[lane] = __shfl_xor_sync(0xffffffffu, 100 + lane, m, w);
      out += 32;
    }
}

// Lanes below 16 exchange with the whole warp; the others exit, exchange at another call site, or wait
// at a barrier.
enum class Others { exit, other_site, barrier };
struct DivergentArgs {
  int32_t* out;
  Others others;
};
__global__ void divergent_kernel(DivergentArgs a) {
  const int lane = int(threadIdx.x);
  if (lane < 16) {
    a.out[lane] = __shfl_xor_sync(0xffffffffu, lane, 1);
    return;
  }
  if (a.others == Others::other_site) a.out[lane] = __shfl_xor_sync(0xffffffffu, lane, 1);
  if (a.others == Others::barrier) __syncthreads();
}

__global__ void early_exit_barrier_kernel(Out out) {
  if (threadIdx.x % 2 == 1) return;
  __syncthreads();
  out.data[threadIdx.x] = 1;
}

__global__ void two_barriers_kernel(Out out) {
  if (threadIdx.x < 32) __syncthreads();
  else __syncthreads();
  out.data[threadIdx.x] = 1;
}

struct CopyArgs {
  const int32_t* src;  // [8], 16-byte aligned
  int32_t* out;        // [per thread: 12]
};

// Two batches of 16-byte copies: what each stage of waiting makes visible.
__global__ void copies_kernel(CopyArgs a) {
  auto& s = shared_object<int32_t[2][4]>();
  int32_t* out = a.out + 12 * threadIdx.x;
  if (threadIdx.x == 0) {
    __pipeline_memcpy_async(&s[0][0], a.src, 16);
    __pipeline_commit();
    __pipeline_memcpy_async(&s[1][0], a.src + 4, 16);
    out[0] = s[0][0];  // issued, not waited for: still poison
    __pipeline_commit();
    __pipeline_wait_prior(1);  // the first batch lands, the second does not
    out[1] = s[0][1];
    out[2] = s[1][1];
    __pipeline_wait_prior(0);
    out[3] = s[1][2];
  }
  __syncthreads();
  for (int i = 0; i < 8; ++i) out[4 + i] = s[i / 4][i % 4];
}

enum class CopyMistake { never_waited, uncommitted, to_global, misaligned, wrong_size };
struct BadCopyArgs {
  const int32_t* src;
  int32_t* global;
  CopyMistake mistake;
};
__global__ void bad_copy_kernel(BadCopyArgs a) {
  auto& s = shared_object<int32_t[8]>();
  switch (a.mistake) {
    case CopyMistake::never_waited:
      __pipeline_memcpy_async(&s[0], a.src, 16);
      __pipeline_commit();
      break;
    case CopyMistake::uncommitted:  // wait_prior(0) covers committed batches only
      __pipeline_memcpy_async(&s[0], a.src, 16);
      __pipeline_wait_prior(0);
      break;
    case CopyMistake::to_global: __pipeline_memcpy_async(a.global, a.src, 16); break;
    case CopyMistake::misaligned: __pipeline_memcpy_async(&s[1], a.src, 16); break;
    case CopyMistake::wrong_size: __pipeline_memcpy_async(&s[0], a.src, 12); break;
  }
}

struct VectorArgs {
  const float* src;
  float* dst;
  int offset;
};
__global__ void vector_kernel(VectorArgs a) {
  const float4 x = __ldcg(reinterpret_cast<const float4*>(a.src + a.offset));
  __stcg(reinterpret_cast<float4*>(a.dst), x);
}

// The order in which threads first run, as ranks.
struct RankArgs {
  int32_t* next;
  int32_t* rank;
};
__global__ void rank_kernel(RankArgs a) {
  a.rank[blockIdx.x * blockDim.x + threadIdx.x] = __atomic_fetch_add(a.next, 1, __ATOMIC_RELAXED);
  __syncthreads();
}

__global__ void throwing_kernel(Out) {
  if (threadIdx.x == 3) throw std::runtime_error("thrown by thread 3");
}

// ---- the tests -------------------------------------------------------------------------------------

// Every test runs on each kind of lanes this build has (fibers are not built under ThreadSanitizer).
class ExecutorTest : public ::testing::TestWithParam<Lanes> {
 protected:
  // Options for one launch; schedules other than ascending apply to fibers only.
  simt::Options with(Schedule s = Schedule::rotate) const { return simt::Options{GetParam(), s}; }
};
// What only fiber lanes promise: the order threads run in.
class FiberExecutorTest : public ExecutorTest {};


std::vector<Schedule> all_schedules() {
  return {Schedule::ascending, Schedule::descending, Schedule::round_robin, Schedule::random};
}

// Runs a launch expected to fail and returns the executor's message.
template <class Kernel, class Arg>
std::string expect_launch_failure(Kernel kernel, dim3 grid, dim3 block, const Arg& arg) {
  const uint64_t failed = simt::failed_launches();
  EXPECT_EQ(launch_kernel(kernel, grid, block, nullptr, arg), cudaErrorLaunchFailure);
  EXPECT_EQ(simt::failed_launches(), failed + 1);
  return simt::last_error();
}

TEST_P(ExecutorTest, BuiltinVariablesCoverTheGridOnce) {
  for (Schedule s : all_schedules()) {
    simt::ScopedOptions opt(with(s));
    const dim3 grid(3, 2, 2), block(8, 4, 2);
    std::vector<int32_t> out(size_t(12 * 64) * 8, 0);
    ASSERT_EQ(launch_kernel(builtins_kernel, grid, block, nullptr, Out{out.data()}), cudaSuccess) << simt::last_error();
    for (uint32_t b = 0; b < 12; ++b)
      for (uint32_t t = 0; t < 64; ++t) {
        const int32_t* e = out.data() + 8 * (b * 64 + t);
        const int32_t want[8] = {int32_t(t % 8), int32_t(t / 8 % 4), int32_t(t / 32), int32_t(b % 3),
                                 int32_t(b / 3 % 2), int32_t(b / 6), 3008, 1};
        for (int i = 0; i < 8; ++i)
          ASSERT_EQ(e[i], want[i]) << "block " << b << " thread " << t << " field " << i << " schedule " << to_string(s);
      }
  }
}

TEST_P(ExecutorTest, BarrierOrdersTheBlock) {
  for (Schedule s : all_schedules()) {
    simt::ScopedOptions opt(with(s));
    std::vector<int32_t> out(3 * 128, -2);
    ASSERT_EQ(launch_kernel(neighbour_kernel<true>, 3, 128, nullptr, Out{out.data()}), cudaSuccess) << simt::last_error();
    for (int i = 0; i < 3 * 128; ++i) ASSERT_EQ(out[size_t(i)], (i % 128 + 1) % 128) << "thread " << i;
  }
}

// Without the barrier, the first thread to run reads a neighbour that has not run yet: poison.
// (With OS threads the outcome is timing: ThreadSanitizer's to judge.)
TEST_P(FiberExecutorTest, MissingBarrierReadsPoisonUnderFibers) {
  for (Schedule s : {Schedule::ascending, Schedule::descending}) {
    simt::ScopedOptions opt(with(s));
    std::vector<int32_t> out(128, -2);
    ASSERT_EQ(launch_kernel(neighbour_kernel<false>, 1, 128, nullptr, Out{out.data()}), cudaSuccess);
    const int first = s == Schedule::ascending ? 0 : 127, last = 127 - first;
    EXPECT_EQ(out[size_t(first)], kPoison) << "the first thread to run, " << to_string(s);
    EXPECT_EQ(out[size_t(last)], (last + 1) % 128) << "the last thread ran after everyone wrote, " << to_string(s);
  }
}

TEST_P(ExecutorTest, SharedMemoryIsPoisonedAtEveryBlock) {
  simt::ScopedOptions opt(with());
  std::vector<int32_t> out(4 * 64, 0);
  ASSERT_EQ(launch_kernel(stale_shared_kernel, 4, 64, nullptr, Out{out.data()}), cudaSuccess) << simt::last_error();
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], kPoison) << "thread " << i << " saw an earlier block's data";
}

// Dynamic shared memory (launch_kernel_shared): each block's own, poisoned at its start, shared by its
// threads; more than a device allows is refused, as the device refuses it.
TEST_P(ExecutorTest, DynamicSharedMemoryIsEachBlocksOwnAndPoisoned) {
  simt::ScopedOptions opt(with());
  std::vector<int32_t> out(3 * 64 * 2, 0);
  ASSERT_EQ(launch_kernel_shared(dynamic_shared_kernel, 3, 64, 64 * sizeof(int32_t), nullptr, Out{out.data()}),
            cudaSuccess)
      << simt::last_error();
  for (int b = 0; b < 3; ++b)
    for (int t = 0; t < 64; ++t) {
      const size_t i = size_t(b * 64 + t) * 2;
      ASSERT_EQ(out[i], kPoison) << "block " << b << " thread " << t << " saw an earlier block's data";
      ASSERT_EQ(out[i + 1], (t + 1) % 64 + 100 * b) << "block " << b << " thread " << t;
    }
  EXPECT_EQ(launch_kernel_shared(dynamic_shared_kernel, 1, 64, simt::kMaxDynamicSharedBytes + 16, nullptr,
                                 Out{out.data()}),
            cudaErrorInvalidValue);
  EXPECT_NE(simt::last_error().find("dynamic shared memory"), std::string::npos) << simt::last_error();
}

TEST_P(ExecutorTest, ShuffleXorFollowsCudasRules) {
  for (Schedule s : all_schedules()) {
    simt::ScopedOptions opt(with(s));
    std::vector<int32_t> out(std::size(kWidths) * std::size(kMasks) * 32, -2);
    ASSERT_EQ(launch_kernel(shuffle_kernel, 1, 32, nullptr, ShuffleArgs{out.data()}), cudaSuccess) << simt::last_error();
    const int32_t* o = out.data();
    for (int w : kWidths)
      for (int m : kMasks) {
        for (int lane = 0; lane < 32; ++lane) {
          // CUDA: lane ^ m, unless that lies past the end of the lane's segment of w lanes.
          const int src = lane ^ m, end = (lane / w) * w + w - 1;
          ASSERT_EQ(o[lane], 100 + (src > end ? lane : src)) << "width " << w << " mask " << m << " lane " << lane;
        }
        o += 32;
      }
  }
}

TEST_P(ExecutorTest, DivergentWarpExchangesFail) {
  simt::ScopedOptions opt(with());
  std::vector<int32_t> out(32, 0);
  EXPECT_NE(expect_launch_failure(divergent_kernel, 1, 32, DivergentArgs{out.data(), Others::exit}).find("exited"),
            std::string::npos)
      << simt::last_error();
  EXPECT_NE(expect_launch_failure(divergent_kernel, 1, 32, DivergentArgs{out.data(), Others::other_site})
                .find("divergent warp"),
            std::string::npos)
      << simt::last_error();
  EXPECT_NE(expect_launch_failure(divergent_kernel, 1, 32, DivergentArgs{out.data(), Others::barrier}).find("deadlock"),
            std::string::npos)
      << simt::last_error();
}

TEST_P(ExecutorTest, BarriersEveryThreadDoesNotReachFail) {
  simt::ScopedOptions opt(with());
  std::vector<int32_t> out(64, 0);
  const std::string skipped = expect_launch_failure(early_exit_barrier_kernel, 1, 64, Out{out.data()});
  EXPECT_TRUE(skipped.find("exited") != std::string::npos) << skipped;
  const std::string two = expect_launch_failure(two_barriers_kernel, 1, 64, Out{out.data()});
  EXPECT_NE(two.find("while other threads wait at the one at"), std::string::npos) << two;
}

TEST_P(ExecutorTest, CopiesLandAtTheWaitThatCoversThem) {
  simt::ScopedOptions opt(with());
  alignas(16) int32_t src[8] = {10, 11, 12, 13, 20, 21, 22, 23};
  std::vector<int32_t> out(12 * 32, -2);
  ASSERT_EQ(launch_kernel(copies_kernel, 1, 32, nullptr, CopyArgs{src, out.data()}), cudaSuccess) << simt::last_error();
  EXPECT_EQ(out[0], kPoison) << "read before any wait";
  EXPECT_EQ(out[1], 11) << "the first batch after wait_prior(1)";
  EXPECT_EQ(out[2], kPoison) << "the second batch after wait_prior(1)";
  EXPECT_EQ(out[3], 22) << "the second batch after wait_prior(0)";
  for (int t = 0; t < 32; ++t)
    for (int i = 0; i < 8; ++i) ASSERT_EQ(out[size_t(12 * t + 4 + i)], src[i]) << "thread " << t << " after the barrier";
}

TEST_P(ExecutorTest, CopyMistakesFail) {
  simt::ScopedOptions opt(with());
  alignas(16) int32_t src[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  alignas(16) int32_t global[4];
  const std::pair<CopyMistake, const char*> cases[] = {
      {CopyMistake::never_waited, "never waited for"},
      {CopyMistake::uncommitted, "never waited for"},
      {CopyMistake::to_global, "not __shared__"},
      {CopyMistake::misaligned, "not aligned"},
      {CopyMistake::wrong_size, "moves 4, 8 or 16"},
  };
  for (const auto& [mistake, message] : cases) {
    const std::string got = expect_launch_failure(bad_copy_kernel, 1, 32, BadCopyArgs{src, global, mistake});
    EXPECT_NE(got.find(message), std::string::npos) << "wanted '" << message << "' in: " << got;
  }
}

TEST_P(ExecutorTest, VectorAccessesMustBeAligned) {
  simt::ScopedOptions opt(with());
  alignas(16) float src[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  alignas(16) float dst[4] = {};
  ASSERT_EQ(launch_kernel(vector_kernel, 1, 1, nullptr, VectorArgs{src, dst, 4}), cudaSuccess) << simt::last_error();
  EXPECT_EQ(dst[3], 8.0f);
  EXPECT_NE(expect_launch_failure(vector_kernel, 1, 1, VectorArgs{src, dst, 1}).find("__ldcg"), std::string::npos);
}

TEST_P(ExecutorTest, KernelExceptionsFailTheLaunch) {
  simt::ScopedOptions opt(with());
  EXPECT_NE(expect_launch_failure(throwing_kernel, 2, 8, Out{nullptr}).find("thrown by thread 3"), std::string::npos);
}

TEST_P(ExecutorTest, BadConfigurationsAreRefused) {
  simt::ScopedOptions opt(with());
  EXPECT_EQ(launch_kernel(throwing_kernel, 1, 2048, nullptr, Out{nullptr}), cudaErrorInvalidConfiguration);
  EXPECT_EQ(launch_kernel(throwing_kernel, 0, 32, nullptr, Out{nullptr}), cudaErrorInvalidConfiguration);
}

// What each schedule promises about the order in which fibers first run, and the block order.
// (OS threads run in the operating system's order.)
TEST_P(FiberExecutorTest, SchedulesOrderFibersAndBlocks) {
  for (Schedule s : all_schedules()) {
    simt::ScopedOptions opt(with(s));
    int32_t next = 0;
    std::vector<int32_t> rank(3 * 64, -1);
    ASSERT_EQ(launch_kernel(rank_kernel, 3, 64, nullptr, RankArgs{&next, rank.data()}), cudaSuccess);
    std::vector<int32_t> sorted = rank;
    std::sort(sorted.begin(), sorted.end());
    for (int i = 0; i < 3 * 64; ++i) ASSERT_EQ(sorted[size_t(i)], i) << "every thread ran once";
    for (int i = 0; i < 3 * 64; ++i) {
      const int32_t want = s == Schedule::ascending ? i : s == Schedule::descending ? 3 * 64 - 1 - i : rank[size_t(i)];
      EXPECT_EQ(rank[size_t(i)], want) << "thread " << i << ", " << to_string(s);
    }
  }
}

std::string lanes_name(const ::testing::TestParamInfo<Lanes>& p) { return simt::to_string(p.param); }
INSTANTIATE_TEST_SUITE_P(Lanes, ExecutorTest, ::testing::ValuesIn(simt::built_lanes()), lanes_name);
INSTANTIATE_TEST_SUITE_P(Lanes, FiberExecutorTest, ::testing::ValuesIn(simt::built_fibers()), lanes_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(FiberExecutorTest);  // a build without fibers

}  // namespace
}  // namespace kdagraph::test
