// The nodes of replayed CUDA graphs as the device ran them: CUPTI's activity records of every kernel,
// memset and memcpy launched by a graph, split into the graph launches they belong to
// (split_launches). This is the data
// behind Nsight Systems' `--cuda-graph-trace=node`, for machines where nsys cannot run. Built when the
// toolkit has CUPTI (KDAGRAPH_WITH_CUPTI).
//
// Tracing costs device time per node, so a traced replay is slower than an untraced one: time rounds
// without a trace, and trace separate rounds for the timeline.
#pragma once

#include <vector>

#include "profiling/node_timeline.h"

namespace kdagraph::profiling {

class NodeTrace {
 public:
  // Starts recording. Throws kdagraph::Error naming the CUPTI call and its message when CUPTI cannot
  // trace here (another tool holds it, or the driver refuses). One NodeTrace at a time per process.
  NodeTrace();
  ~NodeTrace();
  // Owns CUPTI's activity recording, which must be switched off exactly once.
  NodeTrace(const NodeTrace&) = delete;
  NodeTrace& operator=(const NodeTrace&) = delete;

  // Call after the traced work has finished (synchronize first). The timelines of the graph launches
  // whose nodes CUPTI delivered since the last call. Throws when CUPTI dropped records or delivered some
  // without timestamps. Launches of one graph must not overlap in time (launch them on one stream).
  std::vector<LaunchTimeline> take();
};

}  // namespace kdagraph::profiling
