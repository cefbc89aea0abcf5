// SPEC §5 on the CPU backend: the bucket plan, bucket coverage (every n), replay == eager bitwise over
// many rounds crossing buckets, and the runner's errors.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "kdagraph/graph_runner.hpp"
#include "kdagraph/host_engine.hpp"
#include "tests/common/engines.h"
#include "tests/common/storage.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {
namespace {

const Stream kCpu{Backend::cpu, nullptr};

TEST(BucketPlan, DefaultBucketsFollowTheSpec) {
  std::vector<int32_t> want;
  for (int b = 1; b <= 8; ++b) want.push_back(b);
  for (int b = 10; b <= 32; b += 2) want.push_back(b);
  for (int b = 40; b <= 64; b += 4) want.push_back(b);
  for (int b = 72; b <= 256; b += 8) want.push_back(b);
  for (int b = 272; b < 300; b += 16) want.push_back(b);
  want.push_back(300);
  EXPECT_EQ(default_buckets(300), want);
  EXPECT_EQ(default_buckets(256).back(), 256);
  EXPECT_EQ(default_buckets(256).size(), 8u + 12u + 7u + 24u);
  EXPECT_EQ(default_buckets(21), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 18, 20, 21}));
  EXPECT_EQ(default_buckets(1), (std::vector<int32_t>{1}));
}

TEST(BucketPlan, BucketForIsTheSmallestBucketAtLeastN) {
  const BucketPlan plan(default_buckets(256));
  for (int32_t n = 1; n <= 256; ++n) {
    const int32_t b = plan.bucket_for(n);
    ASSERT_GE(b, n);
    for (int32_t other : plan.buckets()) ASSERT_FALSE(other >= n && other < b) << "n=" << n;
  }
  EXPECT_EQ(plan.bucket_for(257), 0) << "above the largest bucket: eager";
  EXPECT_THROW(plan.bucket_for(0), InvalidArgument);
  EXPECT_THROW(BucketPlan({4, 2}), InvalidArgument);
  EXPECT_THROW(BucketPlan({}), InvalidArgument);
}

// A runner over host buffers: fixed random inputs at max_rows, accept lengths from a host vector that
// a CPU-recorded sampler copies in (so graph and eager see the same).
struct Harness {
  Verifier verifier;
  std::vector<std::vector<float>> q, k, v, g, beta, o;
  std::vector<float> gate;
  std::vector<int32_t> accept_source, accepted;
  std::unique_ptr<GraphRunner> runner;
  int32_t bad_layer = -1;  // the layer whose inputs the hook hands with no output buffer

  Harness(const VerifierConfig& c, RunnerConfig rc, uint64_t seed) : verifier(c) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    const size_t N = size_t(c.max_rows), T = size_t(c.tokens), H = size_t(c.model.heads);
    const size_t HV = size_t(c.model.value_heads), K = size_t(c.model.head_k), V = size_t(c.model.head_v);
    auto rnd = [&](size_t n) {
      std::vector<float> x(n);
      for (auto& e : x) e = d(rng);
      return x;
    };
    for (int l = 0; l < c.model.layers; ++l) {
      q.push_back(rnd(N * T * H * K));
      k.push_back(rnd(N * T * H * K));
      v.push_back(rnd(N * T * HV * V));
      g.push_back(rnd(N * T * HV * K));
      beta.push_back(rnd(N * T * HV));
      o.push_back(std::vector<float>(N * T * HV * V, NAN));
    }
    gate = rnd(HV + HV * K);
    accept_source.assign(N, 1);
    accepted.assign(N, 0);
    randomize_storage(verifier, seed);
    RoundHooks hooks;
    hooks.layer_inputs = [this](int32_t l) {
      LayerInputs in;
      in.q = q[size_t(l)].data();
      in.k = k[size_t(l)].data();
      in.v = v[size_t(l)].data();
      in.g = g[size_t(l)].data();
      in.beta = beta[size_t(l)].data();
      in.o = l == bad_layer ? nullptr : o[size_t(l)].data();
      in.A_log = gate.data();
      in.dt_bias = gate.data() + verifier.config().model.value_heads;
      return in;
    };
    hooks.sampler = [this](const Stream& s, int32_t) {
      enqueue_host(s, [this] { accepted = accept_source; });
      return accepted.data();
    };
    runner = std::make_unique<GraphRunner>(verifier, std::move(hooks), std::move(rc));
  }
};

VerifierConfig coverage_config(Mode mode) {
  VerifierConfig c = small_verifier(Backend::cpu, mode, 2, 3);
  c.max_rows = 10;
  return c;
}

// Every n in 1..max_bs: the chosen bucket is the smallest >= n, the replay equals the eager round on
// the n rows bitwise, and every slot outside the batch is untouched.
TEST(GraphRunner, BucketCoverageEveryBatchSize) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (Mode mode : {Mode::two_phase, Mode::fused_accept}) {
    RunnerConfig graph_cfg;
    graph_cfg.buckets = {1, 2, 3, 4, 6, 8, 10};
    RunnerConfig eager_cfg = graph_cfg;
    eager_cfg.exec = Exec::eager;
    Harness graph(coverage_config(mode), graph_cfg, seed), eager(coverage_config(mode), eager_cfg, seed);
    graph.runner->capture(kCpu);
    ASSERT_TRUE(graph.runner->captured());
    ASSERT_EQ(graph.runner->capture_stats().front().bucket, 10) << "largest bucket is captured first";
    for (int32_t n = 1; n <= 10; ++n) {
      SCOPED_TRACE("n=" + std::to_string(n));
      std::vector<int32_t> all(12);
      for (int i = 0; i < 12; ++i) all[size_t(i)] = i;
      std::shuffle(all.begin(), all.end(), rng);
      const std::vector<int32_t> slots(all.begin(), all.begin() + n);
      for (auto& a : graph.accept_source) a = std::uniform_int_distribution<int32_t>(1, 3)(rng);
      eager.accept_source = graph.accept_source;
      const StorageSnapshot before = snapshot(graph.verifier);
      ASSERT_TRUE(before == snapshot(eager.verifier));
      for (Harness* h : {&graph, &eager}) {
        for (auto& o : h->o) std::fill(o.begin(), o.end(), NAN);
        h->runner->set_batch(kCpu, slots.data(), n);
        h->runner->run_round(kCpu);
      }
      const int32_t bucket = graph.runner->rows();
      EXPECT_EQ(bucket, graph.runner->plan().bucket_for(n));
      EXPECT_EQ(eager.runner->rows(), n);
      const size_t row_elems = graph.o[0].size() / 10;
      for (size_t l = 0; l < graph.o.size(); ++l) {
        EXPECT_EQ(0, std::memcmp(graph.o[l].data(), eager.o[l].data(), size_t(n) * row_elems * 4)) << "layer " << l;
        for (size_t e = size_t(n) * row_elems; e < size_t(bucket) * row_elems; ++e)
          ASSERT_EQ(graph.o[l][e], 0.0f) << "padded rows output zeros";
        for (size_t e = 0; e < size_t(n) * row_elems; ++e) ASSERT_FALSE(std::isnan(graph.o[l][e]));
      }
      const StorageSnapshot after = snapshot(graph.verifier);
      EXPECT_TRUE(after == snapshot(eager.verifier));
      for (int32_t s = 0; s < 12; ++s)
        if (std::find(slots.begin(), slots.end(), s) == slots.end())
          expect_slot_unchanged(graph.verifier.config(), before, after, s);
    }
  }
}

// >= 100 rounds with joins, retirements and batch sizes crossing buckets: graph == eager, bitwise, with
// the sampler inside the graph and outside it.
TEST(GraphRunner, ManyRoundsGraphEqualsEagerBitwise) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  for (Mode mode : {Mode::two_phase, Mode::fused_accept}) {
    HostEngineConfig eager_cfg = small_engine(Backend::cpu, mode, Exec::eager, seed);
    eager_cfg.batch = 8;
    HostEngineConfig graph_cfg = eager_cfg, outside_cfg = eager_cfg;
    graph_cfg.runner.exec = Exec::graph;
    outside_cfg.runner.exec = Exec::graph;
    outside_cfg.runner.sampler_in_graph = false;
    HostEngine eager(eager_cfg), graph(graph_cfg), outside(outside_cfg);
    std::set<int32_t> rows_seen;
    for (HostEngine* e : {&eager, &graph, &outside}) e->start(kCpu);
    for (int r = 0; r < 110; ++r) {
      for (HostEngine* e : {&eager, &graph, &outside}) e->run_round(kCpu);
      rows_seen.insert(graph.runner().rows());
    }
    for (HostEngine* e : {&eager, &graph, &outside}) e->finish(kCpu);
    EXPECT_GE(rows_seen.size(), 4u) << "the batch should cross buckets";
    for (HostEngine* e : {&graph, &outside}) {
      ASSERT_EQ(e->rounds().size(), eager.rounds().size());
      for (size_t r = 0; r < eager.rounds().size(); ++r) {
        ASSERT_EQ(e->rounds()[r].slots, eager.rounds()[r].slots);
        ASSERT_EQ(e->rounds()[r].outputs, eager.rounds()[r].outputs) << "round " << r;
      }
      ASSERT_EQ(e->retired().size(), eager.retired().size());
      for (size_t i = 0; i < eager.retired().size(); ++i)
        EXPECT_EQ(e->retired()[i].state, eager.retired()[i].state) << "request " << eager.retired()[i].request;
    }
  }
}

TEST(GraphRunner, AboveTheLargestBucketRunsEagerlyOrFailsInStrictMode) {
  const uint64_t seed = fresh_seed();
  RunnerConfig rc;
  rc.buckets = {1, 2, 4};
  Harness h(coverage_config(Mode::fused_accept), rc, seed);
  h.runner->capture(kCpu);
  const std::vector<int32_t> slots = {0, 1, 2, 3, 4, 5};
  h.runner->set_batch(kCpu, slots.data(), 6);
  testing::internal::CaptureStderr();
  h.runner->run_round(kCpu);
  h.runner->run_round(kCpu);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("exceeds the largest bucket 4"), std::string::npos) << err;
  EXPECT_EQ(err.find("exceeds", err.find("exceeds") + 1), std::string::npos) << "warned more than once";
  EXPECT_EQ(h.runner->rows(), 6);

  rc.strict = true;
  Harness strict(coverage_config(Mode::fused_accept), rc, seed);
  strict.runner->capture(kCpu);
  strict.runner->set_batch(kCpu, slots.data(), 6);
  const StorageSnapshot before = snapshot(strict.verifier);
  try {
    strict.runner->run_round(kCpu);
    ADD_FAILURE() << "strict mode ran a batch above the largest bucket";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "n");
    EXPECT_NE(std::string(e.what()).find("6"), std::string::npos);
  }
  EXPECT_TRUE(snapshot(strict.verifier) == before);
}

TEST(GraphRunner, ErrorsLeaveTheStateAlone) {
  RunnerConfig rc;
  rc.buckets = {2, 4};
  Harness h(coverage_config(Mode::fused_accept), rc, fresh_seed());
  EXPECT_THROW(h.runner->run_round(kCpu), InvalidArgument) << "no batch set";
  h.runner->capture(kCpu);
  const StorageSnapshot before = snapshot(h.verifier);
  const std::vector<int32_t> repeated = {1, 1};
  EXPECT_THROW(h.runner->set_batch(kCpu, repeated.data(), 2), InvalidArgument);
  EXPECT_THROW(h.runner->set_batch(kCpu, repeated.data(), 0), InvalidArgument);
  EXPECT_TRUE(snapshot(h.verifier) == before);
  EXPECT_THROW(h.runner->accept(kCpu, h.accepted.data()), InvalidArgument) << "the sampler is in the graph";
}

// A hook that hands bad inputs for the last layer is refused before the first layer runs: the layers
// before it would otherwise have overwritten the rows their next seed reads. The refused round changes
// nothing, so the same round rerun with good inputs equals a round that was never refused, bitwise.
TEST(GraphRunner, BadHookInputsAtTheLastLayerAreRefusedBeforeAnyLayerRuns) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  for (Mode mode : {Mode::two_phase, Mode::fused_accept, Mode::replay}) {
    SCOPED_TRACE(to_string(mode));
    RunnerConfig rc;
    rc.buckets = {2, 4};
    rc.exec = Exec::eager;
    Harness h(coverage_config(mode), rc, seed), ref(coverage_config(mode), rc, seed);
    const int32_t last = h.verifier.config().model.layers - 1;
    const std::vector<int32_t> slots = {3, 1, 4};
    for (Harness* x : {&h, &ref}) {
      x->runner->set_batch(kCpu, slots.data(), 3);
      x->runner->run_round(kCpu);  // accept lengths of 1: the next seeds are in scratch or the cache
      x->accept_source.assign(x->accept_source.size(), 2);
    }
    h.bad_layer = last;
    const StorageSnapshot before = snapshot(h.verifier);
    try {
      h.runner->run_round(kCpu);
      ADD_FAILURE() << "a round with no output buffer for layer " << last << " ran";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.argument(), "o");
      EXPECT_NE(std::string(e.what()).find("hooks.layer_inputs(" + std::to_string(last) + ")"), std::string::npos)
          << e.what();
    }
    EXPECT_TRUE(snapshot(h.verifier) == before) << "the refused round changed the storage";
    h.bad_layer = -1;
    for (Harness* x : {&h, &ref}) x->runner->run_round(kCpu);
    EXPECT_TRUE(snapshot(h.verifier) == snapshot(ref.verifier));
    for (int32_t l = 0; l <= last; ++l)
      EXPECT_EQ(0, std::memcmp(h.o[size_t(l)].data(), ref.o[size_t(l)].data(), h.o[size_t(l)].size() * sizeof(float)))
          << "layer " << l;
  }
}

// The same hook at capture: the capture is refused, no graph is kept, nothing changed.
TEST(GraphRunner, BadHookInputsRefuseTheCapture) {
  RunnerConfig rc;
  rc.buckets = {2, 4};
  Harness h(coverage_config(Mode::fused_accept), rc, fresh_seed());
  h.bad_layer = h.verifier.config().model.layers - 1;
  const StorageSnapshot before = snapshot(h.verifier);
  EXPECT_THROW(h.runner->capture(kCpu), InvalidArgument);
  EXPECT_FALSE(h.runner->captured());
  EXPECT_TRUE(snapshot(h.verifier) == before);
  h.bad_layer = -1;
  h.runner->capture(kCpu);
  EXPECT_TRUE(h.runner->captured());
}

// Measuring a bucket's graph memory captures and instantiates copies of its round and destroys them: the
// runner's graphs replay afterwards exactly as a runner's that never measured, and bad arguments are
// refused by name with nothing changed. On the CPU the copies take no device memory.
TEST(GraphRunner, MeasuringGraphMemoryLeavesTheRunnerAndStateAlone) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  RunnerConfig rc;
  rc.buckets = {2, 4, 8};
  Harness measured(coverage_config(Mode::fused_accept), rc, seed), plain(coverage_config(Mode::fused_accept), rc, seed);
  const std::vector<int32_t> slots = {5, 0, 7};
  for (Harness* h : {&measured, &plain}) {
    h->runner->capture(kCpu);
    h->runner->set_batch(kCpu, slots.data(), 3);
    h->runner->run_round(kCpu);  // a batch is live: a round run by the measurement would move its state
  }
  const StorageSnapshot before = snapshot(measured.verifier);
  const GraphMemoryStats st = measured.runner->measure_graph_memory(kCpu, 4, 3);
  EXPECT_EQ(st.bucket, 4);
  EXPECT_EQ(st.copies, 3);
  EXPECT_EQ(st.device_bytes, 0) << "the CPU backend has no device memory";
  EXPECT_EQ(st.bytes_per_graph(), 0.0);
  for (const auto& [bucket, copies, argument] : {std::tuple{3, 2, "bucket"}, std::tuple{0, 2, "bucket"},
                                                 std::tuple{9, 2, "bucket"}, std::tuple{8, 0, "copies"},
                                                 std::tuple{8, 4097, "copies"}}) {
    SCOPED_TRACE("bucket " + std::to_string(bucket) + ", copies " + std::to_string(copies));
    try {
      measured.runner->measure_graph_memory(kCpu, bucket, copies);
      ADD_FAILURE() << "measured with bad arguments";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.argument(), argument) << e.what();
    }
  }
  EXPECT_TRUE(snapshot(measured.verifier) == before) << "measuring changed the storage";
  EXPECT_EQ(measured.runner->capture_stats().size(), 3u) << "the measured copies are not the runner's graphs";
  for (Harness* h : {&measured, &plain}) {
    for (int r = 0; r < 4; ++r) {
      h->accept_source.assign(h->accept_source.size(), 1 + r % 3);
      h->runner->run_round(kCpu);
    }
  }
  EXPECT_TRUE(snapshot(measured.verifier) == snapshot(plain.verifier));
  for (size_t l = 0; l < measured.o.size(); ++l)
    EXPECT_EQ(0, std::memcmp(measured.o[l].data(), plain.o[l].data(), measured.o[l].size() * sizeof(float)))
        << "layer " << l;
}

TEST(GraphRunner, GraphUsedAfterItsRunnerIsDestroyedIsAnError) {
  RunnerConfig rc;
  rc.buckets = {2};
  auto h = std::make_unique<Harness>(coverage_config(Mode::fused_accept), rc, fresh_seed());
  h->runner->capture(kCpu);
  const GraphHandle handle = h->runner->graph(2);
  const std::vector<int32_t> slots = {3, 4};
  h->runner->set_batch(kCpu, slots.data(), 2);
  handle.launch(kCpu);  // fine while the runner lives
  h->runner.reset();
  try {
    handle.launch(kCpu);
    ADD_FAILURE() << "launched a graph of a destroyed runner";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("destroyed"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kdagraph::test
