// Shared memory of the SIMT executor: see simt/shared_memory.h.
#include "simt/shared_memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "simt/block.h"

namespace kdagraph::simt {
namespace {

constexpr unsigned char kSharedPoison = 0xff;

// Room for the shared objects of every kernel together (each keeps its offset for the whole process);
// mapped lazily, so an arena costs only the bytes in use.
constexpr size_t kSharedArenaBytes = size_t(4) << 20;

std::atomic<size_t> g_shared_used{0};

// Every arena, so that an object reserved while blocks are held is poisoned in theirs too. Never
// destroyed: the executor's block pool, which owns the arenas, may outlive any other static.
struct Arenas {
  std::mutex m;
  std::vector<unsigned char*> all;
};
Arenas& arenas() {
  static Arenas* const a = new Arenas;
  return *a;
}

}  // namespace

size_t reserve_shared(size_t bytes, size_t align) {
  Arenas& a = arenas();
  const std::lock_guard<std::mutex> lk(a.m);
  const size_t used = g_shared_used.load(std::memory_order_relaxed);
  const size_t offset = (used + align - 1) / align * align;
  if (offset + bytes > kSharedArenaBytes) {
    std::fprintf(stderr, "kdagraph simt: shared objects need more than %zu bytes\n", kSharedArenaBytes);
    std::abort();
  }
  // Poisoned now: the block that reserves it is already running, and held ones may use it later. (The
  // other lanes of the reserving block wait at the object's initialization until this returns.)
  for (unsigned char* arena : a.all) std::memset(arena + offset, kSharedPoison, bytes);
  g_shared_used.store(offset + bytes, std::memory_order_release);
  return offset;
}

unsigned char* shared_arena() { return detail::current_lane().block->shared.data(); }

unsigned char* dynamic_shared_arena() { return detail::current_lane().block->shared.dynamic_data(); }

namespace detail {

SharedArena::SharedArena() {
  void* p = mmap(nullptr, kSharedArenaBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error("kdagraph simt: cannot map a block's shared memory");
  data_ = static_cast<unsigned char*>(p);
  Arenas& a = arenas();
  const std::lock_guard<std::mutex> lk(a.m);
  a.all.push_back(data_);
}

SharedArena::~SharedArena() {
  {
    Arenas& a = arenas();
    const std::lock_guard<std::mutex> lk(a.m);
    a.all.erase(std::find(a.all.begin(), a.all.end(), data_));
  }
  munmap(data_, kSharedArenaBytes);
}

void SharedArena::start(size_t dynamic_bytes) {
  std::memset(data_, kSharedPoison, g_shared_used.load(std::memory_order_acquire));
  if (dynamic_bytes != dynamic_bytes_) {
    dynamic_ = dynamic_bytes > 0 ? std::make_unique<unsigned char[]>(dynamic_bytes) : nullptr;
    dynamic_bytes_ = dynamic_bytes;
  }
  if (dynamic_bytes > 0) std::memset(dynamic_.get(), kSharedPoison, dynamic_bytes);
}

bool SharedArena::contains(const void* p, size_t bytes) const {
  const auto* c = static_cast<const unsigned char*>(p);
  if (c >= data_ && c + bytes <= data_ + g_shared_used.load(std::memory_order_acquire)) return true;
  return dynamic_bytes_ > 0 && c >= dynamic_.get() && c + bytes <= dynamic_.get() + dynamic_bytes_;
}

bool in_shared(const void* p, size_t bytes) { return current_lane().block->shared.contains(p, bytes); }

}  // namespace detail
}  // namespace kdagraph::simt
