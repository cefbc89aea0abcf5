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

namespace kdagraph::detail {

// Enqueues operation Op with parameters `p` on `s`. Stream-ordered; allocates nothing on the device.
template <class Op>
void enqueue(const Stream& s, const typename Op::Params& p) {
  switch (s.backend) {
    case Backend::cpu:
#if defined(KDAGRAPH_SIMT)
      // The SIMT test build (tests/simt/): the CPU backend runs the CUDA kernel's own source on the
      // executor, so every CPU test of the library exercises the kernels.
      cpu_submit([p] { check_launch(Op::cuda(p, nullptr), Op::kName, Op::shape(p)); }, true);
#else
      cpu_submit([p] { Op::cpu(p); }, true);
#endif
      return;
    case Backend::cuda:
#if defined(KDAGRAPH_WITH_CUDA)
      check_launch(Op::cuda(p, s.stream), Op::kName, Op::shape(p));
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
