// docs/graphs.md: capturing a round into a graph and replaying it, on either backend, as RAII owners. On CUDA
// a stream capture in thread-local mode, instantiated and uploaded; on the CPU the twin of
// graph/cpu_capture.h, which records the round's closures with their parameters frozen.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/cpu_capture.h"
#include "kdagraph/types.hpp"

// As the CUDA runtime spells them; keeps CUDA headers out of this header.
struct CUgraphExec_st;
typedef struct CUgraphExec_st* cudaGraphExec_t;

namespace kdagraph::detail {

// An instantiated graph of either backend.
class Graph {
 public:
  Graph() = default;
  ~Graph();
  // Owns a CUDA graph executable that must be destroyed exactly once; moves transfer it.
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  Graph(Graph&& other) noexcept;
  Graph& operator=(Graph&& other) noexcept;

  // Makes the graph resident before its first launch (CUDA); nothing to do on the CPU.
  void upload(const Stream& s) const;
  void launch(const Stream& s) const;
  // Kernel nodes of the captured work (on the CPU, the operations of kernels/ it recorded).
  int32_t kernel_nodes() const { return kernel_nodes_; }

 private:
  friend class CaptureGuard;
  void release() noexcept;
  Backend backend_ = Backend::cpu;
  std::vector<CpuNode> cpu_nodes_;
  cudaGraphExec_t exec_ = nullptr;
  int32_t kernel_nodes_ = 0;
};

// Begins a capture of `s`; end() instantiates what was captured. If the scope unwinds before end(), the
// destructor ends and discards the capture, and clears the error an invalidated CUDA capture leaves, so
// the next launch does not report it as its own.
class CaptureGuard {
 public:
  // `where` names the caller in errors (a legacy default stream on CUDA is refused).
  CaptureGuard(const Stream& s, const char* where);
  ~CaptureGuard();
  // Holds an open capture that must be ended exactly once.
  CaptureGuard(const CaptureGuard&) = delete;
  CaptureGuard& operator=(const CaptureGuard&) = delete;

  Graph end();
  // Ends the capture and instantiates what it captured `copies` times (CUDA: `copies` executables of one
  // captured graph), so that the device memory one executable holds can be measured on many at once.
  std::vector<Graph> end_copies(int32_t copies);

 private:
  Stream stream_;
  bool open_ = true;
};

}  // namespace kdagraph::detail
