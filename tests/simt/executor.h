// The SIMT executor (issue 12): runs the CUDA kernels' own source on the CPU, for tests only. Never
// installed, never part of the public API.
//
// A launch runs its blocks one after another. Each block's threads are lanes: fibers on the calling
// thread (fast, and scheduled adversarially: see Schedule), or real OS threads (what ThreadSanitizer
// needs to see concurrency; the only engine of a TSan build). The device-side API the kernels call
// (tests/simt/device.h) lands in the functions below: __syncthreads is a block barrier, every warp
// intrinsic an exchange that each lane named in the mask must reach, __pipeline_memcpy_async is
// deferred until the __pipeline_wait_prior that covers it, and shared memory (kdagraph::shared_object)
// is poisoned (0xff bytes: NaN in f32 and bf16, -1 in int32) at the start of every block. What CUDA leaves
// undefined and the executor can see (a divergent or partial warp exchange, a barrier some threads
// skip, copies never waited for, misaligned vector accesses) fails the launch with
// cudaErrorLaunchFailure and a message that last_error() returns.
//
// Programmatic dependent launch (SPEC §5) [TAG_PDL]: a kernel calls grid_dependency_wait() before it
// reads what the kernel before it writes, and trigger_dependent_launch() only after its own wait; a
// trigger before the lane's own wait fails the launch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

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
};

// What the following launches use. Default: fibers with Schedule::rotate; threads where fibers are
// not built (ThreadSanitizer builds, or no fiber implementation: tests/simt/fiber.h) or where the
// environment says KDAGRAPH_SIMT_LANES=threads.
Options options();
void set_options(const Options& o);
bool fibers_available();

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

// Runs body(ctx) as every thread of a grid x block launch, block after block; returns when all have
// run. Launches are serialized process-wide (there is one shared-memory arena).
cudaError_t launch(dim3 grid, dim3 block, void (*body)(const void*), const void* ctx);

// Shared memory: every shared object has its own offset in one arena, reserved at its first use and
// poisoned at the start of every block.
size_t reserve_shared(size_t bytes, size_t align);
unsigned char* shared_arena();

// The device-side operations behind tests/simt/device.h. `file` and `line` are the call site.
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
