// The CPU instruction set, thread count and per-thread scratch of kernels/cpu_isa.h, and the one
// dispatch of every CPU kernel to the copy for the process's set [TAG_CPU_ISA].
#include "kernels/cpu_isa.h"

#include <omp.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <string>

#include "kdagraph/error.hpp"
#include "kernels/conv.h"
#include "kernels/state_copy.h"
#include "kernels/verify.h"

namespace kdagraph {
namespace {

constexpr const char* kIsaVariable = "KDAGRAPH_CPU_ISA";

CpuIsa best_supported() {
#if KDAGRAPH_CPU_X86
  __builtin_cpu_init();
  // libgcc's and compiler-rt's checks include the OS's: the registers are saved across switches (XCR0).
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("fma"))
    return CpuIsa::avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return CpuIsa::avx2;
#endif
  return CpuIsa::baseline;
}

CpuIsa choose() {
  const CpuIsa best = best_supported();
  const char* named = std::getenv(kIsaVariable);
  if (named == nullptr || *named == '\0') return best;
  for (int i = 0; i < kCpuIsaCount; ++i) {
    const CpuIsa isa = CpuIsa(i);
    if (std::strcmp(named, to_string(isa)) != 0) continue;
    require(cpu_isa_supported(isa), "cpu_isa", kIsaVariable,
            std::string("'") + named + "' is not run by this CPU (the best it runs is '" + to_string(best) + "')");
    return isa;
  }
  detail::throw_invalid("cpu_isa", kIsaVariable, std::string("'") + named + "' is none of baseline, avx2, avx512");
}

std::atomic<int> g_threads{0};  // 0: not set, KDAGRAPH_CPU_THREADS or OpenMP's

constexpr const char* kThreadsVariable = "KDAGRAPH_CPU_THREADS";
constexpr int kMaxThreads = 4096;

int threads_from_environment() {
  const char* named = std::getenv(kThreadsVariable);
  if (named == nullptr || *named == '\0') return 0;
  char* end = nullptr;
  const long threads = std::strtol(named, &end, 10);
  if (*end != '\0' || threads < 0 || threads > kMaxThreads)
    detail::throw_invalid("cpu_threads", kThreadsVariable,
                          std::string("'") + named + "' is not a thread count in [0, " +
                              std::to_string(kMaxThreads) + "]");
  return int(threads);
}

// The size of cpu0's level-2 cache, its largest private one, as the kernel describes it (sysfs); else
// sysconf's (from CPUID, which a hypervisor may fill with the host's figures), else 1 MiB.
int64_t level2_cache_bytes() {
  auto read_number = [](const std::string& path, long long& value, char& unit) {
    std::FILE* f = std::fopen(path.c_str(), "r");
    if (f == nullptr) return false;
    unit = 0;
    const bool ok = std::fscanf(f, "%lld%c", &value, &unit) >= 1;
    std::fclose(f);
    return ok;
  };
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    long long level = 0, size = 0;
    char unit = 0;
    if (!read_number(dir + "level", level, unit)) break;
    if (level != 2 || !read_number(dir + "size", size, unit)) continue;
    return unit == 'K' ? size << 10 : unit == 'M' ? size << 20 : size;
  }
  const long bytes = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return bytes > 0 ? bytes : int64_t(1) << 20;
}

std::atomic<int64_t> g_streaming_bytes{-1};  // -1: not set, the default

struct AlignedFree {
  void operator()(void* p) const { ::operator delete(p, std::align_val_t(64)); }
};

}  // namespace

const char* to_string(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::baseline: return "baseline";
    case CpuIsa::avx2: return "avx2";
    case CpuIsa::avx512: return "avx512";
  }
  return "?";
}

bool cpu_isa_supported(CpuIsa isa) { return int(isa) <= int(best_supported()); }

CpuIsa cpu_isa() {
  static const CpuIsa chosen = choose();
  return chosen;
}

int cpu_threads() {
  static const int from_environment = threads_from_environment();
  const int set = g_threads.load(std::memory_order_relaxed);
  const int threads = set > 0 ? set : from_environment;
  return threads > 0 ? threads : omp_get_max_threads();
}

void set_cpu_threads(int threads) {
  require_in_range("set_cpu_threads", "threads", threads, 0, kMaxThreads);
  g_threads.store(threads, std::memory_order_relaxed);
}

int64_t cpu_streaming_store_bytes() {
  // One core's level-2 cache. A round runs every layer before it reads a layer's post-states again,
  // so post-states that do not stay beside the core are evicted from the shared cache by the other
  // layers' before they are read, and a cached store first reads every line it writes. Measured on the
  // development VM (profiling/results/2026-12-03-cpu-isa.md): over 20 layers, streaming won by 1.15x to
  // 1.7x from 2 MiB of post-states a call on.
  static const int64_t default_bytes = level2_cache_bytes();
  const int64_t set = g_streaming_bytes.load(std::memory_order_relaxed);
  return set >= 0 ? set : default_bytes;
}

void set_cpu_streaming_store_bytes(int64_t bytes) {
  require_in_range("set_cpu_streaming_store_bytes", "bytes", bytes, 0, std::numeric_limits<int64_t>::max());
  g_streaming_bytes.store(bytes, std::memory_order_relaxed);
}

void* cpu_thread_scratch(size_t bytes) {
  thread_local std::unique_ptr<void, AlignedFree> storage;
  thread_local size_t capacity = 0;
  if (bytes > capacity) {
    storage.reset(::operator new(bytes, std::align_val_t(64)));
    capacity = bytes;
  }
  return storage.get();
}

#if KDAGRAPH_CPU_X86
#define KDAGRAPH_DISPATCH_CPU_KERNEL(name, Params)        \
  void name(const Params& p) {                            \
    switch (cpu_isa()) {                                  \
      case CpuIsa::avx512: return cpu_avx512::name(p);    \
      case CpuIsa::avx2: return cpu_avx2::name(p);        \
      case CpuIsa::baseline: break;                       \
    }                                                     \
    cpu_baseline::name(p);                                \
  }
#else
#define KDAGRAPH_DISPATCH_CPU_KERNEL(name, Params) \
  void name(const Params& p) { cpu_baseline::name(p); }
#endif
KDAGRAPH_CPU_KERNELS(KDAGRAPH_DISPATCH_CPU_KERNEL)

}  // namespace kdagraph
