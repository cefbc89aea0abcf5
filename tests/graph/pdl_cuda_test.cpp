// docs/graphs.md programmatic dependent launch on the GPU alone [TAG_PDL]: a captured round keeps its
// programmatic edges (cudaGraphGetEdges with edge data: cudaGraphDependencyTypeProgrammatic between its
// kernels), none with PDL off. SKIPPED without a GPU, and below sm_90, which has no PDL. (Rounds with PDL
// on and off agree bitwise on every runner: tests/graph/pdl_test.cpp.)
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "harness/host_engine.h"
#include "kdagraph/verifier.hpp"
#include "tests/common/engines.h"
#include "tests/common/gpu.h"
#include "tests/common/host_inputs.h"
#include "tests/common/storage.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {
namespace {

struct Edges {
  int kernels = 0, programmatic = 0, total = 0;
};

// A round captured into a graph (the index build, each layer's conv and verify), and its edges.
Edges captured_round_edges(bool pdl) {
  VerifierConfig c = small_verifier(Backend::cuda, Mode::fused_accept, 2);
  c.model = ModelShape{2, 2, 4, 64, 64};
  c.conv = ConvShape{conv_channels(c.model), 4, ConvActivation::silu};
  c.pdl = pdl;
  c.options.gate = GateMode::precomputed;  // the round's edges are the point: no gate parameters to give
  Verifier v(c);
  randomize_storage(v, 7);
  std::mt19937_64 rng(7);
  std::vector<HostInputs> in;
  std::vector<ConvLayerInputs> convs;
  std::vector<LayerInputs> layers;
  const DeviceBuffer x(size_t(c.max_rows) * c.tokens * c.conv.channels * 4), w(size_t(c.conv.channels) * 4 * 4);
  for (int l = 0; l < c.model.layers; ++l) in.emplace_back(c, c.max_rows, rng);
  for (HostInputs& layer : in) {
    layers.push_back(layer.view(nullptr));
    convs.push_back(conv_writing(v.spec(), x.data(), w.as<float>(), layers.back()));
  }
  const auto stream = test_stream();
  const Stream s = stream.get();
  const std::vector<int32_t> slots = {0, 1, 2};
  v.set_batch(s, slots.data(), 3);
  KDA_TEST_CUDA(cudaStreamSynchronize(s.stream));
  KDA_TEST_CUDA(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeThreadLocal));
  v.enqueue_round(s, convs.data(), layers.data(), 3);
  cudaGraph_t graph = nullptr;
  KDA_TEST_CUDA(cudaStreamEndCapture(s.stream, &graph));
  size_t count = 0;
  KDA_TEST_CUDA(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &count));
  std::vector<cudaGraphNode_t> from(count), to(count);
  std::vector<cudaGraphEdgeData> data(count);
  KDA_TEST_CUDA(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &count));
  size_t nodes = 0;
  KDA_TEST_CUDA(cudaGraphGetNodes(graph, nullptr, &nodes));
  std::vector<cudaGraphNode_t> all(nodes);
  KDA_TEST_CUDA(cudaGraphGetNodes(graph, all.data(), &nodes));
  Edges e;
  for (cudaGraphNode_t n : all) {
    cudaGraphNodeType type{};
    KDA_TEST_CUDA(cudaGraphNodeGetType(n, &type));
    e.kernels += type == cudaGraphNodeTypeKernel;
  }
  e.total = int(count);
  for (const cudaGraphEdgeData& d : data) e.programmatic += d.type == cudaGraphDependencyTypeProgrammatic;
  KDA_TEST_CUDA(cudaGraphDestroy(graph));
  return e;
}

TEST(PdlCuda, ACapturedRoundKeepsItsProgrammaticEdges) {
  KDA_SKIP_WITHOUT_GPU();
  int device = 0, major = 0;
  KDA_TEST_CUDA(cudaGetDevice(&device));
  KDA_TEST_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major < 9) GTEST_SKIP() << "compute capability " << major << ".x has no programmatic dependent launch";
  const Edges on = captured_round_edges(true), off = captured_round_edges(false);
  // The index build, then a conv and a verify per layer: a chain of 1 + 2 L kernels.
  EXPECT_EQ(on.kernels, 5);
  EXPECT_EQ(on.total, on.kernels - 1) << "one chain";
  EXPECT_EQ(on.programmatic, on.kernels - 1) << "every kernel after the first depends programmatically";
  EXPECT_EQ(off.kernels, on.kernels);
  EXPECT_EQ(off.programmatic, 0) << "PDL off: full dependencies only";
}

}  // namespace
}  // namespace kdagraph::test
