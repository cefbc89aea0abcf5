// The CPU backend's one choice of instruction set, its thread count and its per-thread scratch: the
// CPU twin of graph/dispatch.h's backend seam. The kernels that move states run through here (verify,
// conv, the state copies); the index build, accept and synthetic inputs are per-row bookkeeping and stay
// baseline code.
//
// [TAG_CPU_ISA] Each CPU kernel is compiled once per instruction set: kernels/CMakeLists.txt generates a
// file per set that defines KDAGRAPH_CPU_ISA and includes the kernel's source, whose body sits between
// KDAGRAPH_CPU_ISA_BEGIN and KDAGRAPH_CPU_ISA_END. That body is then compiled for the set (a target
// pragma, no -m flag, so the headers included before it stay baseline code that every copy may share)
// into its own namespace cpu_<set>. kdagraph::<kernel> runs the copy cpu_isa() names, one set for the
// whole process: every mode runs the same instructions and agrees bitwise (docs/modes.md), whatever the set.
// A new kernel: one line in KDAGRAPH_CPU_KERNELS, its source in kernels/CMakeLists.txt's list.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define KDAGRAPH_CPU_X86 1  // the sets above baseline exist (kernels/CMakeLists.txt: CMAKE_SYSTEM_PROCESSOR)
#else
#define KDAGRAPH_CPU_X86 0
#endif

namespace kdagraph {

// baseline: what the compiler targets by default (SSE2 on x86-64), multiply then add;
// avx2: AVX2 with FMA; avx512: AVX-512 F, VL, DQ, BW with FMA. Values are KDAGRAPH_CPU_ISA's.
enum class CpuIsa : int { baseline = 0, avx2 = 1, avx512 = 2 };
inline constexpr int kCpuIsaCount = 3;

const char* to_string(CpuIsa isa);
// Whether this CPU and its OS run `isa`, and whether this build has a copy for it.
bool cpu_isa_supported(CpuIsa isa);
// The set every CPU kernel of this process runs: the best one supported, or the one the environment
// variable KDAGRAPH_CPU_ISA names (baseline, avx2, avx512: to compare sets, or to pin results across
// machines). Decided at the first call and fixed for the process. An unknown name, or a set this CPU
// does not run, throws InvalidArgument naming KDAGRAPH_CPU_ISA.
CpuIsa cpu_isa();

// Threads the CPU kernels use: set_cpu_threads's count, else the environment variable
// KDAGRAPH_CPU_THREADS (an engine with OpenMP work of its own may give the kernels fewer), else OpenMP's
// (OMP_NUM_THREADS, else the cores); 0 at any step means the next. Results do not depend on it. A
// KDAGRAPH_CPU_THREADS that is no count in [0, 4096] throws InvalidArgument naming it.
int cpu_threads();
void set_cpu_threads(int threads);

// A kernel call writing more post-state bytes than this stores them past the cache (non-temporal): a
// round runs every layer before it reads a layer's post-states again, so those that do not stay beside
// the core are evicted before then, and a cached store reads every line before it writes it. Default:
// one core's level-2 cache. 0 streams always, INT64_MAX never (benchmarks).
int64_t cpu_streaming_store_bytes();
void set_cpu_streaming_store_bytes(int64_t bytes);

// This thread's scratch, 64-byte aligned, at least `bytes` long. It grows to the largest request and is
// kept for the thread's life, so a kernel call allocates only the first time a thread meets a shape
// larger than any before. Valid until this thread's next call.
void* cpu_thread_scratch(size_t bytes);

struct VerifyParams;
struct ConvParams;
struct ConvWindowParams;
struct StateCopyParams;

// Every CPU kernel (name, parameters): one copy per set, and kdagraph::name (declared beside its CUDA
// launcher in the kernel's header) dispatching to it in kernels/cpu_isa.cpp.
#define KDAGRAPH_CPU_KERNELS(X)                \
  X(verify_cpu, VerifyParams)                  \
  X(conv_cpu, ConvParams)                      \
  X(conv_window_cpu, ConvWindowParams)         \
  X(copy_accepted_states_cpu, StateCopyParams) \
  X(reset_accept_len_cpu, StateCopyParams)

#define KDAGRAPH_DECLARE_CPU_KERNEL(name, Params) void name(const Params& p);
namespace cpu_baseline {
KDAGRAPH_CPU_KERNELS(KDAGRAPH_DECLARE_CPU_KERNEL)
}
#if KDAGRAPH_CPU_X86
namespace cpu_avx2 {
KDAGRAPH_CPU_KERNELS(KDAGRAPH_DECLARE_CPU_KERNEL)
}
namespace cpu_avx512 {
KDAGRAPH_CPU_KERNELS(KDAGRAPH_DECLARE_CPU_KERNEL)
}
#endif

}  // namespace kdagraph

// ---- inside a kernel's copy for one set --------------------------------------------------------------
#if defined(KDAGRAPH_CPU_ISA)
#define KDAGRAPH_PRAGMA_STRING(x) _Pragma(#x)
#define KDAGRAPH_PRAGMA(x) KDAGRAPH_PRAGMA_STRING(x)
#if KDAGRAPH_CPU_ISA == 0
#define KDAGRAPH_CPU_ISA_NAMESPACE cpu_baseline
#elif KDAGRAPH_CPU_ISA == 1 && KDAGRAPH_CPU_X86
#define KDAGRAPH_CPU_ISA_NAMESPACE cpu_avx2
#define KDAGRAPH_CPU_ISA_TARGET "avx2,fma"
#elif KDAGRAPH_CPU_ISA == 2 && KDAGRAPH_CPU_X86
#define KDAGRAPH_CPU_ISA_NAMESPACE cpu_avx512
#define KDAGRAPH_CPU_ISA_TARGET "avx512f,avx512vl,avx512dq,avx512bw,avx2,fma"
#else
#error "KDAGRAPH_CPU_ISA names no instruction set of this architecture"
#endif

#if !defined(KDAGRAPH_CPU_ISA_TARGET)
#define KDAGRAPH_CPU_ISA_BEGIN namespace kdagraph::KDAGRAPH_CPU_ISA_NAMESPACE {
#define KDAGRAPH_CPU_ISA_END }
#elif defined(__clang__)
#define KDAGRAPH_CPU_ISA_BEGIN                                                                          \
  KDAGRAPH_PRAGMA(clang attribute push(__attribute__((target(KDAGRAPH_CPU_ISA_TARGET))), apply_to = function)) \
  namespace kdagraph::KDAGRAPH_CPU_ISA_NAMESPACE {
#define KDAGRAPH_CPU_ISA_END \
  }                          \
  KDAGRAPH_PRAGMA(clang attribute pop)
#else
#define KDAGRAPH_CPU_ISA_BEGIN                  \
  KDAGRAPH_PRAGMA(GCC push_options)             \
  KDAGRAPH_PRAGMA(GCC target(KDAGRAPH_CPU_ISA_TARGET)) \
  namespace kdagraph::KDAGRAPH_CPU_ISA_NAMESPACE {
#define KDAGRAPH_CPU_ISA_END \
  }                          \
  KDAGRAPH_PRAGMA(GCC pop_options)
#endif
#endif
