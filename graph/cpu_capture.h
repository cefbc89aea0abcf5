// The CPU backend's twin of CUDA stream capture (docs/graphs.md): while a thread has a capture open, work the
// library submits on the CPU backend is recorded, with its parameters frozen, instead of run. Replaying
// the recording runs the nodes in order against the same static buffers, as a CUDA graph does.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace kdagraph::detail {

using CpuNode = std::function<void()>;

// What a capture recorded: its nodes in order, and how many of them are kernels.
struct CpuCapture {
  std::vector<CpuNode> nodes;
  int32_t kernel_nodes = 0;
};

// Thread-local capture, like cudaStreamCaptureModeThreadLocal. Captures do not nest.
void cpu_capture_begin();
CpuCapture cpu_capture_end();
bool cpu_capture_active();
// `kernel`: an operation of kernels/ (a kernel node on CUDA), not a copy or host work.
void cpu_record(CpuNode node, bool kernel);

// Runs `node` now, or records it when this thread is capturing. Run now, it is never wrapped in a
// CpuNode: an eager round allocates nothing for it.
template <class F>
void cpu_submit(F&& node, bool kernel = false) {
  if (cpu_capture_active()) cpu_record(CpuNode(std::forward<F>(node)), kernel);
  else node();
}

}  // namespace kdagraph::detail
