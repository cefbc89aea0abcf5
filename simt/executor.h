// The SIMT executor (issue 12): runs the CUDA kernels' own source on the CPU, for tests only. Never
// installed, never part of the public API.
//
// A launch runs its blocks one after another. Each block's threads are lanes: fibers on the calling
// thread (fast, and scheduled adversarially: see Schedule), or real OS threads (what ThreadSanitizer
// needs to see concurrency; the only engine of a TSan build). The device-side API the kernels call
// (simt/device.h) lands in the functions below: __syncthreads is a block barrier, every warp
// intrinsic an exchange that each lane named in the mask must reach, __pipeline_memcpy_async reads its
// source when issued and lands in shared memory at the __pipeline_wait_prior that covers it, and shared
// memory (kdagraph::shared_object) is each block's own, poisoned (0xff bytes: NaN in f32 and bf16, -1 in
// int32) at its start. What CUDA leaves undefined and the executor can see (a divergent or partial warp
// exchange, a barrier some threads skip, copies never waited for, misaligned vector accesses) fails the
// launch with cudaErrorLaunchFailure and a message that last_error() returns.
//
// Programmatic dependent launch (docs/graphs.md) [TAG_PDL]. A kernel launched with `pdl` may start while the
// previous kernel on the stream runs; it must reach grid_dependency_wait() before it reads what that
// kernel writes, and call trigger_dependent_launch() only after its own wait. With fiber lanes the
// executor takes the most adversarial order the device allows: a `pdl` kernel runs up to its
// grid_dependency_wait and is held there. When the next `pdl` kernel arrives, its blocks run up to their
// own wait first, and only then does the held kernel go on to its end; the new one is held in turn. A
// read above the wait therefore sees memory as it was before the previous kernel wrote anything below
// its wait. Anything else that orders the stream completes the held kernel first: a launch without
// `pdl`, or synchronize() (the library's CPU backend calls it before a copy, a fill or host work, and at
// the end of each operation or round: graph/dispatch.h). Like a device whose SMs are full, the executor
// holds at most kMaxHeldLanes lanes of a grid; its later blocks start once the previous kernel has
// completed, and run to their end. With OS-thread lanes (ThreadSanitizer) a `pdl` launch runs as a plain
// one: holding two grids of OS threads is too heavy, and the races TSan looks for are within a block. On
// either engine a trigger before the lane's own wait fails the launch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <driver_types.h>
#include <vector_types.h>

namespace kdagraph::simt {

enum class Lanes {
  fibers,   // every thread of a block is a fiber on the launching thread
  threads,  // every thread of a block is an OS thread
};

// The order in which fibers run. A fiber runs until it must wait (a barrier or a warp exchange that
// not every lane has reached) or exits; then the scheduler picks the next one that can run. Blocks run
// in ascending order, except descending under Schedule::descending and shuffled under ::random.
enum class Schedule {
  ascending,    // lowest-numbered runnable thread first: warp 0 runs as far ahead as it legally can
  descending,   // highest first: the last warp runs ahead
  round_robin,  // the next runnable thread after the one that just waited
  random,       // any runnable thread, from a generator seeded per launch
  rotate,       // launch i uses the i-th of the four above, so a test sweep sees all of them
};
const char* to_string(Lanes l);
const char* to_string(Schedule s);

struct Options {
  Lanes lanes = Lanes::fibers;
  Schedule schedule = Schedule::rotate;
  // The stand-in device's multiprocessors, which launchers size their choices by
  // (kdagraph::detail::device_multiprocessors): an H200's, so a test sees the GPU's choices at the
  // GPU's sizes; a test sets it to see another.
  int multiprocessors = 132;
};

// What the following launches use. Default: fibers with Schedule::rotate; threads where fibers are
// not built (ThreadSanitizer builds, or no fiber implementation: simt/fiber.h) or where the
// environment says KDAGRAPH_SIMT_LANES=threads.
Options options();
void set_options(const Options& o);
bool fibers_available();
// The lanes this build runs: fibers where they are built, then threads.
std::vector<Lanes> built_lanes();
// The fiber lanes alone where they are built; empty elsewhere.
std::vector<Lanes> built_fibers();

// Sets the options for a scope and restores the previous ones at its end.
class ScopedOptions {
 public:
  explicit ScopedOptions(const Options& o) : saved_(options()) { set_options(o); }
  ~ScopedOptions() { set_options(saved_); }
  ScopedOptions(const ScopedOptions&) = delete;
  ScopedOptions& operator=(const ScopedOptions&) = delete;

 private:
  Options saved_;
};

// The message of the last launch that failed; empty when none has.
std::string last_error();
// How many launches have run, and how many of them failed, so far (a test can tell whether its own
// launches reached the executor, and whether they failed).
uint64_t launches();
uint64_t failed_launches();
// The grid and block of the last launch the executor accepted (a test can tell which of a launcher's
// kernels it chose).
struct LaunchShape {
  dim3 grid, block;
};
LaunchShape last_launch();
// How many launches were held at their grid_dependency_wait so far (a test can tell that its kernels
// ran as programmatic dependent launches).
uint64_t held_launches();

// Runs `body` as every thread of a grid x block launch, block after block; returns when all have run,
// or, with `pdl`, when the blocks are held at their grid_dependency_wait (above). Launches are serialized
// process-wide. The error of a held kernel that fails once it goes on is returned by the call that
// completes it, as a device reports an asynchronous error at a later call.
// `dynamic_shared_bytes`: the block's dynamic shared memory (at most kMaxDynamicSharedBytes, an H100's or
// H200's opt-in limit less nothing static: the executor cannot tell one kernel's static objects apart).
cudaError_t launch(dim3 grid, dim3 block, bool pdl, size_t dynamic_shared_bytes, std::function<void()> body);
// Completes the held kernel, if any: cudaSuccess, or its failure.
cudaError_t synchronize();
// Whether a kernel is held at its grid_dependency_wait now.
bool holding();
// Lanes of one grid the executor holds at their wait at most (its stand-in for a full device).
inline constexpr int kMaxHeldLanes = 4096;

// Shared memory: every shared object has its own offset, reserved at its first use, in the arena of
// the block that runs (each held block keeps its own); its dynamic shared memory beside it.
size_t reserve_shared(size_t bytes, size_t align);
unsigned char* shared_arena();
unsigned char* dynamic_shared_arena();
inline constexpr size_t kMaxDynamicSharedBytes = 227 * 1024;

// The device-side operations behind simt/device.h. `file` and `line` are the call site.
void syncthreads(const char* file, int line);
uint64_t shfl_xor(uint32_t mask, uint64_t bits, int lane_mask, int width, const char* file, int line);
void pipeline_memcpy_async(void* dst, const void* src, size_t bytes, size_t zfill, const char* file, int line);
void pipeline_commit();
void pipeline_wait_prior(size_t prior, const char* file, int line);
// A vector load or store through the global-memory path: aligned to `align`, not __shared__.
void check_global_access(const void* ptr, size_t align, const char* what, const char* file, int line);
// cudaGridDependencySynchronize and cudaTriggerProgrammaticLaunchCompletion (kernels/launch.cuh).
void grid_dependency_wait(const char* file, int line);
void trigger_dependent_launch(const char* file, int line);

}  // namespace kdagraph::simt
