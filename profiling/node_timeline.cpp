#include "profiling/node_timeline.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <utility>

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

std::vector<LaunchTimeline> split_launches(std::vector<NodeRecord> records) {
  std::stable_sort(records.begin(), records.end(), [](const NodeRecord& a, const NodeRecord& b) {
    return a.time.start_ns < b.time.start_ns;
  });
  std::vector<uint32_t> graphs;                                         // in order of first run
  std::map<uint32_t, std::vector<std::vector<NodeInterval>>> launches;  // graph -> launch -> nodes
  std::map<std::pair<uint32_t, uint64_t>, size_t> runs;                 // (graph, node) -> runs so far
  for (const NodeRecord& r : records) {
    if (launches.count(r.graph) == 0) graphs.push_back(r.graph);
    auto& of_graph = launches[r.graph];
    const size_t launch = runs[{r.graph, r.node}]++;
    if (of_graph.size() <= launch) of_graph.resize(launch + 1);
    of_graph[launch].push_back(r.time);
  }
  std::vector<LaunchTimeline> timelines;
  for (uint32_t g : graphs)
    for (std::vector<NodeInterval>& nodes : launches[g])
      timelines.push_back(summarize_launch(std::move(nodes)));
  return timelines;
}

double median(std::vector<double> values) {
  if (values.empty()) throw std::invalid_argument("median: no values");
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace kdagraph::profiling
