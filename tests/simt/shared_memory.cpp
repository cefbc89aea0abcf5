// Shared memory of the SIMT executor: see tests/simt/shared_memory.h.
#include "tests/simt/shared_memory.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "tests/simt/executor.h"

namespace kdagraph::simt {
namespace {

constexpr unsigned char kSharedPoison = 0xff;

// Shared memory of every kernel: each shared object keeps its own offset for the whole process (kernels
// of all launches together stay far below the size).
constexpr size_t kSharedArenaBytes = size_t(4) << 20;
alignas(64) unsigned char g_shared_arena[kSharedArenaBytes];
std::atomic<size_t> g_shared_used{0};

}  // namespace

size_t reserve_shared(size_t bytes, size_t align) {
  static std::mutex m;
  const std::lock_guard<std::mutex> lk(m);
  const size_t used = g_shared_used.load(std::memory_order_relaxed);
  const size_t offset = (used + align - 1) / align * align;
  if (offset + bytes > kSharedArenaBytes) {
    std::fprintf(stderr, "kdagraph simt: shared objects need more than %zu bytes\n", kSharedArenaBytes);
    std::abort();
  }
  // Poisoned now: the block that reserves it is already running.
  std::memset(g_shared_arena + offset, kSharedPoison, bytes);
  g_shared_used.store(offset + bytes, std::memory_order_release);
  return offset;
}

unsigned char* shared_arena() { return g_shared_arena; }

namespace detail {

bool in_shared(const void* p, size_t bytes) {
  const auto* c = static_cast<const unsigned char*>(p);
  return c >= g_shared_arena && c + bytes <= g_shared_arena + g_shared_used.load(std::memory_order_acquire);
}

void poison_shared() { std::memset(g_shared_arena, kSharedPoison, g_shared_used.load(std::memory_order_acquire)); }

}  // namespace detail
}  // namespace kdagraph::simt
