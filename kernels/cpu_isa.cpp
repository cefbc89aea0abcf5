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
                          std::string("'") + named + "' is not a thread count in [0, " + std::to_string(kMaxThreads) + "]");
  return int(threads);
}

// The largest cache of cpu0 as the kernel describes it (sysfs); sysconf's figure comes from CPUID, which
// a hypervisor may fill with the host's (320 MiB on the development VM, whose L3 is 32 MiB).
int64_t last_level_cache_bytes() {
  int64_t largest = 0;
  for (int index = 0; index < 8; ++index) {
    const std::string path = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size";
    std::FILE* f = std::fopen(path.c_str(), "r");
    if (f == nullptr) break;
    long long size = 0;
    char unit = 0;
    const int read = std::fscanf(f, "%lld%c", &size, &unit);
    std::fclose(f);
    if (read < 1) continue;
    const int64_t bytes = unit == 'K' ? size << 10 : unit == 'M' ? size << 20 : unit == 'G' ? size << 30 : size;
    largest = bytes > largest ? bytes : largest;
  }
  if (largest > 0) return largest;
  const long sysconf_bytes = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return sysconf_bytes > 0 ? sysconf_bytes : int64_t(32) << 20;
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
  // Half the last-level cache: a call's post-states share it with its seeds and inputs. Measured on the
  // development VM (32 MiB L3, profiling/results/2026-12-03-cpu-isa.md): cached stores won by up to 1.4x
  // up to 16 MiB of post-states a call, and lost by 1.5x to 1.9x from 32 MiB on.
  static const int64_t default_bytes = last_level_cache_bytes() / 2;
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
