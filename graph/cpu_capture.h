// The CPU backend's twin of CUDA stream capture (SPEC §5): while a thread has a capture open, work the
// library submits on the CPU backend is recorded, with its parameters frozen, instead of run. Replaying
// the recording runs the nodes in order against the same static buffers, as a CUDA graph does.
#pragma once

#include <functional>
#include <utility>
#include <vector>

namespace kdagraph::detail {

using CpuNode = std::function<void()>;

// Thread-local capture, like cudaStreamCaptureModeThreadLocal. Captures do not nest.
void cpu_capture_begin();
std::vector<CpuNode> cpu_capture_end();
bool cpu_capture_active();
void cpu_record(CpuNode node);

// Runs `node` now, or records it when this thread is capturing. Run now, it is never wrapped in a
// CpuNode: an eager round allocates nothing for it.
template <class F>
void cpu_submit(F&& node) {
  if (cpu_capture_active()) cpu_record(CpuNode(std::forward<F>(node)));
  else node();
}

}  // namespace kdagraph::detail
