// The SIMT executor's launches (simt/executor.h): the options, the launch counters, a grid's
// blocks one after another, each run by a lane engine (simt/lanes.cpp), and the grid held at its
// grid_dependency_wait for programmatic dependent launch [TAG_PDL].
#include "simt/executor.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "simt/block.h"

namespace kdagraph::simt {
namespace {

using detail::Block;
using detail::dims;
using detail::Grid;

Options default_options() {
  Options o;
  const char* env = std::getenv("KDAGRAPH_SIMT_LANES");
  if (!fibers_available() || (env != nullptr && std::strcmp(env, "threads") == 0)) o.lanes = Lanes::threads;
  return o;
}

// Blocks, with their lanes and shared memory, kept for reuse: a held grid keeps many at once.
class BlockPool {
 public:
  std::unique_ptr<Block> take(dim3 dim) {
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if ((*it)->dim.x == dim.x && (*it)->dim.y == dim.y && (*it)->dim.z == dim.z) {
        std::unique_ptr<Block> b = std::move(*it);
        free_.erase(it);
        return b;
      }
    auto b = std::make_unique<Block>();
    b->dim = dim;
    detail::build_lanes(*b);
    return b;
  }
  void give_back(std::unique_ptr<Block> b) { free_.push_back(std::move(b)); }

 private:
  std::vector<std::unique_ptr<Block>> free_;
};

struct State {
  std::mutex launch_m;  // one launch at a time; guards everything below but the errors
  Options options = default_options();
  uint64_t launches = 0;
  uint64_t held_launches = 0;
  LaunchShape last_launch;
  BlockPool blocks;
  // The grid held at its wait (fiber lanes), and the thread that launched it: its stream.
  std::unique_ptr<Grid> held;
  std::thread::id held_by;
  std::mutex error_m;  // guards failed and last_error
  uint64_t failed = 0;
  std::string last_error;

  ~State() {
    if (held != nullptr) {  // its lanes' arguments may be gone: never run them
      std::fprintf(stderr, "kdagraph simt: a held kernel was never completed (no synchronize)\n");
      (void)held.release();
    }
  }
};

State& state() {
  static State s;
  return s;
}

// Records a failed call; returns its error.
cudaError_t record_failure(State& s, const std::string& msg, cudaError_t err) {
  std::fprintf(stderr, "kdagraph simt: %s\n", msg.c_str());
  const std::lock_guard<std::mutex> lk(s.error_m);
  s.last_error = msg;
  ++s.failed;
  return err;
}

std::string describe(const Grid& g, const Block& b) {
  return "kernel launch grid " + dims(g.grid) + " block " + dims(g.block) + " (" + to_string(g.engine) +
         ", schedule " + to_string(g.schedule) + "): " + b.error;
}

// Lets a held grid's blocks go on from their wait and runs them to their end, returning them to the
// pool; the first failure's message, or empty. After a failure the remaining blocks unwind.
std::string complete(State& s, Grid& g) {
  std::string error;
  for (auto& b : g.held) {
    if (!error.empty()) b->aborted.store(true, std::memory_order_relaxed);
    detail::resume_block(*b);
    if (error.empty() && !b->error.empty()) error = describe(g, *b);
    s.blocks.give_back(std::move(b));
  }
  g.held.clear();
  g.held_lanes = 0;
  return error;
}

// Completes the held grid, if any; the message of its failure, or empty.
std::string complete_held(State& s) {
  if (s.held == nullptr) return "";
  const std::unique_ptr<Grid> g = std::move(s.held);
  const std::string error = complete(s, *g);
  return error.empty() ? "" : "the previous kernel, held at its grid_dependency_wait, failed once it went on: " + error;
}

}  // namespace

const char* to_string(Lanes l) { return l == Lanes::fibers ? "fibers" : "threads"; }

bool fibers_available() {
#if defined(KDAGRAPH_SIMT_FIBERS)
  return true;
#else
  return false;
#endif
}

std::vector<Lanes> built_lanes() {
  std::vector<Lanes> lanes = built_fibers();
  lanes.push_back(Lanes::threads);
  return lanes;
}

std::vector<Lanes> built_fibers() { return fibers_available() ? std::vector<Lanes>{Lanes::fibers} : std::vector<Lanes>{}; }

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

LaunchShape last_launch() {
  State& s = state();
  const std::lock_guard<std::mutex> lk(s.launch_m);
  return s.last_launch;
}

uint64_t held_launches() {
  State& s = state();
  const std::lock_guard<std::mutex> lk(s.launch_m);
  return s.held_launches;
}

bool holding() {
  State& s = state();
  const std::lock_guard<std::mutex> lk(s.launch_m);
  return s.held != nullptr;
}

cudaError_t synchronize() {
  State& s = state();
  const std::lock_guard<std::mutex> lk(s.launch_m);
  const std::string error = complete_held(s);
  return error.empty() ? cudaSuccess : record_failure(s, error, cudaErrorLaunchFailure);
}

cudaError_t launch(dim3 grid, dim3 block, bool pdl, size_t dynamic_shared_bytes, std::function<void()> body) {
  State& s = state();
  const std::lock_guard<std::mutex> lk(s.launch_m);
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  const uint64_t blocks = uint64_t(grid.x) * grid.y * grid.z;
  if (threads == 0 || threads > uint64_t(detail::kMaxBlockThreads) || block.z > 64)
    return record_failure(s, "launch refused: block " + dims(block) + " outside 1..1024 threads",
                          cudaErrorInvalidConfiguration);
  if (blocks == 0 || grid.y > 65535 || grid.z > 65535)
    return record_failure(s, "launch refused: grid " + dims(grid), cudaErrorInvalidConfiguration);
  if (dynamic_shared_bytes > kMaxDynamicSharedBytes)
    return record_failure(s, "launch refused: " + std::to_string(dynamic_shared_bytes) +
                                 " bytes of dynamic shared memory, above " + std::to_string(kMaxDynamicSharedBytes),
                          cudaErrorInvalidValue);

  const uint64_t n = s.launches++;
  s.last_launch = LaunchShape{grid, block};
  Grid g;
  g.grid = grid;
  g.block = block;
  g.dynamic_shared_bytes = dynamic_shared_bytes;
  g.engine = s.options.lanes;
  g.schedule = s.options.schedule == Schedule::rotate ? Schedule(n % 4) : s.options.schedule;
  g.body = std::move(body);
  std::mt19937_64 rng(0x5eed0000u + n);

  // A programmatic launch with fiber lanes holds its blocks at their wait, so that the next kernel's
  // part above its own wait runs first; it overlaps the held grid only on that grid's thread (stream).
  const bool holds = pdl && g.engine == Lanes::fibers;
  if (!holds || s.held_by != std::this_thread::get_id()) {
    const std::string previous = complete_held(s);
    if (!previous.empty()) return record_failure(s, previous, cudaErrorLaunchFailure);
  }

  std::string error;
  for (const uint64_t linear : detail::block_order(blocks, g.schedule, rng)) {
    const bool room = g.held_lanes + int(threads) <= kMaxHeldLanes;
    if (holds && !room && s.held != nullptr) {
      // The device is full: the later blocks start once the previous kernel has completed, and run on.
      error = complete_held(s);
      if (!error.empty()) break;
    }
    std::unique_ptr<Block> b = s.blocks.take(block);
    b->engine = g.engine;
    b->schedule = g.schedule;
    b->grid = grid;
    b->launch = &g;
    b->idx = uint3{unsigned(linear % grid.x), unsigned(linear / grid.x % grid.y), unsigned(linear / (uint64_t(grid.x) * grid.y))};
    b->rng.seed(rng());
    detail::reset_block(*b);
    b->hold_at_wait = holds && room;
    b->shared.start(g.dynamic_shared_bytes);
    const bool finished = detail::run_block(*b);
    if (!b->error.empty()) error = describe(g, *b);
    if (finished) {
      s.blocks.give_back(std::move(b));
    } else {
      g.held_lanes += int(threads);
      g.held.push_back(std::move(b));
    }
    if (!error.empty()) break;
  }
  // The previous kernel runs on only now: everything of this one above its wait has run.
  if (error.empty()) error = complete_held(s);
  if (!error.empty()) {
    // Nothing of a failed launch stays held: its held blocks unwind, and so does the previous kernel.
    for (auto& b : g.held) b->aborted.store(true, std::memory_order_relaxed);
    (void)complete(s, g);
    (void)complete_held(s);
    return record_failure(s, error, cudaErrorLaunchFailure);
  }
  if (!g.held.empty()) {
    ++s.held_launches;
    s.held = std::make_unique<Grid>(std::move(g));
    s.held_by = std::this_thread::get_id();
    for (auto& b : s.held->held) b->launch = s.held.get();
  }
  return cudaSuccess;
}

}  // namespace kdagraph::simt
