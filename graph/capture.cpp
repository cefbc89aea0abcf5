#include "graph/capture.h"

#include <string>
#include <utility>
#include <vector>

#include "graph/dispatch.h"
#include "kdagraph/error.hpp"
#include "kernels/cuda_check.h"

namespace kdagraph::detail {

#if defined(KDAGRAPH_WITH_CUDA)
namespace {

// Kernel nodes of a captured graph (the copies and memsets are other node types).
int32_t count_kernel_nodes(cudaGraph_t graph) {
  size_t count = 0;
  KDA_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  KDA_CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
  int32_t kernels = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
    KDA_CUDA_CHECK(cudaGraphNodeGetType(node, &type));
    kernels += type == cudaGraphNodeTypeKernel ? 1 : 0;
  }
  return kernels;
}

}  // namespace
#endif

Graph::~Graph() { release(); }

Graph::Graph(Graph&& other) noexcept
    : backend_(other.backend_),
      cpu_nodes_(std::move(other.cpu_nodes_)),
      exec_(std::exchange(other.exec_, nullptr)),
      kernel_nodes_(other.kernel_nodes_) {}

Graph& Graph::operator=(Graph&& other) noexcept {
  if (this != &other) {
    release();
    backend_ = other.backend_;
    cpu_nodes_ = std::move(other.cpu_nodes_);
    exec_ = std::exchange(other.exec_, nullptr);
    kernel_nodes_ = other.kernel_nodes_;
  }
  return *this;
}

void Graph::release() noexcept {
#if defined(KDAGRAPH_WITH_CUDA)
  if (exec_ != nullptr) KDA_CUDA_CHECK_NOTHROW(cudaGraphExecDestroy(exec_));
#endif
  exec_ = nullptr;
}

void Graph::upload(const Stream& s) const {
  switch (backend_) {
    case Backend::cpu: return;
    case Backend::cuda:
#if defined(KDAGRAPH_WITH_CUDA)
      KDA_CUDA_CHECK(cudaGraphUpload(exec_, s.stream));
#else
      (void)s;
#endif
      return;
  }
}

void Graph::launch(const Stream& s) const {
  switch (backend_) {
    case Backend::cpu:
      cpu_round(s, [&] {
        for (const CpuNode& node : cpu_nodes_) node();
      });
      return;
    case Backend::cuda:
#if defined(KDAGRAPH_WITH_CUDA)
      KDA_CUDA_CHECK(cudaGraphLaunch(exec_, s.stream));
#else
      (void)s;
#endif
      return;
  }
}

CaptureGuard::CaptureGuard(const Stream& s, const char* where) : stream_(s) {
  switch (s.backend) {
    case Backend::cpu:
      cpu_capture_begin();
      return;
    case Backend::cuda:
#if defined(KDAGRAPH_WITH_CUDA)
      require(s.stream != nullptr && s.stream != cudaStreamLegacy, where, "stream",
              "is the legacy default stream; capture needs a stream created with cudaStreamCreate");
      KDA_CUDA_CHECK(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeThreadLocal));
      return;
#else
      throw Error(std::string(where) + ": backend cuda requested, but kdagraph was built without CUDA");
#endif
  }
}

CaptureGuard::~CaptureGuard() {
  if (!open_) return;
  switch (stream_.backend) {
    case Backend::cpu:
      (void)cpu_capture_end();
      return;
    case Backend::cuda: {
#if defined(KDAGRAPH_WITH_CUDA)
      cudaGraph_t graph = nullptr;
      (void)cudaStreamEndCapture(stream_.stream, &graph);
      if (graph != nullptr) (void)cudaGraphDestroy(graph);
      (void)cudaGetLastError();
#endif
      return;
    }
  }
}

Graph CaptureGuard::end() { return std::move(end_copies(1).front()); }

std::vector<Graph> CaptureGuard::end_copies(int32_t copies) {
  require(open_, "CaptureGuard::end", "capture", "was already ended");
  require_in_range("CaptureGuard::end_copies", "copies", copies, 1, INT32_MAX);
  open_ = false;
  std::vector<Graph> out(static_cast<size_t>(copies));
  for (Graph& g : out) g.backend_ = stream_.backend;
  switch (stream_.backend) {
    case Backend::cpu: {
      CpuCapture captured = cpu_capture_end();
      for (Graph& g : out) g.kernel_nodes_ = captured.kernel_nodes;
      for (size_t i = 0; i + 1 < out.size(); ++i) out[i].cpu_nodes_ = captured.nodes;
      out.back().cpu_nodes_ = std::move(captured.nodes);
      return out;
    }
    case Backend::cuda: {
#if defined(KDAGRAPH_WITH_CUDA)
      cudaGraph_t graph = nullptr;
      KDA_CUDA_CHECK(cudaStreamEndCapture(stream_.stream, &graph));
      const int32_t kernels = count_kernel_nodes(graph);
      cudaError_t err = cudaSuccess;
      for (Graph& g : out) {
        g.kernel_nodes_ = kernels;
        err = cudaGraphInstantiate(&g.exec_, graph, 0);
        if (err != cudaSuccess) break;  // the copies made so far are destroyed with `out`
      }
      KDA_CUDA_CHECK_NOTHROW(cudaGraphDestroy(graph));
      KDA_CUDA_CHECK(err);
#endif
      return out;
    }
  }
  return out;
}

}  // namespace kdagraph::detail
