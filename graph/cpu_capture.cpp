#include "graph/cpu_capture.h"

#include <utility>

#include "kdagraph/error.hpp"

namespace kdagraph::detail {
namespace {
thread_local bool t_capturing = false;
thread_local CpuCapture t_capture;
}  // namespace

void cpu_record(CpuNode node, bool kernel) {
  t_capture.nodes.push_back(std::move(node));
  t_capture.kernel_nodes += kernel ? 1 : 0;
}

void cpu_capture_begin() {
  if (t_capturing) throw Error("cpu_capture_begin: a capture is already open on this thread");
  t_capture = CpuCapture{};
  t_capturing = true;
}

CpuCapture cpu_capture_end() {
  if (!t_capturing) throw Error("cpu_capture_end: no capture is open on this thread");
  t_capturing = false;
  return std::exchange(t_capture, {});
}

bool cpu_capture_active() { return t_capturing; }

}  // namespace kdagraph::detail
