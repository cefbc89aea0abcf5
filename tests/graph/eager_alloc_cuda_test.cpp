// An eager round on the CUDA backend allocates nothing on the host (issue 21): after a warm-up round, a
// round through the Verifier (index build, conv and verify of every layer, accept, the two-phase commit),
// each kernel a programmatic launch, makes no heap allocation: no check that passes builds a message and
// no launch builds its shape. The CPU twin is tests/graph/eager_alloc_test.cpp. SKIPPED without a GPU.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "kdagraph/verifier.hpp"
#include "tests/common/allocation_counter.h"
#include "tests/common/engines.h"
#include "tests/common/gpu.h"

namespace kdagraph::test {
namespace {

constexpr int32_t kRows = 3;

std::unique_ptr<DeviceBuffer> random_buffer(size_t n, std::mt19937_64& rng, float scale) {
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> host(n);
  for (auto& x : host) x = d(rng);
  return std::make_unique<DeviceBuffer>(host);
}

TEST(EagerAllocationCuda, AVerifierRoundAllocatesNothing) {
  KDA_SKIP_WITHOUT_GPU();
  const auto stream = test_stream();
  const Stream s = stream.get();
  for (Mode mode : {Mode::fused_accept, Mode::two_phase, Mode::replay}) {
    SCOPED_TRACE(to_string(mode));
    VerifierConfig c = small_verifier(Backend::cuda, mode, 2);
    c.model = ModelShape{2, 2, 4, 64, 64};
    c.conv = ConvShape{conv_channels(c.model), 4, ConvActivation::silu};
    Verifier v(c);
    std::mt19937_64 rng(5);
    const size_t N = size_t(c.max_rows), T = size_t(c.tokens), C = size_t(c.conv.channels);
    const size_t HK = size_t(c.model.heads * c.model.head_k), HV = size_t(c.model.value_heads), K = 64;
    std::vector<std::unique_ptr<DeviceBuffer>> keep;
    std::vector<ConvLayerInputs> convs;
    std::vector<LayerInputs> layers;
    auto buffer = [&](size_t n, float scale) { return keep.emplace_back(random_buffer(n, rng, scale))->data(); };
    for (int l = 0; l < c.model.layers; ++l) {
      void* q = buffer(N * T * HK, 1.0f);
      void* k = buffer(N * T * HK, 1.0f);
      void* vv = buffer(N * T * HV * K, 1.0f);
      convs.push_back(conv_into_verify_inputs(v.spec(), buffer(N * T * C, 1.0f),
                                              static_cast<const float*>(buffer(C * 4, 0.3f)), nullptr, q, k, vv));
      LayerInputs in;
      in.q = q;
      in.k = k;
      in.v = vv;
      in.g = buffer(N * T * HV * K, 1.0f);
      in.beta = buffer(N * T * HV, 1.0f);
      in.o = buffer(N * T * HV * K, 0.0f);
      in.A_log = static_cast<const float*>(buffer(HV, 0.5f));
      in.dt_bias = static_cast<const float*>(buffer(HV * K, 0.5f));
      layers.push_back(in);
    }
    const DeviceBuffer accepted(std::vector<int32_t>(N, 2));
    const std::vector<int32_t> slots = {4, 0, 7};
    v.set_batch(s, slots.data(), kRows);
    auto round = [&] {
      v.enqueue_round(s, convs.data(), layers.data(), kRows);
      v.enqueue_accept(s, accepted.as<int32_t>(), kRows);
      if (mode_policy(mode).commit) v.enqueue_commit(s, kRows);
    };
    round();  // warm-up: the runtime's first-use setup may allocate once
    KDA_TEST_CUDA(cudaStreamSynchronize(s.stream));
    {
      const AllocationCount count;
      round();
      EXPECT_EQ(count.allocations(), 0);
    }
    KDA_TEST_CUDA(cudaStreamSynchronize(s.stream));
    EXPECT_EQ(v.device_errors().count, 0u);
  }
}

}  // namespace
}  // namespace kdagraph::test
