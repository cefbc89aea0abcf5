// The CPU instruction-set seam (kernels/cpu_isa.h): each set's copy of the verify against fp64, the
// verify bitwise the same whatever the threads (and so the split of heads into blocks of V rows) and
// however the post-states are stored, the conv bitwise the same on every set, no heap allocation once a
// thread has met a shape, and which set runs. The modes' bitwise equality on each set: modes_test and
// graph_runner_test again under KDAGRAPH_CPU_ISA (tests/CMakeLists.txt).
#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include "kernels/conv.h"
#include "kernels/cpu_isa.h"
#include "kernels/verify.h"
#include "tests/common/conv_case.h"
#include "tests/common/verify_case.h"

// Every operator new of this program is counted: the verify must make none once a thread has met a
// shape. (Allocation and release sit behind calls GCC does not look into, or it pairs new with free.)
namespace {
std::atomic<int64_t> g_allocations{0};
[[gnu::noinline]] void* counted_alloc(size_t bytes, size_t align) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  void* p = align > alignof(std::max_align_t) ? std::aligned_alloc(align, (bytes + align - 1) / align * align)
                                              : std::malloc(bytes ? bytes : 1);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
[[gnu::noinline]] void release(void* p) noexcept { std::free(p); }
}  // namespace
void* operator new(size_t bytes) { return counted_alloc(bytes, 0); }
void* operator new(size_t bytes, std::align_val_t align) { return counted_alloc(bytes, size_t(align)); }
void operator delete(void* p) noexcept { release(p); }
void operator delete(void* p, size_t) noexcept { release(p); }
void operator delete(void* p, std::align_val_t) noexcept { release(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { release(p); }

namespace kdagraph::test {
namespace {

struct IsaKernels {
  void (*verify)(const VerifyParams&);
  void (*conv)(const ConvParams&);
};

IsaKernels kernels_of(CpuIsa isa) {
  switch (isa) {
#if KDAGRAPH_CPU_X86
    case CpuIsa::avx512: return {cpu_avx512::verify_cpu, cpu_avx512::conv_cpu};
    case CpuIsa::avx2: return {cpu_avx2::verify_cpu, cpu_avx2::conv_cpu};
#endif
    default: return {cpu_baseline::verify_cpu, cpu_baseline::conv_cpu};
  }
}

// Restores the seam's process-wide settings a test changes.
struct SeamSettings {
  ~SeamSettings() {
    set_cpu_threads(0);
    set_cpu_streaming_store_bytes(kDefaultStreaming);
  }
  static inline const int64_t kDefaultStreaming = cpu_streaming_store_bytes();
};

class EachCpuIsa : public ::testing::TestWithParam<CpuIsa> {
 protected:
  void SetUp() override {
    if (!cpu_isa_supported(GetParam())) GTEST_SKIP() << to_string(GetParam()) << " is not run by this CPU";
  }
};

std::string isa_name(const ::testing::TestParamInfo<CpuIsa>& info) { return to_string(info.param); }

// docs/math.md on each set: the options, grouped heads, bf16, and head dims no vector width divides (the
// working rows' zero padding), with rows seeded from the pool, from scratch, and padded.
TEST_P(EachCpuIsa, VerifyMatchesFp64) {
  const IsaKernels k = kernels_of(GetParam());
  struct Dims {
    int K, V, T, G;
    DType io, state;
  };
  for (const Dims d : {Dims{128, 128, 4, 1, DType::f32, DType::f32}, Dims{64, 64, 7, 2, DType::f32, DType::f32},
                       Dims{19, 5, 3, 2, DType::f32, DType::f32}, Dims{36, 20, 2, 1, DType::f32, DType::f32},
                       Dims{128, 64, 4, 2, DType::bf16, DType::f32}, Dims{24, 12, 3, 1, DType::bf16, DType::bf16}}) {
    for (int options : {0, 1 | 2 | 8 | 16, 1 | 4 | 32}) {
      CaseShape s = sweep_shape(d.K, d.T, d.G, options, 3);
      s.head_v = d.V;
      s.io = d.io;
      s.state = d.state;
      const uint64_t seed = fresh_seed();
      SCOPED_TRACE(s.str() + " seed=" + std::to_string(seed));
      VerifyCase c(s, seed, {1, 3, -1}, {0, 0, 0, 1 + int32_t(seed % 8), 0});
      expect_verify_matches_reference(c, s.io == DType::f32 && s.state == DType::f32 ? 1e-5 : 1e-2,
                                      [&](VerifyCase& cc) { k.verify(cc.params()); });
    }
  }
}

// The post-states, 64-byte aligned or only 16 (a caller's view), stored through the cache or past it.
struct ScratchCopy {
  std::vector<uint8_t> storage;
  uint8_t* base;
  ScratchCopy(const std::vector<uint8_t>& bytes, size_t offset) : storage(bytes.size() + 128) {
    base = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64 + offset;
    std::memcpy(base, bytes.data(), bytes.size());
  }
  std::vector<uint8_t> bytes(size_t n) const { return std::vector<uint8_t>(base, base + n); }
};

// Threads decide how heads split into blocks of V rows, the call's size and the view's alignment how
// post-states are stored: none of it may change a bit. Every row seeds from scratch, the rows its own
// verify overwrites (docs/modes.md).
TEST_P(EachCpuIsa, VerifyIsBitwiseWhateverTheThreadsAndStores) {
  SeamSettings restore;
  const IsaKernels k = kernels_of(GetParam());
  for (const DType state : {DType::f32, DType::bf16}) {
    CaseShape s;
    s.rows = 2;
    s.heads = 1;
    s.value_heads = 2;
    s.head_k = 128;
    s.head_v = 96;
    s.tokens = 4;
    s.scratch_steps = 4;
    s.state = state;
    s.options.l2norm_qk = true;
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("state=" + std::string(to_string(state)) + " seed=" + std::to_string(seed));
    const std::vector<int32_t> slots{2, 0}, accept{3, 0, 2, 0};
    std::vector<uint8_t> want_o, want_scratch;
    for (int threads : {1, 2, 4}) {
      for (int64_t streaming_bytes : {std::numeric_limits<int64_t>::max(), int64_t(0)}) {
        for (size_t offset : {size_t(0), size_t(16)}) {
          SCOPED_TRACE("threads=" + std::to_string(threads) + " streaming=" + std::to_string(streaming_bytes == 0) +
                       " offset=" + std::to_string(offset));
          set_cpu_threads(threads);
          set_cpu_streaming_store_bytes(streaming_bytes);
          VerifyCase c(s, seed, slots, accept);
          ScratchCopy scratch(c.scratch.bytes, offset);
          VerifyParams p = c.params();
          p.scratch.base = scratch.base;
          k.verify(p);
          const std::vector<uint8_t> got = scratch.bytes(c.scratch.bytes.size());
          if (want_o.empty()) {
            want_o = c.o.bytes;
            want_scratch = got;
            continue;
          }
          EXPECT_EQ(first_difference(c.o.bytes, want_o), -1) << "output byte";
          EXPECT_EQ(first_difference(got, want_scratch), -1) << "scratch byte";
        }
      }
    }
  }
}

// A head split into blocks of V rows still records a row's errors once: an invalid layer table entry
// (verify_cpu_test's case) with more threads than (row, head) units.
TEST_P(EachCpuIsa, SplitHeadsRecordEachRowOnce) {
  SeamSettings restore;
  const IsaKernels k = kernels_of(GetParam());
  CaseShape s;
  s.value_heads = 2;
  s.heads = 1;
  VerifyCase c(s, fresh_seed(), {1, 0, -1}, {0, 0, 0, 0});
  void* table[1] = {nullptr};
  VerifyParams p = c.params();
  p.pool = state_view_table(table, s.state, 1, p.pool.rows, p.pool.row_stride);
  DeviceErrorWord errors;
  p.errors = &errors;
  set_cpu_threads(4);
  k.verify(p);
  EXPECT_EQ(DeviceErrorCode(errors.code), DeviceErrorCode::layer_base_invalid);
  EXPECT_EQ(errors.count, 2u) << "once per real row";
}

// The conv's sums are per channel, never across lanes: every set gives the baseline's bytes.
TEST_P(EachCpuIsa, ConvIsBitwiseTheBaselines) {
  const IsaKernels k = kernels_of(GetParam());
  for (const DType io : {DType::f32, DType::bf16}) {
    for (const ConvLayout layout : {ConvLayout::halves, ConvLayout::in_place, ConvLayout::fixed_window}) {
      ConvCaseShape sh;
      sh.io = io;
      sh.layout = layout;
      sh.channels = 300;
      const uint64_t seed = fresh_seed();
      SCOPED_TRACE(sh.str() + " seed=" + std::to_string(seed));
      ConvCase want(sh, seed, {3, -1, 0, 4}, {2, 0, sh.tokens, 1});
      ConvCase got(sh, seed, {3, -1, 0, 4}, {2, 0, sh.tokens, 1});
      cpu_baseline::conv_cpu(want.params(want.host_pointers()));
      k.conv(got.params(got.host_pointers()));
      EXPECT_EQ(first_difference(got.state.bytes, want.state.bytes), -1) << "conv state byte";
      EXPECT_EQ(first_difference(got.scratch.bytes, want.scratch.bytes), -1) << "conv scratch byte";
      for (size_t seg = 0; seg < want.y.size(); ++seg)
        EXPECT_EQ(first_difference(got.y[seg].bytes, want.y[seg].bytes), -1) << "output byte, segment " << seg;
    }
  }
}

// A thread's scratch is sized once: the first call at a shape larger than any before may allocate (and
// does: that shows the counting works), the same call again allocates nothing. Rows seed from the pool
// and from scratch.
TEST_P(EachCpuIsa, NoHeapAllocationInsideARepeatedVerify) {
  SeamSettings restore;
  const IsaKernels k = kernels_of(GetParam());
  set_cpu_threads(2);
  CaseShape s;
  s.rows = 2;
  s.heads = 1;
  s.value_heads = 2;
  s.tokens = 8;
  // Larger per-thread scratch than any other test of this program asks for, once per set.
  s.head_k = 256 + 16 * int(GetParam());
  s.head_v = 32;
  VerifyCase c(s, fresh_seed(), {1, 3}, {0, 0, 0, 2, 0});
  const VerifyParams p = c.params();
  const int64_t before_first = g_allocations.load();
  k.verify(p);
  EXPECT_GT(g_allocations.load(), before_first) << "the first call at a new largest shape found no scratch to grow";
  for (int call = 0; call < 3; ++call) {
    const int64_t before = g_allocations.load();
    k.verify(p);
    EXPECT_EQ(g_allocations.load(), before) << "call " << call << " allocated";
  }
}

INSTANTIATE_TEST_SUITE_P(Sets, EachCpuIsa, ::testing::Values(CpuIsa::baseline, CpuIsa::avx2, CpuIsa::avx512), isa_name);

// The process runs one set: the one KDAGRAPH_CPU_ISA names, else the best this CPU runs.
TEST(CpuIsa, OneSetForTheProcess) {
  EXPECT_TRUE(cpu_isa_supported(CpuIsa::baseline));
  EXPECT_TRUE(cpu_isa_supported(cpu_isa()));
  const char* named = std::getenv("KDAGRAPH_CPU_ISA");
  if (named != nullptr && *named != '\0') {
    EXPECT_STREQ(to_string(cpu_isa()), named);
    return;
  }
  for (const CpuIsa higher : {CpuIsa::avx2, CpuIsa::avx512}) {
    if (int(higher) <= int(cpu_isa())) continue;
    EXPECT_FALSE(cpu_isa_supported(higher)) << to_string(higher) << " is run by this CPU, yet a lower set was chosen";
  }
}

TEST(CpuIsa, ThreadsFollowOpenMPUnlessSet) {
  SeamSettings restore;
  const int openmp = cpu_threads();
  EXPECT_GE(openmp, 1);
  set_cpu_threads(3);
  EXPECT_EQ(cpu_threads(), 3);
  set_cpu_threads(0);
  EXPECT_EQ(cpu_threads(), openmp);
  try {
    set_cpu_threads(-1);
    FAIL() << "a negative thread count was taken";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "threads");
  }
}

}  // namespace
}  // namespace kdagraph::test
