#include "graph/cpu_capture.h"

#include <utility>

#include "kdagraph/error.hpp"

namespace kdagraph::detail {
namespace {
thread_local bool t_capturing = false;
thread_local std::vector<CpuNode> t_nodes;
}  // namespace

void cpu_record(CpuNode node) { t_nodes.push_back(std::move(node)); }

void cpu_capture_begin() {
  if (t_capturing) throw Error("cpu_capture_begin: a capture is already open on this thread");
  t_nodes.clear();
  t_capturing = true;
}

std::vector<CpuNode> cpu_capture_end() {
  if (!t_capturing) throw Error("cpu_capture_end: no capture is open on this thread");
  t_capturing = false;
  return std::exchange(t_nodes, {});
}

bool cpu_capture_active() { return t_capturing; }

}  // namespace kdagraph::detail
