// The SIMT executor's insides (simt/executor.h is its interface): a grid, a block of lanes with its
// warps and barrier, how a lane waits and is released, and how a failure unwinds it. Shared by the lane
// engines (lanes.cpp), the device-side operations (device_api.cpp) and the launches (executor.cpp).
//
// Synchronization is per object on purpose: the block barrier and each warp have their own mutex, so
// under ThreadSanitizer a warp exchange orders the lanes of that warp only and a missing __syncthreads
// between warps stays a visible race. (libstdc++'s std::barrier shares global atomics between all its
// waiters, which ThreadSanitizer takes as ordering and which hides such races.) The deadlock detector
// counts with relaxed atomics, which order nothing.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "simt/executor.h"
#include "simt/schedule.h"
#include "simt/shared_memory.h"

#if defined(KDAGRAPH_SIMT_FIBERS)
#include "simt/fiber.h"
#endif

namespace kdagraph::simt::detail {

constexpr int kWarpSize = 32;
constexpr int kMaxBlockThreads = 1024;

std::string site(const char* file, int line);
bool same_site(const char* file_a, int line_a, const char* file_b, int line_b);
std::string dims(const uint3& d);
std::string dims(const dim3& d);

// Thrown through kernel code to unwind a lane once its launch has failed; the lane's entry catches it.
struct Aborted {};

enum class WaitKind : int { none, barrier, shuffle, grid_dependency };

// A cp.async copy: its source read when issued (as early as the device may read it), written to shared
// memory when a wait covers its batch.
struct Copy {
  void* dst;
  unsigned char data[16];
  size_t bytes, zfill;
  int batch;  // the commit count when it was issued: batch k is closed by the (k+1)-th commit
  const char* file;
  int line;
};

struct Block;
struct Grid;
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
  bool grid_waited = false;  // has passed grid_dependency_wait
  bool finished = false;
#if defined(KDAGRAPH_SIMT_FIBERS)
  Fiber fiber;
  char* stack = nullptr;  // while the fiber has one
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

// One launch: what its blocks run, and those held at their wait.
struct Grid {
  dim3 grid, block;
  size_t dynamic_shared_bytes = 0;
  Lanes engine = Lanes::fibers;
  Schedule schedule = Schedule::ascending;
  std::function<void()> body;
  std::vector<std::unique_ptr<Block>> held;  // in the order they ran
  int held_lanes = 0;
};

struct Block {
  Lanes engine = Lanes::fibers;
  Schedule schedule = Schedule::ascending;
  uint3 idx{};
  dim3 dim, grid;
  int threads = 0;
  const Grid* launch = nullptr;
  // A lane reaching grid_dependency_wait is held there (fibers, a programmatic launch, until the executor
  // lets the grid go on); otherwise the wait returns at once.
  bool hold_at_wait = false;
  SharedArena shared;

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
  int unfinished = 0;
  int grid_waiting = 0;  // lanes held at grid_dependency_wait
};

// The lanes and warps of a block of `b.dim` threads, made once per block shape.
void build_lanes(Block& b);
// Everything a block leaves behind, cleared before the next one.
void reset_block(Block& b);

// Runs every lane of the block: on the calling thread as fibers, or on OS threads. Returns true when
// all have finished, false when the block is held: no fiber can run and some wait at
// grid_dependency_wait (b.hold_at_wait).
bool run_block(Block& b);
// Lets a held block's lanes go on from grid_dependency_wait (or, once the block has failed, unwind) and
// runs it to its end.
void resume_block(Block& b);
// grid_dependency_wait of a fiber lane of a held block: suspends it until resume_block.
void hold_at_grid_dependency(Lane& self, const char* file, int line);

// The lane the calling thread (or fiber) runs; aborts the process outside a launch.
Lane& current_lane();
// Records the launch's first error and unwinds the calling lane.
[[noreturn]] void fail(Lane& self, const std::string& what);

// The lock of a sync object: fibers all run on the launching thread, one at a time, and need none.
std::unique_lock<std::mutex> sync_lock(const Block& b, std::mutex& m);
// Waits until another lane releases `self`; `lk` holds the mutex of the object waited at, `cv` is its
// condition variable.
void wait(Lane& self, std::unique_lock<std::mutex>& lk, std::condition_variable& cv, WaitKind kind,
          const char* file, int line);
// Releases a waiting lane; the caller holds the mutex `other` waits under, and notifies that object's
// condition variable once it has released them all.
void release(Lane& other);

}  // namespace kdagraph::simt::detail
