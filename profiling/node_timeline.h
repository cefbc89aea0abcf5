// How busy the device was inside one launch of a graph, from the start and end timestamps of the
// nodes that ran in it (docs/graphs.md; the graphs issue's aim: the device idles less than 5% of a replayed
// round between nodes). The timestamps come from profiling/node_trace.h on a GPU; this part is plain
// arithmetic, tested on the CPU.
#pragma once

#include <cstdint>
#include <vector>

namespace kdagraph::profiling {

struct NodeInterval {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;  // >= start_ns
};

struct LaunchTimeline {
  int32_t nodes = 0;
  double span_us = 0;         // first node's start to last node's end
  double busy_us = 0;         // length of the union of the nodes' intervals (overlaps counted once)
  double largest_gap_us = 0;  // longest stretch inside the span with no node running

  // Share of the span with no node running: 0 when the nodes run back to back (or the launch is one node).
  double idle_fraction() const { return span_us > 0 ? 1.0 - busy_us / span_us : 0.0; }
};

// The timeline of one launch; `nodes` in any order, possibly overlapping. Empty: all zero.
LaunchTimeline summarize_launch(std::vector<NodeInterval> nodes);

// One node's run as a tracer reports it: the instantiated graph and the node that ran.
struct NodeRecord {
  uint32_t graph = 0;
  uint64_t node = 0;
  NodeInterval time;
};

// Splits the node runs of replays of graphs into launches, without trusting the tracer's correlation
// ids (CUPTI 13.0 gets them wrong after its first session): a launch runs each of its graph's nodes
// once, and launches of one graph run one after another, so by start time the i-th run of every node
// of a graph belongs to its i-th launch. Launches in order of their graph's first run, then of launch.
std::vector<LaunchTimeline> split_launches(std::vector<NodeRecord> records);

// Median of a non-empty list.
double median(std::vector<double> values);

}  // namespace kdagraph::profiling
