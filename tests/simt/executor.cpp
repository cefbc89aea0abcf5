// The SIMT executor's launches (tests/simt/executor.h): the options, the launch counters and a grid's
// blocks one after another, each run by a lane engine (tests/simt/lanes.cpp).
#include "tests/simt/executor.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>

#include "tests/simt/block.h"
#include "tests/simt/shared_memory.h"

namespace kdagraph::simt {
namespace {

using detail::dims;

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

}  // namespace

const char* to_string(Lanes l) { return l == Lanes::fibers ? "fibers" : "threads"; }

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
  if (threads == 0 || threads > uint64_t(detail::kMaxBlockThreads) || block.z > 64)
    return refuse("block " + dims(block) + " outside 1..1024 threads");
  if (blocks == 0 || grid.y > 65535 || grid.z > 65535) return refuse("grid " + dims(grid));

  const uint64_t n = s.launches++;
  Schedule schedule = s.options.schedule;
  if (schedule == Schedule::rotate) schedule = Schedule(n % 4);
  std::mt19937_64 rng(0x5eed0000u + n);

  detail::Block b;
  b.engine = s.options.lanes;
  b.schedule = schedule;
  b.dim = block;
  b.grid = grid;
  b.body = body;
  b.ctx = ctx;
  b.rng.seed(rng());
  detail::build_lanes(b);
  for (const uint64_t linear : detail::block_order(blocks, schedule, rng)) {
    b.idx = uint3{unsigned(linear % grid.x), unsigned(linear / grid.x % grid.y), unsigned(linear / (uint64_t(grid.x) * grid.y))};
    detail::reset_block(b);
    detail::poison_shared();
    detail::run_block(b);
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

}  // namespace kdagraph::simt
