// SPEC §5 programmatic dependent launch on the CUDA backend [TAG_PDL]: rounds with PDL on and off agree
// bitwise (every mode, eager and in graphs, with the conv), and a captured round keeps its programmatic
// edges (cudaGraphGetEdges with edge data: cudaGraphDependencyTypeProgrammatic between its kernels), none
// with PDL off. Each test reports SKIPPED without a GPU; the edge test also below sm_90, which has no PDL.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kdagraph/host_engine.hpp"
#include "kdagraph/verifier.hpp"
#include "tests/common/engines.h"
#include "tests/common/gpu.h"
#include "tests/common/storage.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {
namespace {

HostEngineConfig gpu_engine(Mode mode, Exec exec, bool conv, bool pdl, uint64_t seed) {
  HostEngineConfig c = small_engine(Backend::cuda, mode, exec, seed);
  c.verifier.model = ModelShape{3, 2, 4, 64, 64};
  c.verifier.io_dtype = DType::bf16;
  if (conv) c = with_conv(c);
  c.verifier.pdl = pdl;
  c.retire_rate = 0.15;
  return c;
}

void run_rounds(HostEngine& e, const Stream& s, int rounds) {
  e.start(s);
  for (int r = 0; r < rounds; ++r) e.run_round(s);
  e.finish(s);
}

TEST(PdlCuda, RoundsWithPdlOnAndOffAgreeBitwise) {
  KDA_SKIP_WITHOUT_GPU();
  const auto stream = test_stream();
  const Stream s = stream.get();
  struct Variant {
    Mode mode;
    Exec exec;
    bool conv;
  };
  for (const Variant v : {Variant{Mode::fused_accept, Exec::graph, true}, Variant{Mode::two_phase, Exec::eager, true},
                          Variant{Mode::replay, Exec::graph, false}, Variant{Mode::two_phase, Exec::graph, false}}) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(std::string(to_string(v.mode)) + " " + to_string(v.exec) + (v.conv ? " conv" : "") +
                 " seed=" + std::to_string(seed));
    HostEngine off(gpu_engine(v.mode, v.exec, v.conv, false, seed)), on(gpu_engine(v.mode, v.exec, v.conv, true, seed));
    run_rounds(off, s, 60);
    run_rounds(on, s, 60);
    ASSERT_EQ(off.rounds().size(), on.rounds().size());
    for (size_t r = 0; r < off.rounds().size(); ++r) {
      ASSERT_EQ(off.rounds()[r].slots, on.rounds()[r].slots) << "round " << r;
      ASSERT_EQ(off.rounds()[r].outputs, on.rounds()[r].outputs) << "outputs differ in round " << r;
    }
    ASSERT_EQ(off.retired().size(), on.retired().size());
    EXPECT_GT(on.retired().size(), 3u) << "the run should retire requests along the way";
    for (size_t i = 0; i < off.retired().size(); ++i) {
      EXPECT_EQ(off.retired()[i].state, on.retired()[i].state) << "request " << off.retired()[i].request;
      EXPECT_EQ(off.retired()[i].conv_window, on.retired()[i].conv_window) << "request " << off.retired()[i].request;
    }
    EXPECT_EQ(on.verifier().device_errors().count, 0u);
  }
}

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
  const size_t N = size_t(c.max_rows), T = size_t(c.tokens), C = size_t(c.conv.channels);
  const size_t HK = size_t(c.model.heads * c.model.head_k), HV = size_t(c.model.value_heads);
  DeviceBuffer x(N * T * C * 4), w(C * 4 * 4), q(N * T * HK * 4), k(N * T * HK * 4), vv(N * T * HV * 64 * 4),
      g(N * T * HV * 64 * 4), beta(N * T * HV * 4), o(N * T * HV * 64 * 4);
  std::vector<ConvLayerInputs> convs;
  std::vector<LayerInputs> layers;
  for (int l = 0; l < c.model.layers; ++l) {
    convs.push_back(conv_into_verify_inputs(v.spec(), x.data(), w.as<float>(), nullptr, q.data(), k.data(), vv.data()));
    LayerInputs in;
    in.q = q.data();
    in.k = k.data();
    in.v = vv.data();
    in.g = g.data();
    in.beta = beta.data();
    in.o = o.data();
    layers.push_back(in);
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
