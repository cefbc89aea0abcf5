// The lanes of a SIMT executor block (simt/block.h): how one waits, is released and fails, and the
// two engines that run them: fibers on the launching thread, switched by a scheduler that follows the
// launch's Schedule (and able to hold a block at grid_dependency_wait), or one OS thread per lane.
#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <stdexcept>
#include <thread>
#include <utility>

#include "simt/block.h"
#include "simt/fiber_asan.h"

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace kdagraph::simt::detail {
namespace {

// How often a waiting OS thread looks whether the launch was aborted.
constexpr std::chrono::milliseconds kAbortPoll{10};

thread_local Lane* tl_lane = nullptr;

std::string where(const Lane& l) {
  return "block " + dims(l.block->idx) + " thread " + dims(l.tid) + " (warp " + std::to_string(l.index / kWarpSize) +
         " lane " + std::to_string(l.lane) + ")";
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
    const char* call = kind == WaitKind::barrier   ? "__syncthreads"
                       : kind == WaitKind::shuffle ? "__shfl_xor_sync"
                                                   : "grid_dependency_wait";
    by_site[std::string(call) + " at " +
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
      b.launch->body();
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

ThreadPool& thread_pool() {
  static ThreadPool pool;
  return pool;
}

// ---- the fibers engine -----------------------------------------------------------------------------

#if defined(KDAGRAPH_SIMT_FIBERS)
// Fiber stacks, kept across blocks and launches and lent to one fiber at a time; a guard page below
// each. Held blocks keep theirs, so up to two grids' held lanes (kMaxHeldLanes each) and a running
// block have one at once: each a mapping and a guard, well inside the kernel's mapping limit.
class StackPool {
 public:
#if defined(KDA_SIMT_ASAN)
  static constexpr size_t kStackBytes = size_t(512) << 10;
#else
  static constexpr size_t kStackBytes = size_t(128) << 10;
#endif
  static constexpr size_t kGuardBytes = 4096;

  ~StackPool() {
    for (char* bottom : all_) munmap(bottom - kGuardBytes, kStackBytes + kGuardBytes);
  }
  // Lowest usable address of a free stack.
  char* take() {
    if (free_.empty()) {
      void* p = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::runtime_error("kdagraph simt: cannot map a fiber stack");
      mprotect(p, kGuardBytes, PROT_NONE);
      all_.push_back(static_cast<char*>(p) + kGuardBytes);
      free_.push_back(all_.back());
    }
    char* bottom = free_.back();
    free_.pop_back();
    return bottom;
  }
  void give_back(char* bottom) { free_.push_back(bottom); }

 private:
  std::vector<char*> all_, free_;
};

StackPool& stack_pool() {
  static StackPool pool;
  return pool;
}

void start_fibers(Block& b) {
  for (auto& lp : b.lanes) {
    Lane& l = *lp;
    l.stack = stack_pool().take();
    l.fiber.start(l.stack, StackPool::kStackBytes, [](void* lane) { run_lane(*static_cast<Lane*>(lane)); }, &l);
  }
  b.ready.reset(b.threads);
  b.unfinished = b.threads;
}

// Runs the block's fibers until all have finished (true) or the block is held (false).
bool schedule_fibers(Block& b) {
  while (b.unfinished > 0) {
    int i = b.ready.pick(b.schedule, b.last, b.rng);
    if (i < 0 && b.grid_waiting > 0 && b.hold_at_wait && !b.aborted.load(std::memory_order_relaxed))
      return false;  // the rest is held at grid_dependency_wait
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
    l.fiber.resume();
    tl_lane = nullptr;
    if (l.finished) {
      b.ready.clear(i);
      --b.unfinished;
      stack_pool().give_back(std::exchange(l.stack, nullptr));
    }
  }
  return true;
}

// Suspends a waiting fiber lane until another lane (or the executor) releases it.
void suspend_fiber(Lane& self) {
  self.block->ready.clear(self.index);
  self.fiber.suspend();
}
#endif

}  // namespace

std::string site(const char* file, int line) { return std::string(file) + ":" + std::to_string(line); }

bool same_site(const char* file_a, int line_a, const char* file_b, int line_b) {
  return line_a == line_b && (file_a == file_b || std::strcmp(file_a, file_b) == 0);
}

std::string dims(const uint3& d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}
std::string dims(const dim3& d) { return dims(uint3{d.x, d.y, d.z}); }

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

void fail(Lane& self, const std::string& what) {
  Block& b = *self.block;
  {
    const std::lock_guard<std::mutex> lk(b.error_m);
    if (b.error.empty()) b.error = where(self) + ": " + what;
  }
  b.aborted.store(true, std::memory_order_relaxed);
  throw Aborted{};
}

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
    suspend_fiber(self);
#endif
  }
  self.wait_kind.store(int(WaitKind::none), std::memory_order_relaxed);
  if (self.blocked || b.aborted.load(std::memory_order_relaxed)) throw Aborted{};
}

void release(Lane& other) {
  Block& b = *other.block;
  other.blocked = false;
  if (b.engine == Lanes::threads) b.live_waiting.fetch_sub(1, std::memory_order_relaxed);
  else b.ready.set(other.index);
}

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

void reset_block(Block& b) {
  for (auto& l : b.lanes) {
    l->blocked = false;
    l->copies.clear();
    l->commits = 0;
    l->grid_waited = false;
    l->finished = false;
  }
  for (auto& w : b.warps) w->exited = w->open = w->arrived = 0;
  b.barrier.arrived = b.barrier.exited = 0;
  b.aborted.store(false, std::memory_order_relaxed);
  b.error.clear();
  b.live_waiting.store(uint64_t(b.threads) << 32, std::memory_order_relaxed);
  b.last = -1;
  b.grid_waiting = 0;
}

bool run_block(Block& b) {
#if defined(KDAGRAPH_SIMT_FIBERS)
  if (b.engine == Lanes::fibers) {
    start_fibers(b);
    return schedule_fibers(b);
  }
#endif
  thread_pool().run(b);
  return true;
}

void resume_block(Block& b) {
#if defined(KDAGRAPH_SIMT_FIBERS)
  b.hold_at_wait = false;
  for (auto& l : b.lanes)
    if (l->blocked && WaitKind(l->wait_kind.load(std::memory_order_relaxed)) == WaitKind::grid_dependency) {
      release(*l);
      --b.grid_waiting;
    }
  schedule_fibers(b);
#else
  (void)b;  // only fiber lanes are ever held
#endif
}

void hold_at_grid_dependency(Lane& self, const char* file, int line) {
#if defined(KDAGRAPH_SIMT_FIBERS)
  Block& b = *self.block;
  self.blocked = true;
  self.wait_file.store(file, std::memory_order_relaxed);
  self.wait_line.store(line, std::memory_order_relaxed);
  self.wait_kind.store(int(WaitKind::grid_dependency), std::memory_order_relaxed);
  ++b.grid_waiting;
  suspend_fiber(self);
  self.wait_kind.store(int(WaitKind::none), std::memory_order_relaxed);
  if (self.blocked || b.aborted.load(std::memory_order_relaxed)) throw Aborted{};
#else
  (void)self, (void)file, (void)line;
#endif
}

}  // namespace kdagraph::simt::detail
