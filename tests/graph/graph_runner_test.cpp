// docs/graphs.md on the program's runner (tests/common/runner.h [TAG_RUNNERS]): the bucket plan, bucket
// coverage (every n: the replay equals the eager round bitwise, static buffers never move, slots outside
// the batch untouched), many rounds crossing buckets graph against eager with the sampler in the graph and
// outside it, and the runner's errors, each leaving the state alone. (The GPU's own: the host launches
// rounds without waiting for the device, tests/graph/graph_runner_cuda_test.cu.)
//
// Sized by runner (Matrix): the default plan up to 64 rows and 110 rounds of batches up to 16 on the CPU
// and the GPU; buckets 1 to 4 and 20 rounds of up to 4 rows on the executor; not with OS-thread lanes
// (the kernel cases run the kernels there).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "graph/dispatch.h"
#include "harness/host_engine.h"
#include "kdagraph/graph_runner.hpp"
#include "tests/common/engines.h"
#include "tests/common/graph_harness.h"
#include "tests/common/runner.h"
#include "tests/common/storage.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {
namespace {

const Stream& stream() { return runner().stream; }
void wait() { detail::wait_for_device(runner().memory()); }

TEST(BucketPlan, DefaultBucketsFollowTheSpec) {
  if (runner().kind != RunnerKind::cpu) GTEST_SKIP() << "host arithmetic: the CPU runner checks it";
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
  if (runner().kind != RunnerKind::cpu) GTEST_SKIP() << "host arithmetic: the CPU runner checks it";
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

// A verifier with max_rows rows (K = 32 on the CPU, 64 on the kernels), bf16 io.
VerifierConfig harness_config(Mode mode, int32_t max_rows) {
  return graph_harness_config(runner().memory(), mode, max_rows, case_head_dim(32));
}

// Every n in 1..max_bs: the chosen bucket is the smallest >= n, the replay equals the eager round on
// the n rows bitwise and outputs zeros in its padded rows, every slot outside the batch is untouched, and
// the buffers the graphs point at never move.
TEST(GraphRunner, BucketCoverageEveryBatchSize) {
  KDA_SKIP_UNLESS_ROUNDS_RUN();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int32_t max_bs = by_matrix(64, 4, 0);
  for (Mode mode : {Mode::two_phase, Mode::fused_accept}) {
    SCOPED_TRACE(to_string(mode));
    RunnerConfig graph_cfg;
    graph_cfg.buckets = default_buckets(max_bs);
    RunnerConfig eager_cfg = graph_cfg;
    eager_cfg.exec = Exec::eager;
    GraphHarness graph(harness_config(mode, max_bs), graph_cfg, seed);
    GraphHarness eager(harness_config(mode, max_bs), eager_cfg, seed);
    const void* addresses[] = {graph.verifier.pool(), graph.verifier.scratch(), graph.verifier.accept_len(),
                               graph.verifier.batch_buffers().slots, graph.o[0].data()};
    graph.runner->capture(stream());
    ASSERT_TRUE(graph.runner->captured());
    ASSERT_EQ(graph.runner->capture_stats().size(), graph_cfg.buckets.size());
    ASSERT_EQ(graph.runner->capture_stats().front().bucket, max_bs) << "largest bucket is captured first";
    const int32_t P = graph.verifier.config().pool.slots;
    for (int32_t n = 1; n <= max_bs; ++n) {
      SCOPED_TRACE("n=" + std::to_string(n));
      std::vector<int32_t> all(static_cast<size_t>(P));
      for (int32_t i = 0; i < P; ++i) all[size_t(i)] = i;
      std::shuffle(all.begin(), all.end(), rng);
      const std::vector<int32_t> slots(all.begin(), all.begin() + n);
      std::vector<int32_t> accept(static_cast<size_t>(max_bs));
      for (auto& a : accept) a = std::uniform_int_distribution<int32_t>(1, 3)(rng);
      graph.set_accepts(accept);
      eager.set_accepts(accept);
      const StorageSnapshot before = snapshot(graph.verifier);
      ASSERT_TRUE(before == snapshot(eager.verifier));
      for (GraphHarness* h : {&graph, &eager}) {
        h->poison_outputs();
        h->runner->set_batch(stream(), slots.data(), n);
        h->runner->run_round(stream());
      }
      wait();
      const int32_t bucket = graph.runner->rows();
      EXPECT_EQ(bucket, graph.runner->plan().bucket_for(n));
      EXPECT_EQ(eager.runner->rows(), n);
      for (size_t l = 0; l < graph.o.size(); ++l) {
        const auto a = graph.o[l].download<uint16_t>(), b = eager.o[l].download<uint16_t>();
        const size_t row = a.size() / size_t(max_bs);
        ASSERT_TRUE(std::equal(a.begin(), a.begin() + long(size_t(n) * row), b.begin())) << "layer " << l;
        for (size_t e = size_t(n) * row; e < size_t(bucket) * row; ++e) ASSERT_EQ(a[e], 0u) << "padded rows output zeros";
        for (size_t e = 0; e < size_t(n) * row; ++e) ASSERT_NE(a[e], 0xffffu) << "output not written";
      }
      const StorageSnapshot after = snapshot(graph.verifier);
      EXPECT_TRUE(after == snapshot(eager.verifier));
      for (int32_t s = 0; s < P; ++s)
        if (std::find(slots.begin(), slots.end(), s) == slots.end())
          expect_slot_unchanged(graph.verifier.config(), before, after, s);
    }
    const void* after_addresses[] = {graph.verifier.pool(), graph.verifier.scratch(), graph.verifier.accept_len(),
                                     graph.verifier.batch_buffers().slots, graph.o[0].data()};
    for (int i = 0; i < 5; ++i) EXPECT_EQ(addresses[i], after_addresses[i]) << "a buffer the graphs point at moved";
  }
}

// Rounds with joins, retirements and batch sizes crossing buckets: graph == eager, bitwise, with the
// sampler inside the graph and outside it.
TEST(GraphRunner, ManyRoundsGraphEqualsEagerBitwise) {
  KDA_SKIP_UNLESS_ROUNDS_RUN();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  const int32_t batch = by_matrix(16, 4, 0);
  for (Mode mode : {Mode::two_phase, Mode::fused_accept}) {
    SCOPED_TRACE(to_string(mode));
    HostEngineConfig eager_cfg = small_engine(runner().memory(), mode, Exec::eager, seed);
    eager_cfg.verifier = harness_config(mode, batch);
    eager_cfg.runner.buckets = default_buckets(batch);
    eager_cfg.batch = batch;
    eager_cfg.retire_rate = 0.05;
    HostEngineConfig graph_cfg = eager_cfg, outside_cfg = eager_cfg;
    graph_cfg.runner.exec = Exec::graph;
    outside_cfg.runner.exec = Exec::graph;
    outside_cfg.runner.sampler_in_graph = false;
    HostEngine eager(eager_cfg), graph(graph_cfg), outside(outside_cfg);
    std::set<int32_t> rows_seen;
    for (HostEngine* e : {&eager, &graph, &outside}) e->start(stream());
    for (int r = 0; r < by_matrix(110, 20, 0); ++r) {
      for (HostEngine* e : {&eager, &graph, &outside}) e->run_round(stream());
      rows_seen.insert(graph.runner().rows());
    }
    for (HostEngine* e : {&eager, &graph, &outside}) e->finish(stream());
    EXPECT_GE(rows_seen.size(), size_t(by_matrix(5, 2, 0))) << "the batch should cross buckets";
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
    EXPECT_EQ(graph.verifier().device_errors().count, 0u);
  }
}

// docs/low_precision.md: stochastic rounding into a bf16 state (the harness's io dtype), in every mode, with joins
// (a prefill gives the slot a new seed) and retirements: a graph's replays draw what the eager rounds
// draw, bitwise (the store counters advance on the device).
TEST(GraphRunner, StochasticRoundingGraphEqualsEagerBitwise) {
  KDA_SKIP_UNLESS_ROUNDS_RUN();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  const int32_t batch = by_matrix(8, 3, 0);
  for (Mode mode : {Mode::two_phase, Mode::fused_accept, Mode::replay}) {
    const DType state = DType::bf16;  // the harness's io: stochastic rounding on CUDA goes with it
    SCOPED_TRACE(std::string(to_string(mode)) + " state " + to_string(state));
    HostEngineConfig eager_cfg = small_engine(runner().memory(), mode, Exec::eager, seed);
    eager_cfg.verifier = harness_config(mode, batch);
    eager_cfg.verifier.pool.state_dtype = state;
    eager_cfg.verifier.pool.rounding = Rounding::stochastic;
    eager_cfg.runner.buckets = default_buckets(batch);
    eager_cfg.batch = batch;
    eager_cfg.retire_rate = 0.1;
    HostEngineConfig graph_cfg = eager_cfg;
    graph_cfg.runner.exec = Exec::graph;
    HostEngine eager(eager_cfg), graph(graph_cfg);
    for (HostEngine* e : {&eager, &graph}) e->start(stream());
    for (int r = 0; r < by_matrix(40, 4, 0); ++r)
      for (HostEngine* e : {&eager, &graph}) e->run_round(stream());
    for (HostEngine* e : {&eager, &graph}) e->finish(stream());
    ASSERT_EQ(graph.rounds().size(), eager.rounds().size());
    for (size_t r = 0; r < eager.rounds().size(); ++r)
      ASSERT_EQ(graph.rounds()[r].outputs, eager.rounds()[r].outputs) << "round " << r;
    ASSERT_EQ(graph.retired().size(), eager.retired().size());
    EXPECT_GT(eager.retired().size(), 0u) << "slots were reused";
    for (size_t i = 0; i < eager.retired().size(); ++i)
      EXPECT_EQ(graph.retired()[i].state, eager.retired()[i].state) << "request " << eager.retired()[i].request;
    EXPECT_EQ(graph.verifier().device_errors().count, 0u);
  }
}

// docs/low_precision.md: a prefill gives a reused slot a new seed: the same request in the same slot again rounds
// its stores otherwise, where round to nearest repeats them bitwise.
TEST(GraphRunner, AReusedSlotDrawsAfresh) {
  KDA_SKIP_UNLESS_ROUNDS_RUN();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  RunnerConfig rc;
  rc.exec = Exec::eager;
  rc.buckets = {2};
  for (Rounding rounding : {Rounding::stochastic, Rounding::nearest}) {
    SCOPED_TRACE(to_string(rounding));
    VerifierConfig c = harness_config(Mode::fused_accept, 2);
    c.pool.state_dtype = DType::bf16;
    c.pool.rounding = rounding;
    GraphHarness h(c, rc, seed);
    const std::vector<uint8_t> request = [&] {
      const StorageSnapshot s = snapshot(h.verifier);
      return std::vector<uint8_t>(s.pool.begin(), s.pool.begin() + ptrdiff_t(h.verifier.slot_state_bytes()));
    }();  // one layer's state; every layer gets it
    std::vector<uint8_t> states(request.size() * size_t(c.model.layers));
    for (int32_t l = 0; l < c.model.layers; ++l) std::copy(request.begin(), request.end(), states.begin() + ptrdiff_t(l) * ptrdiff_t(request.size()));
    const int32_t slots[] = {1, 3};
    std::vector<std::vector<uint8_t>> posts;
    for (int occupant = 0; occupant < 2; ++occupant) {
      for (int32_t slot : slots) h.verifier.prefill(stream(), slot, states.data());
      h.set_accepts({1, 1});
      h.runner->set_batch(stream(), slots, 2);
      h.runner->run_round(stream());
      wait();
      posts.push_back(snapshot(h.verifier).scratch);
    }
    if (rounding == Rounding::stochastic) EXPECT_NE(posts[0], posts[1]) << "the second occupant drew the first's bits";
    else EXPECT_EQ(posts[0], posts[1]) << "round to nearest repeats";
  }
}

TEST(GraphRunner, AboveTheLargestBucketRunsEagerlyOrFailsInStrictMode) {
  KDA_SKIP_UNLESS_ROUNDS_RUN();
  const uint64_t seed = fresh_seed();
  RunnerConfig rc;
  rc.buckets = {1, 2, 4};
  GraphHarness h(harness_config(Mode::fused_accept, 6), rc, seed);
  h.runner->capture(stream());
  const std::vector<int32_t> slots = {0, 1, 2, 3, 4, 5};
  h.runner->set_batch(stream(), slots.data(), 6);
  testing::internal::CaptureStderr();
  h.runner->run_round(stream());
  h.runner->run_round(stream());
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("exceeds the largest bucket 4"), std::string::npos) << err;
  EXPECT_EQ(err.find("exceeds", err.find("exceeds") + 1), std::string::npos) << "warned more than once";
  EXPECT_EQ(h.runner->rows(), 6);

  rc.strict = true;
  GraphHarness strict(harness_config(Mode::fused_accept, 6), rc, seed);
  strict.runner->capture(stream());
  strict.runner->set_batch(stream(), slots.data(), 6);
  wait();
  const StorageSnapshot before = snapshot(strict.verifier);
  try {
    strict.runner->run_round(stream());
    ADD_FAILURE() << "strict mode ran a batch above the largest bucket";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "n");
    EXPECT_NE(std::string(e.what()).find("6"), std::string::npos);
  }
  wait();
  EXPECT_TRUE(snapshot(strict.verifier) == before);
}

TEST(GraphRunner, ErrorsAreClearAndLeaveTheStateAlone) {
  KDA_SKIP_UNLESS_ROUNDS_RUN();
  RunnerConfig rc;
  rc.buckets = {2, 4};
  GraphHarness h(harness_config(Mode::fused_accept, 8), rc, fresh_seed());
  EXPECT_THROW(h.runner->run_round(stream()), InvalidArgument) << "no batch set";
  const StorageSnapshot before = snapshot(h.verifier);
  if (runner().memory() == Backend::cuda) {
    try {
      h.runner->capture(Stream{Backend::cuda, nullptr});
      ADD_FAILURE() << "captured on the legacy default stream";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.argument(), "stream");
    }
  }
  h.runner->capture(stream());
  const std::vector<int32_t> repeated = {1, 1};
  EXPECT_THROW(h.runner->set_batch(stream(), repeated.data(), 2), InvalidArgument);
  EXPECT_THROW(h.runner->set_batch(stream(), repeated.data(), 0), InvalidArgument);
  wait();
  EXPECT_TRUE(snapshot(h.verifier) == before);
  EXPECT_THROW(h.runner->accept(stream(), h.accepted.as<int32_t>()), InvalidArgument) << "the sampler is in the graph";
}

// A hook that hands bad inputs for the last layer is refused before the first layer runs: the layers
// before it would otherwise have overwritten the rows their next seed reads. The refused round changes
// nothing, so the same round rerun with good inputs equals a round that was never refused, bitwise.
TEST(GraphRunner, BadHookInputsAtTheLastLayerAreRefusedBeforeAnyLayerRuns) {
  KDA_SKIP_UNLESS_ROUNDS_RUN();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  for (Mode mode : {Mode::two_phase, Mode::fused_accept, Mode::replay}) {
    SCOPED_TRACE(to_string(mode));
    RunnerConfig rc;
    rc.buckets = {2, 4};
    rc.exec = Exec::eager;
    GraphHarness h(harness_config(mode, 8), rc, seed), ref(harness_config(mode, 8), rc, seed);
    const int32_t last = h.verifier.config().model.layers - 1;
    const std::vector<int32_t> slots = {3, 1, 4};
    for (GraphHarness* x : {&h, &ref}) {
      x->runner->set_batch(stream(), slots.data(), 3);
      x->runner->run_round(stream());  // accept lengths of 1: the next seeds are in scratch or the cache
      x->set_accepts(std::vector<int32_t>(8, 2));
    }
    wait();
    h.bad_layer = last;
    const StorageSnapshot before = snapshot(h.verifier);
    try {
      h.runner->run_round(stream());
      ADD_FAILURE() << "a round with no output buffer for layer " << last << " ran";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.argument(), "o");
      EXPECT_NE(std::string(e.what()).find("hooks.layer_inputs(" + std::to_string(last) + ")"), std::string::npos)
          << e.what();
    }
    wait();
    EXPECT_TRUE(snapshot(h.verifier) == before) << "the refused round changed the storage";
    h.bad_layer = -1;
    for (GraphHarness* x : {&h, &ref}) x->runner->run_round(stream());
    wait();
    EXPECT_TRUE(snapshot(h.verifier) == snapshot(ref.verifier));
    for (int32_t l = 0; l <= last; ++l)
      EXPECT_EQ(h.o[size_t(l)].download<uint16_t>(), ref.o[size_t(l)].download<uint16_t>()) << "layer " << l;
  }
}

// The same hook at capture: the capture is refused, no graph is kept, nothing changed.
TEST(GraphRunner, BadHookInputsRefuseTheCapture) {
  KDA_SKIP_UNLESS_ROUNDS_RUN();
  RunnerConfig rc;
  rc.buckets = {2, 4};
  GraphHarness h(harness_config(Mode::fused_accept, 8), rc, fresh_seed());
  h.bad_layer = h.verifier.config().model.layers - 1;
  const StorageSnapshot before = snapshot(h.verifier);
  EXPECT_THROW(h.runner->capture(stream()), InvalidArgument);
  EXPECT_FALSE(h.runner->captured());
  wait();
  EXPECT_TRUE(snapshot(h.verifier) == before);
  h.bad_layer = -1;
  h.runner->capture(stream());
  EXPECT_TRUE(h.runner->captured());
}

// Measuring a bucket's graph memory captures and instantiates copies of its round and destroys them: the
// runner's graphs replay afterwards exactly as a runner's that never measured, and bad arguments are
// refused by name with nothing changed. On the CPU the copies take no device memory; on a GPU the figure
// is the whole device's free memory, which the programs ctest -j runs beside this one move both ways, so
// it is not checked here (the GPU check's `capture` stage measures it alone).
TEST(GraphRunner, MeasuringGraphMemoryLeavesTheRunnerAndStateAlone) {
  KDA_SKIP_UNLESS_ROUNDS_RUN();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  RunnerConfig rc;
  rc.buckets = {2, 4, 8};
  GraphHarness measured(harness_config(Mode::fused_accept, 8), rc, seed);
  GraphHarness plain(harness_config(Mode::fused_accept, 8), rc, seed);
  const std::vector<int32_t> slots = {5, 0, 7};
  for (GraphHarness* h : {&measured, &plain}) {
    h->runner->capture(stream());
    h->runner->set_batch(stream(), slots.data(), 3);
    h->runner->run_round(stream());  // a batch is live: a round run by the measurement would move its state
  }
  wait();
  const StorageSnapshot before = snapshot(measured.verifier);
  const GraphMemoryStats st = measured.runner->measure_graph_memory(stream(), 4, 3);
  EXPECT_EQ(st.bucket, 4);
  EXPECT_EQ(st.copies, 3);
  if (runner().memory() == Backend::cpu) {
    EXPECT_EQ(st.device_bytes, 0) << "the CPU backend has no device memory";
    EXPECT_EQ(st.bytes_per_graph(), 0.0);
  }
  for (const auto& [bucket, copies, argument] : {std::tuple{3, 2, "bucket"}, std::tuple{0, 2, "bucket"},
                                                 std::tuple{9, 2, "bucket"}, std::tuple{8, 0, "copies"},
                                                 std::tuple{8, 4097, "copies"}}) {
    SCOPED_TRACE("bucket " + std::to_string(bucket) + ", copies " + std::to_string(copies));
    try {
      measured.runner->measure_graph_memory(stream(), bucket, copies);
      ADD_FAILURE() << "measured with bad arguments";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.argument(), argument) << e.what();
    }
  }
  wait();
  EXPECT_TRUE(snapshot(measured.verifier) == before) << "measuring changed the storage";
  EXPECT_EQ(measured.runner->capture_stats().size(), 3u) << "the measured copies are not the runner's graphs";
  for (int r = 0; r < 4; ++r)
    for (GraphHarness* h : {&measured, &plain}) {
      h->set_accepts(std::vector<int32_t>(8, 1 + r % 3));
      h->runner->run_round(stream());
    }
  wait();
  EXPECT_TRUE(snapshot(measured.verifier) == snapshot(plain.verifier));
  for (size_t l = 0; l < measured.o.size(); ++l)
    EXPECT_EQ(measured.o[l].download<uint16_t>(), plain.o[l].download<uint16_t>()) << "layer " << l;
}

TEST(GraphRunner, GraphUsedAfterItsRunnerIsDestroyedIsAnError) {
  KDA_SKIP_UNLESS_ROUNDS_RUN();
  RunnerConfig rc;
  rc.buckets = {2};
  auto h = std::make_unique<GraphHarness>(harness_config(Mode::fused_accept, 8), rc, fresh_seed());
  h->runner->capture(stream());
  const GraphHandle handle = h->runner->graph(2);
  const std::vector<int32_t> slots = {3, 4};
  h->runner->set_batch(stream(), slots.data(), 2);
  handle.launch(stream());  // fine while the runner lives
  wait();
  h->runner.reset();
  try {
    handle.launch(stream());
    ADD_FAILURE() << "launched a graph of a destroyed runner";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("destroyed"), std::string::npos) << e.what();
  }
}

// docs/errors.md: another kernel wrote a corrupt accept length; the replayed round clamps it, and the host sees
// the record in the error word (host-mapped on a GPU, read without synchronizing the stream).
TEST(GraphRunner, CorruptAcceptLengthIsClampedAndRecorded) {
  KDA_SKIP_UNLESS_ROUNDS_RUN();
  GraphHarness h(harness_config(Mode::fused_accept, 8), RunnerConfig{}, fresh_seed());
  h.runner->capture(stream());
  const std::vector<int32_t> slots = {2, 7};
  h.runner->set_batch(stream(), slots.data(), 2);
  const int32_t corrupt = 99;
  detail::enqueue_copy(stream(), h.verifier.accept_len() + 7, &corrupt, sizeof(corrupt));
  h.runner->run_round(stream());
  wait();
  const DeviceErrorWord e = h.verifier.device_errors();
  EXPECT_EQ(e.code, uint32_t(DeviceErrorCode::accept_out_of_range));
  EXPECT_EQ(e.row, 1);
  EXPECT_EQ(e.value, 99);
  EXPECT_GE(e.count, 1u);
}

}  // namespace
}  // namespace kdagraph::test
