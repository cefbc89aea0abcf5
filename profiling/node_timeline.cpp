#include "profiling/node_timeline.h"

#include <algorithm>
#include <stdexcept>

namespace kdagraph::profiling {

LaunchTimeline summarize_launch(std::vector<NodeInterval> nodes) {
  LaunchTimeline t;
  if (nodes.empty()) return t;
  std::sort(nodes.begin(), nodes.end(),
            [](const NodeInterval& a, const NodeInterval& b) { return a.start_ns < b.start_ns; });
  t.nodes = int32_t(nodes.size());
  uint64_t busy = 0, largest_gap = 0;
  uint64_t run_start = nodes.front().start_ns, run_end = nodes.front().end_ns;  // the current merged run
  for (const NodeInterval& n : nodes) {
    if (n.start_ns > run_end) {  // a gap: close the run
      busy += run_end - run_start;
      largest_gap = std::max(largest_gap, n.start_ns - run_end);
      run_start = n.start_ns;
    }
    run_end = std::max(run_end, n.end_ns);
  }
  busy += run_end - run_start;
  t.span_us = double(run_end - nodes.front().start_ns) * 1e-3;
  t.busy_us = double(busy) * 1e-3;
  t.largest_gap_us = double(largest_gap) * 1e-3;
  return t;
}

double median(std::vector<double> values) {
  if (values.empty()) throw std::invalid_argument("median: no values");
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace kdagraph::profiling
