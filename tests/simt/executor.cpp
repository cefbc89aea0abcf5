// The SIMT executor: blocks one after another, each block's threads as fibers or OS threads, with the
// barrier, warp exchange and cp.async semantics described in tests/simt/executor.h.
//
// Synchronization is per object on purpose: the block barrier and each warp have their own mutex, so
// under ThreadSanitizer a warp exchange orders the lanes of that warp only and a missing __syncthreads
// between warps stays a visible race. (libstdc++'s std::barrier shares global atomics between all its
// waiters, which ThreadSanitizer takes as ordering and which hides such races.) The deadlock detector
// counts with relaxed atomics, which order nothing.
#include "tests/simt/executor.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KDA_SIMT_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(KDAGRAPH_SIMT_ASAN_FIBERS)
#define KDA_SIMT_ASAN 1
#endif
#if defined(KDA_SIMT_ASAN)
#include <sanitizer/common_interface_defs.h>
#endif

#if defined(KDAGRAPH_SIMT_FIBERS)
#include <sys/mman.h>

#include <boost/context/fiber.hpp>
#endif

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace kdagraph::simt {
namespace {

constexpr int kWarpSize = 32;
constexpr int kMaxBlockThreads = 1024;
constexpr unsigned char kSharedPoison = 0xff;
// How often a waiting OS thread looks whether the launch was aborted.
constexpr std::chrono::milliseconds kAbortPoll{10};

// Shared memory of every kernel: each shared object keeps its own offset for the whole process (kernels
// of all launches together stay far below the size).
constexpr size_t kSharedArenaBytes = size_t(4) << 20;
alignas(64) unsigned char g_shared_arena[kSharedArenaBytes];
std::atomic<size_t> g_shared_used{0};

bool in_shared(const void* p, size_t bytes) {
  const auto* c = static_cast<const unsigned char*>(p);
  return c >= g_shared_arena && c + bytes <= g_shared_arena + g_shared_used.load(std::memory_order_acquire);
}

std::string site(const char* file, int line) { return std::string(file) + ":" + std::to_string(line); }

bool same_site(const char* file_a, int line_a, const char* file_b, int line_b) {
  return line_a == line_b && (file_a == file_b || std::strcmp(file_a, file_b) == 0);
}

std::string dims(const uint3& d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}
std::string dims(const dim3& d) { return dims(uint3{d.x, d.y, d.z}); }

// Thrown through kernel code to unwind a lane once its launch has failed; the lane's entry catches it.
struct Aborted {};

enum class WaitKind : int { none, barrier, shuffle };

struct Copy {
  void* dst;
  const void* src;
  size_t bytes, zfill;
  int batch;  // the commit count when it was issued: batch k is closed by the (k+1)-th commit
  const char* file;
  int line;
};

struct Block;
struct Warp;

struct Lane {
  int index = 0;  // linear thread index in the block
  uint3 tid{};
  Block* block = nullptr;
  Warp* warp = nullptr;
  int lane = 0;  // in its warp
  // Guarded by the mutex of the object the lane waits at; cleared by whoever releases it.
  bool blocked = false;
  // Where the lane waits, for the deadlock report (read by other lanes: relaxed atomics).
  std::atomic<int> wait_kind{int(WaitKind::none)};
  std::atomic<const char*> wait_file{nullptr};
  std::atomic<int> wait_line{0};
  // cp.async copies issued and not yet performed; this lane's only.
  std::vector<Copy> copies;
  int commits = 0;
  bool finished = false;
#if defined(KDAGRAPH_SIMT_FIBERS)
  boost::context::fiber fiber;      // the lane, while it is suspended
  boost::context::fiber scheduler;  // the scheduler, while the lane runs
  void* stack_bottom = nullptr;
  size_t stack_size = 0;
  void* fake_stack = nullptr;  // AddressSanitizer's, across a switch
#endif
};

// One warp's exchange point. Lanes arrive with their value; the last one named in the mask computes
// every lane's result and releases the others.
struct Warp {
  std::mutex m;
  std::condition_variable cv;  // threads engine
  uint32_t present = 0;  // lanes that exist (the last warp of a block may be partial)
  uint32_t exited = 0;
  uint32_t open = 0;  // mask of the exchange under way, 0 when none
  uint32_t arrived = 0;
  const char* file = nullptr;
  int line = 0;
  Lane* lanes[kWarpSize] = {};
  uint64_t value[kWarpSize] = {};
  int source[kWarpSize] = {};
  uint64_t result[kWarpSize] = {};
};

struct Barrier {
  std::mutex m;
  std::condition_variable cv;  // threads engine
  int arrived = 0;
  int exited = 0;
  const char* file = nullptr;
  int line = 0;
  std::vector<Lane*> waiting;
};

// Picks the next fiber to run among the runnable ones.
class ReadySet {
 public:
  void reset(int lanes) {
    words_.assign(size_t((lanes + 63) / 64), 0);
    for (int i = 0; i < lanes; ++i) set(i);
  }
  void set(int i) { words_[size_t(i / 64)] |= uint64_t(1) << (i % 64); }
  void clear(int i) { words_[size_t(i / 64)] &= ~(uint64_t(1) << (i % 64)); }

  // -1 when no lane can run.
  int pick(Schedule s, int last, std::mt19937_64& rng) const {
    switch (s) {
      case Schedule::ascending: return next_from(0);
      case Schedule::descending:
        for (int w = int(words_.size()) - 1; w >= 0; --w)
          if (words_[size_t(w)]) return w * 64 + 63 - __builtin_clzll(words_[size_t(w)]);
        return -1;
      case Schedule::round_robin: {
        const int i = next_from(last + 1);
        return i >= 0 ? i : next_from(0);
      }
      case Schedule::random: {
        int count = 0;
        for (uint64_t w : words_) count += __builtin_popcountll(w);
        if (count == 0) return -1;
        int k = int(rng() % uint64_t(count));
        for (size_t w = 0; w < words_.size(); ++w) {
          uint64_t bits = words_[w];
          if (k >= __builtin_popcountll(bits)) {
            k -= __builtin_popcountll(bits);
            continue;
          }
          for (; k > 0; --k) bits &= bits - 1;  // drop the k lowest set bits
          return int(w) * 64 + __builtin_ctzll(bits);
        }
        return -1;
      }
      case Schedule::rotate: break;  // resolved to one of the four per launch, never picked from
    }
    return -1;
  }

 private:
  int next_from(int first) const {
    for (int w = first / 64; w < int(words_.size()); ++w) {
      uint64_t bits = words_[size_t(w)];
      if (w == first / 64) bits &= ~uint64_t(0) << (first % 64);
      if (bits) return w * 64 + __builtin_ctzll(bits);
    }
    return -1;
  }
  std::vector<uint64_t> words_;
};

struct Block {
  Lanes engine = Lanes::fibers;
  Schedule schedule = Schedule::ascending;
  uint3 idx{};
  dim3 dim, grid;
  int threads = 0;
  void (*body)(const void*) = nullptr;
  const void* ctx = nullptr;

  std::vector<std::unique_ptr<Lane>> lanes;
  std::vector<std::unique_ptr<Warp>> warps;
  Barrier barrier;

  std::atomic<bool> aborted{false};
  std::mutex error_m;
  std::string error;

  // Threads engine: (live threads << 32) | threads waiting for a release. All live threads waiting is
  // a deadlock.
  std::atomic<uint64_t> live_waiting{0};

  // Fibers engine.
  ReadySet ready;
  std::mt19937_64 rng;
  int last = -1;
};

thread_local Lane* tl_lane = nullptr;

// The lock of a sync object: fibers all run on the launching thread, one at a time, and need none.
std::unique_lock<std::mutex> sync_lock(const Block& b, std::mutex& m) {
  return b.engine == Lanes::threads ? std::unique_lock<std::mutex>(m) : std::unique_lock<std::mutex>(m, std::defer_lock);
}

Lane& current_lane() {
  if (tl_lane == nullptr) {
    std::fprintf(stderr, "kdagraph simt: a device intrinsic was called outside a kernel launch\n");
    std::abort();
  }
  return *tl_lane;
}

std::string where(const Lane& l) {
  return "block " + dims(l.block->idx) + " thread " + dims(l.tid) + " (warp " + std::to_string(l.index / kWarpSize) +
         " lane " + std::to_string(l.lane) + ")";
}

// Records the launch's first error and unwinds the calling lane.
[[noreturn]] void fail(Lane& self, const std::string& what) {
  Block& b = *self.block;
  {
    const std::lock_guard<std::mutex> lk(b.error_m);
    if (b.error.empty()) b.error = where(self) + ": " + what;
  }
  b.aborted.store(true, std::memory_order_relaxed);
  throw Aborted{};
}

// Which threads wait where, when none of them can go on.
std::string describe_deadlock(const Block& b) {
  std::map<std::string, std::vector<int>> by_site;
  int exited = 0;
  for (const auto& l : b.lanes) {
    const auto kind = WaitKind(l->wait_kind.load(std::memory_order_relaxed));
    if (kind == WaitKind::none) {
      ++exited;
      continue;
    }
    const char* file = l->wait_file.load(std::memory_order_relaxed);
    by_site[std::string(kind == WaitKind::barrier ? "__syncthreads" : "__shfl_xor_sync") + " at " +
            site(file ? file : "?", l->wait_line.load(std::memory_order_relaxed))]
        .push_back(l->index);
  }
  std::string s = "deadlock: no thread of the block can go on;";
  for (const auto& [at, ids] : by_site) {
    s += " " + std::to_string(ids.size()) + " wait at " + at + " (threads " + std::to_string(ids.front());
    if (ids.size() > 1) s += ".." + std::to_string(ids.back());
    s += ");";
  }
  if (exited > 0) s += " " + std::to_string(exited) + " have exited";
  return s;
}

// Threads engine: adds to the live and waiting counts, and fails when every live thread now waits.
void account(Block& b, int64_t live, int64_t waiting, Lane& self) {
  const uint64_t delta = uint64_t(live) * (uint64_t(1) << 32) + uint64_t(waiting);  // modulo 2^64
  const uint64_t after = b.live_waiting.fetch_add(delta, std::memory_order_relaxed) + delta;
  const uint32_t now_live = uint32_t(after >> 32), now_waiting = uint32_t(after);
  if (now_live > 0 && now_waiting == now_live) fail(self, describe_deadlock(b));
}

#if defined(KDAGRAPH_SIMT_FIBERS)
// AddressSanitizer must know which stack is current across a switch.
void asan_start_switch(void** fake_stack, const void* bottom, size_t size) {
#if defined(KDA_SIMT_ASAN)
  __sanitizer_start_switch_fiber(fake_stack, bottom, size);
#else
  (void)fake_stack, (void)bottom, (void)size;
#endif
}
void asan_finish_switch(void* fake_stack, const void** bottom_old, size_t* size_old) {
#if defined(KDA_SIMT_ASAN)
  __sanitizer_finish_switch_fiber(fake_stack, bottom_old, size_old);
#else
  (void)fake_stack, (void)bottom_old, (void)size_old;
#endif
}

// The launching thread's stack, for AddressSanitizer, learnt at the first switch into a lane.
thread_local const void* tl_scheduler_bottom = nullptr;
thread_local size_t tl_scheduler_size = 0;

// Suspends the calling lane and runs the scheduler.
void yield_to_scheduler(Lane& self) {
  asan_start_switch(&self.fake_stack, tl_scheduler_bottom, tl_scheduler_size);
  self.scheduler = std::move(self.scheduler).resume();
  asan_finish_switch(self.fake_stack, &tl_scheduler_bottom, &tl_scheduler_size);
}
#endif

// Waits until another lane releases `self`; `lk` holds the mutex of the object waited at, `cv` is its
// condition variable.
void wait(Lane& self, std::unique_lock<std::mutex>& lk, std::condition_variable& cv, WaitKind kind,
          const char* file, int line) {
  Block& b = *self.block;
  self.blocked = true;
  self.wait_file.store(file, std::memory_order_relaxed);
  self.wait_line.store(line, std::memory_order_relaxed);
  self.wait_kind.store(int(kind), std::memory_order_relaxed);
  if (b.engine == Lanes::threads) {
    account(b, 0, 1, self);
    while (self.blocked && !b.aborted.load(std::memory_order_relaxed)) cv.wait_for(lk, kAbortPoll);
  } else {
#if defined(KDAGRAPH_SIMT_FIBERS)
    b.ready.clear(self.index);
    yield_to_scheduler(self);
#endif
  }
  self.wait_kind.store(int(WaitKind::none), std::memory_order_relaxed);
  if (self.blocked || b.aborted.load(std::memory_order_relaxed)) throw Aborted{};
}

// Releases a waiting lane; the caller holds the mutex `other` waits under, and notifies that object's
// condition variable once it has released them all.
void release(Lane& other) {
  Block& b = *other.block;
  other.blocked = false;
  if (b.engine == Lanes::threads) b.live_waiting.fetch_sub(1, std::memory_order_relaxed);
  else b.ready.set(other.index);
}

// What a lane must not leave behind when it returns from the kernel.
void on_exit(Lane& self) {
  if (!self.copies.empty())
    fail(self, std::to_string(self.copies.size()) +
                   " cp.async copies never waited for (__pipeline_wait_prior); the first issued at " +
                   site(self.copies.front().file, self.copies.front().line));
  Warp& w = *self.warp;
  {
    const auto lk = sync_lock(*self.block, w.m);
    w.exited |= 1u << self.lane;
    if (w.open & (1u << self.lane))
      fail(self, "exited while lanes of its warp wait for it at __shfl_xor_sync at " + site(w.file, w.line));
  }
  Barrier& br = self.block->barrier;
  {
    const auto lk = sync_lock(*self.block, br.m);
    ++br.exited;
    if (br.arrived > 0)
      fail(self, "exited while " + std::to_string(br.arrived) + " threads wait at __syncthreads at " +
                     site(br.file, br.line));
  }
  if (self.block->engine == Lanes::threads) account(*self.block, -1, 0, self);
}

void set_builtins(Lane& l) {
  tl_lane = &l;
  threadIdx = l.tid;
  blockIdx = l.block->idx;
  blockDim = l.block->dim;
  gridDim = l.block->grid;
}

// A lane from start to exit. Errors end in the block's error message, never in an exception.
void run_lane(Lane& l) {
  Block& b = *l.block;
  try {
    if (!b.aborted.load(std::memory_order_relaxed)) {
      b.body(b.ctx);
      on_exit(l);
    }
  } catch (const Aborted&) {
  } catch (const std::exception& e) {
    const std::lock_guard<std::mutex> lk(b.error_m);
    if (b.error.empty()) b.error = where(l) + ": the kernel threw: " + e.what();
    b.aborted.store(true, std::memory_order_relaxed);
  }
  l.finished = true;
}

// ---- the threads engine: a pool of OS threads, one per thread of the largest block so far ------------

class ThreadPool {
 public:
  ~ThreadPool() {
    {
      const std::lock_guard<std::mutex> lk(m_);
      stop_ = true;
    }
    start_.notify_all();
    for (auto& t : workers_) t.join();
  }

  // Runs run_lane on every lane of `b`, each on its own thread, and returns when all have finished.
  void run(Block& b) {
    std::unique_lock<std::mutex> lk(m_);
    while (int(workers_.size()) < b.threads) {
      const int id = int(workers_.size());
      workers_.emplace_back([this, id] { work(id); });
    }
    block_ = &b;
    remaining_ = b.threads;
    ++generation_;
    start_.notify_all();
    done_.wait(lk, [&] { return remaining_ == 0; });
    block_ = nullptr;
  }

 private:
  void work(int id) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lk(m_);
    for (;;) {
      start_.wait(lk, [&] { return stop_ || (generation_ != seen && block_ != nullptr); });
      if (stop_) return;
      seen = generation_;
      Block* b = block_;
      if (id >= b->threads) continue;
      lk.unlock();
      Lane& l = *b->lanes[size_t(id)];
      set_builtins(l);
      run_lane(l);
      tl_lane = nullptr;
      lk.lock();
      if (--remaining_ == 0) done_.notify_one();
    }
  }

  std::mutex m_;
  std::condition_variable start_, done_;
  std::vector<std::thread> workers_;
  Block* block_ = nullptr;
  uint64_t generation_ = 0;
  int remaining_ = 0;
  bool stop_ = false;
};

// ---- the fibers engine -----------------------------------------------------------------------------

#if defined(KDAGRAPH_SIMT_FIBERS)
// Fiber stacks, one per thread index, kept across blocks and launches; a guard page below each.
class StackPool {
 public:
#if defined(KDA_SIMT_ASAN)
  static constexpr size_t kStackBytes = size_t(512) << 10;
#else
  static constexpr size_t kStackBytes = size_t(128) << 10;
#endif
  static constexpr size_t kGuardBytes = 4096;

  ~StackPool() {
    for (void* s : stacks_) munmap(s, kStackBytes + kGuardBytes);
  }
  // Lowest usable address of stack i.
  char* bottom(int i) {
    while (int(stacks_.size()) <= i) {
      void* p = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::runtime_error("kdagraph simt: cannot map a fiber stack");
      mprotect(p, kGuardBytes, PROT_NONE);
      stacks_.push_back(p);
    }
    return static_cast<char*>(stacks_[size_t(i)]) + kGuardBytes;
  }

 private:
  std::vector<void*> stacks_;
};

StackPool& stack_pool() {
  static StackPool pool;
  return pool;
}

// Hands Boost.Context a stack from the pool; the pool keeps it.
struct PooledStack {
  char* bottom;
  boost::context::stack_context allocate() {
    boost::context::stack_context sc;
    sc.size = StackPool::kStackBytes;
    sc.sp = bottom + StackPool::kStackBytes;
    return sc;
  }
  void deallocate(boost::context::stack_context&) noexcept {}
};

void run_fibers(Block& b) {
  for (auto& lp : b.lanes) {
    Lane& l = *lp;
    l.stack_bottom = stack_pool().bottom(l.index);
    l.stack_size = StackPool::kStackBytes;
    l.fiber = boost::context::fiber(std::allocator_arg, PooledStack{static_cast<char*>(l.stack_bottom)},
                                    [&l](boost::context::fiber&& scheduler) {
                                      l.scheduler = std::move(scheduler);
                                      asan_finish_switch(nullptr, &tl_scheduler_bottom, &tl_scheduler_size);
                                      run_lane(l);
                                      asan_start_switch(nullptr, tl_scheduler_bottom, tl_scheduler_size);
                                      return std::move(l.scheduler);
                                    });
  }
  b.ready.reset(b.threads);
  int unfinished = b.threads;
  while (unfinished > 0) {
    int i = b.ready.pick(b.schedule, b.last, b.rng);
    if (i < 0) {
      {
        const std::lock_guard<std::mutex> lk(b.error_m);
        if (b.error.empty()) b.error = "block " + dims(b.idx) + ": " + describe_deadlock(b);
      }
      b.aborted.store(true, std::memory_order_relaxed);
    }
    if (b.aborted.load(std::memory_order_relaxed)) {  // every waiting lane unwinds
      for (auto& l : b.lanes)
        if (!l->finished) b.ready.set(l->index);
      if (i < 0) i = b.ready.pick(Schedule::ascending, -1, b.rng);
    }
    Lane& l = *b.lanes[size_t(i)];
    b.last = i;
    set_builtins(l);
    void* fake = nullptr;
    asan_start_switch(&fake, l.stack_bottom, l.stack_size);
    l.fiber = std::move(l.fiber).resume();
    asan_finish_switch(fake, nullptr, nullptr);
    tl_lane = nullptr;
    if (l.finished) {
      b.ready.clear(i);
      --unfinished;
    }
  }
}
#endif

// ---- launches --------------------------------------------------------------------------------------

Options default_options() {
  Options o;
  const char* env = std::getenv("KDAGRAPH_SIMT_LANES");
  if (!fibers_available() || (env != nullptr && std::strcmp(env, "threads") == 0)) o.lanes = Lanes::threads;
  return o;
}

struct State {
  std::mutex launch_m;  // one launch at a time; guards options and launches
  Options options = default_options();
  uint64_t launches = 0;
  std::mutex error_m;  // guards failed and last_error
  uint64_t failed = 0;
  std::string last_error;
};

State& state() {
  static State s;
  return s;
}

ThreadPool& thread_pool() {
  static ThreadPool pool;
  return pool;
}

// The lanes and warps of a launch's blocks, made once per launch.
void build_lanes(Block& b) {
  b.threads = int(b.dim.x * b.dim.y * b.dim.z);
  const int warps = (b.threads + kWarpSize - 1) / kWarpSize;
  for (int w = 0; w < warps; ++w) b.warps.push_back(std::make_unique<Warp>());
  for (int i = 0; i < b.threads; ++i) {
    auto l = std::make_unique<Lane>();
    l->index = i;
    l->tid = uint3{unsigned(i) % b.dim.x, unsigned(i) / b.dim.x % b.dim.y, unsigned(i) / (b.dim.x * b.dim.y)};
    l->block = &b;
    l->warp = b.warps[size_t(i / kWarpSize)].get();
    l->lane = i % kWarpSize;
    l->warp->present |= 1u << l->lane;
    l->warp->lanes[l->lane] = l.get();
    b.lanes.push_back(std::move(l));
  }
  b.barrier.waiting.reserve(size_t(b.threads));
}

// Everything a block leaves behind, cleared before the next one.
void reset_block(Block& b) {
  for (auto& l : b.lanes) {
    l->blocked = false;
    l->copies.clear();
    l->commits = 0;
    l->finished = false;
  }
  for (auto& w : b.warps) w->exited = w->open = w->arrived = 0;
  b.barrier.arrived = b.barrier.exited = 0;
  b.live_waiting.store(uint64_t(b.threads) << 32, std::memory_order_relaxed);
  b.last = -1;
}

// Blocks in the order the schedule asks for.
std::vector<uint64_t> block_order(uint64_t blocks, Schedule s, std::mt19937_64& rng) {
  std::vector<uint64_t> order(blocks);
  std::iota(order.begin(), order.end(), uint64_t(0));
  if (s == Schedule::descending) std::reverse(order.begin(), order.end());
  if (s == Schedule::random) std::shuffle(order.begin(), order.end(), rng);
  return order;
}

}  // namespace

const char* to_string(Lanes l) { return l == Lanes::fibers ? "fibers" : "threads"; }

const char* to_string(Schedule s) {
  switch (s) {
    case Schedule::ascending: return "ascending";
    case Schedule::descending: return "descending";
    case Schedule::round_robin: return "round_robin";
    case Schedule::random: return "random";
    case Schedule::rotate: return "rotate";
  }
  return "?";
}

bool fibers_available() {
#if defined(KDAGRAPH_SIMT_FIBERS)
  return true;
#else
  return false;
#endif
}

Options options() {
  State& s = state();
  const std::lock_guard<std::mutex> lk(s.launch_m);
  return s.options;
}

void set_options(const Options& o) {
  if (o.lanes == Lanes::fibers && !fibers_available())
    throw std::invalid_argument("kdagraph simt: fibers are not built in this configuration");
  State& s = state();
  const std::lock_guard<std::mutex> lk(s.launch_m);
  s.options = o;
}

std::string last_error() {
  State& s = state();
  const std::lock_guard<std::mutex> lk(s.error_m);
  return s.last_error;
}

uint64_t launches() {
  State& s = state();
  const std::lock_guard<std::mutex> lk(s.launch_m);
  return s.launches;
}

uint64_t failed_launches() {
  State& s = state();
  const std::lock_guard<std::mutex> lk(s.error_m);
  return s.failed;
}

cudaError_t launch(dim3 grid, dim3 block, void (*body)(const void*), const void* ctx) {
  State& s = state();
  const std::lock_guard<std::mutex> lk(s.launch_m);
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  const uint64_t blocks = uint64_t(grid.x) * grid.y * grid.z;
  auto refuse = [&](const std::string& why) {
    const std::lock_guard<std::mutex> elk(s.error_m);
    s.last_error = "launch refused: " + why;
    ++s.failed;
    return cudaErrorInvalidConfiguration;
  };
  if (threads == 0 || threads > uint64_t(kMaxBlockThreads) || block.z > 64)
    return refuse("block " + dims(block) + " outside 1..1024 threads");
  if (blocks == 0 || grid.y > 65535 || grid.z > 65535) return refuse("grid " + dims(grid));

  const uint64_t n = s.launches++;
  Schedule schedule = s.options.schedule;
  if (schedule == Schedule::rotate) schedule = Schedule(n % 4);
  std::mt19937_64 rng(0x5eed0000u + n);

  Block b;
  b.engine = s.options.lanes;
  b.schedule = schedule;
  b.dim = block;
  b.grid = grid;
  b.body = body;
  b.ctx = ctx;
  b.rng.seed(rng());
  build_lanes(b);
  for (const uint64_t linear : block_order(blocks, schedule, rng)) {
    b.idx = uint3{unsigned(linear % grid.x), unsigned(linear / grid.x % grid.y), unsigned(linear / (uint64_t(grid.x) * grid.y))};
    reset_block(b);
    std::memset(g_shared_arena, kSharedPoison, g_shared_used.load(std::memory_order_acquire));
#if defined(KDAGRAPH_SIMT_FIBERS)
    if (b.engine == Lanes::fibers) run_fibers(b);
    else thread_pool().run(b);
#else
    thread_pool().run(b);
#endif
    if (b.aborted.load(std::memory_order_relaxed)) {
      const std::string msg = "kernel launch grid " + dims(grid) + " block " + dims(block) + " (" +
                              to_string(b.engine) + ", schedule " + to_string(schedule) + "): " + b.error;
      std::fprintf(stderr, "kdagraph simt: %s\n", msg.c_str());
      const std::lock_guard<std::mutex> elk(s.error_m);
      s.last_error = msg;
      ++s.failed;
      return cudaErrorLaunchFailure;
    }
  }
  return cudaSuccess;
}

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

// ---- the device-side operations -----------------------------------------------------------------

void syncthreads(const char* file, int line) {
  Lane& self = current_lane();
  Block& b = *self.block;
  Barrier& br = b.barrier;
  auto lk = sync_lock(b, br.m);
  if (br.exited > 0)
    fail(self, "__syncthreads at " + site(file, line) + " after " + std::to_string(br.exited) +
                   " threads of the block exited: every thread must reach it");
  if (br.arrived == 0) {
    br.file = file;
    br.line = line;
  } else if (!same_site(br.file, br.line, file, line)) {
    fail(self, "__syncthreads at " + site(file, line) + " while other threads wait at the one at " +
                   site(br.file, br.line));
  }
  if (++br.arrived == b.threads) {
    br.arrived = 0;
    for (Lane* w : br.waiting) release(*w);
    br.waiting.clear();
    if (b.engine == Lanes::threads) br.cv.notify_all();
    return;
  }
  br.waiting.push_back(&self);
  wait(self, lk, br.cv, WaitKind::barrier, file, line);
}

uint64_t shfl_xor(uint32_t mask, uint64_t bits, int lane_mask, int width, const char* file, int line) {
  Lane& self = current_lane();
  Warp& w = *self.warp;
  const uint32_t me = 1u << self.lane;
  auto call = [&] { return "__shfl_xor_sync at " + site(file, line); };
  auto lk = sync_lock(*self.block, w.m);
  if (!(mask & me)) fail(self, call() + " with a mask that does not name the calling lane");
  if (mask & ~w.present) fail(self, call() + " names lanes that do not exist in this warp");
  if (mask & w.exited) fail(self, call() + " names lanes that have exited");
  if (width < 1 || width > kWarpSize || (width & (width - 1)) != 0)
    fail(self, call() + " with width " + std::to_string(width) + ", not a power of two up to 32");
  if (w.open == 0) {
    w.open = mask;
    w.arrived = 0;
    w.file = file;
    w.line = line;
  } else if (w.open != mask || !same_site(w.file, w.line, file, line)) {
    char masks[64];
    std::snprintf(masks, sizeof masks, "0x%08x, others 0x%08x", mask, w.open);
    fail(self, "divergent warp: " + call() + " (mask " + masks + " at " + site(w.file, w.line) + ")");
  }
  // CUDA's rule: the source lane is lane ^ lane_mask, or the lane itself when that lies past its
  // segment of `width` lanes.
  const int segment_end = (self.lane & ~(width - 1)) + width - 1;
  const int src = self.lane ^ (lane_mask & (kWarpSize - 1));
  w.source[self.lane] = src > segment_end ? self.lane : src;
  w.value[self.lane] = bits;
  w.arrived |= me;
  if (w.arrived == mask) {
    for (int l = 0; l < kWarpSize; ++l) {
      if (!(mask & (1u << l))) continue;
      if (!(mask & (1u << w.source[l])))
        fail(self, call() + ": lane " + std::to_string(l) + " reads lane " + std::to_string(w.source[l]) +
                       ", which the mask does not name");
      w.result[l] = w.value[w.source[l]];
    }
    w.open = 0;
    for (int l = 0; l < kWarpSize; ++l)
      if ((mask & (1u << l)) && l != self.lane) release(*w.lanes[l]);
    if (self.block->engine == Lanes::threads) w.cv.notify_all();
  } else {
    wait(self, lk, w.cv, WaitKind::shuffle, file, line);
  }
  return w.result[self.lane];
}

void pipeline_memcpy_async(void* dst, const void* src, size_t bytes, size_t zfill, const char* file, int line) {
  Lane& self = current_lane();
  auto call = [&] { return "__pipeline_memcpy_async at " + site(file, line); };
  if (bytes != 4 && bytes != 8 && bytes != 16)
    fail(self, call() + " of " + std::to_string(bytes) + " bytes: cp.async moves 4, 8 or 16");
  if (zfill > bytes) fail(self, call() + " zero-fills more than it copies");
  if (reinterpret_cast<uintptr_t>(dst) % bytes != 0 || reinterpret_cast<uintptr_t>(src) % bytes != 0)
    fail(self, call() + ": source or destination not aligned to " + std::to_string(bytes) + " bytes");
  if (!in_shared(dst, bytes)) fail(self, call() + ": the destination is not __shared__ memory");
  if (in_shared(src, bytes)) fail(self, call() + ": the source is __shared__ memory");
  self.copies.push_back(Copy{dst, src, bytes, zfill, self.commits, file, line});
}

void pipeline_commit() { ++current_lane().commits; }

void pipeline_wait_prior(size_t prior, const char* file, int line) {
  (void)file, (void)line;
  Lane& self = current_lane();
  // Batches older than the `prior` most recent committed ones land now; uncommitted copies stay queued.
  const int first_pending = self.commits - int(prior);
  auto landed = [&](const Copy& c) { return c.batch < first_pending; };
  for (const Copy& c : self.copies) {
    if (!landed(c)) continue;
    std::memcpy(c.dst, c.src, c.bytes - c.zfill);
    std::memset(static_cast<char*>(c.dst) + (c.bytes - c.zfill), 0, c.zfill);
  }
  self.copies.erase(std::remove_if(self.copies.begin(), self.copies.end(), landed), self.copies.end());
}

void check_global_access(const void* ptr, size_t align, const char* what, const char* file, int line) {
  Lane& self = current_lane();
  if (reinterpret_cast<uintptr_t>(ptr) % align != 0)
    fail(self, std::string(what) + " at " + site(file, line) + " of an address not aligned to " +
                   std::to_string(align) + " bytes");
  if (in_shared(ptr, align)) fail(self, std::string(what) + " at " + site(file, line) + " on __shared__ memory");
}

}  // namespace kdagraph::simt
