// [TAG_DISPATCH] The one place an operation's backend is chosen: the CPU implementation, run now or
// recorded into a CPU graph (graph/cpu_capture.h), or the CUDA launcher on the stream. (In the SIMT test
// build the CPU backend runs the CUDA launcher on the CPU instead.) Every operation
// of kernels/ is enqueued through enqueue<Op>; each kernel header declares its Op (name, CPU function,
// CUDA launcher, shape for messages). A new backend changes this file and the resources it owns.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "graph/cpu_capture.h"
#include "kdagraph/error.hpp"
#include "kdagraph/types.hpp"
#include "kernels/cuda_check.h"
#include "kernels/launch.h"

namespace kdagraph::detail {

// [TAG_PDL] On the CPU backend every operation has run when it returns. In the SIMT test build
// (simt/) the CPU backend runs the CUDA kernels on the executor, which models programmatic
// dependent launch (docs/graphs.md) by holding a kernel at its grid_dependency_wait until the next kernel has run
// up to its own. There an operation completes its kernels before it returns, except inside cpu_round:
// the enqueues of one round (an eager round, a CPU graph's replay) overlap as a GPU may run them, and
// have completed when cpu_round returns. Copies, fills and host work complete them before they run.
// Elsewhere nothing is ever held, and these are plain calls.
void complete_cpu_kernels();
bool in_cpu_round();
// Counts the open cpu_round scopes of this thread.
class CpuRoundDepth {
 public:
  CpuRoundDepth();
  ~CpuRoundDepth();
  CpuRoundDepth(const CpuRoundDepth&) = delete;
  CpuRoundDepth& operator=(const CpuRoundDepth&) = delete;
};

// Runs `enqueue_round`, the enqueues of one round on `s`, as one stretch of work (above).
template <class F>
void cpu_round(const Stream& s, F&& enqueue_round) {
  if (s.backend != Backend::cpu) return enqueue_round();
  {
    const CpuRoundDepth depth;
    enqueue_round();
  }
  if (!in_cpu_round()) complete_cpu_kernels();
}

// Enqueues operation Op with parameters `p` on `s`; with `pdl` its kernel may start while the kernel
// before it on the stream still runs (docs/graphs.md, RoundSpec::pdl). Stream-ordered; allocates nothing on
// the device.
template <class Op>
void enqueue(const Stream& s, const typename Op::Params& p, bool pdl) {
  switch (s.backend) {
    case Backend::cpu:
#if defined(KDAGRAPH_SIMT)
      // The SIMT test build (simt/): the CPU backend runs the CUDA kernel's own source on the
      // executor, so every CPU test of the library exercises the kernels.
      cpu_submit([p, pdl] {
        const cudaError_t err = Op::cuda(p, Launch{nullptr, pdl});
        if (err != cudaSuccess) throw_launch_failure(err, Op::kName, Op::shape(p));
        if (!in_cpu_round()) complete_cpu_kernels();
      }, true);
#else
      (void)pdl;
      cpu_submit([p] { Op::cpu(p); }, true);
#endif
      return;
    case Backend::cuda:
#if defined(KDAGRAPH_WITH_CUDA)
      // The shape is built only for a failure's message: an eager round allocates nothing.
      if (const cudaError_t err = Op::cuda(p, Launch{s.stream, pdl}); err != cudaSuccess)
        throw_launch_failure(err, Op::kName, Op::shape(p));
      return;
#else
      throw_no_cuda(Op::kName);
#endif
  }
  throw Error(std::string(Op::kName) + ": stream.backend is not cpu or cuda");
}

// Stream-ordered copy of `bytes` from `src` (backend or host memory) to backend memory `dst`. `src` must
// stay valid until the copy has run; captured, each replay reads it again.
void enqueue_copy(const Stream& s, void* dst, const void* src, size_t bytes);
// Stream-ordered fill of backend memory.
void enqueue_fill(const Stream& s, void* dst, int value, size_t bytes);

// Small host data (a batch, a slot list) copied into backend memory in stream order, staged at call
// time so the caller's memory is free on return. On CUDA it goes through pinned staging that is reused
// only after the copy that last read it ran; the host waits only when it is a whole ring ahead.
class Uploader {
 public:
  Uploader(Backend backend, size_t max_bytes);
  ~Uploader();
  // Owns pinned staging memory and events that must be released exactly once.
  Uploader(const Uploader&) = delete;
  Uploader& operator=(const Uploader&) = delete;

  void upload(const Stream& s, void* dst, const void* src, size_t bytes);

 private:
  struct Ring;
  std::unique_ptr<Ring> ring_;
  size_t max_bytes_;
};

// True while `s` is being captured (a CUDA graph, or the CPU twin on this thread).
bool is_capturing(const Stream& s);

}  // namespace kdagraph::detail
