// docs/graphs.md: buckets, capture, instantiate, upload, replay.
#include "kdagraph/graph_runner.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "graph/capture.h"
#include "graph/cpu_capture.h"
#include "graph/dispatch.h"
#include "graph/nvtx.h"
#include "graph/validate.h"
#include "kernels/memory.h"
#include "kernels/stream.h"

namespace kdagraph {

const char* to_string(Exec e) { return e == Exec::eager ? "eager" : e == Exec::graph ? "graph" : "?"; }

std::vector<int32_t> default_buckets(int32_t max_bs) {
  require_in_range("default_buckets", "max_bs", max_bs, 1, int64_t(1) << 20);
  std::vector<int32_t> out;
  auto add_range = [&](int32_t lo, int32_t hi, int32_t step) {
    for (int32_t b = lo; b <= hi && b < max_bs; b += step) out.push_back(b);
  };
  add_range(1, 8, 1);
  add_range(10, 32, 2);
  add_range(40, 64, 4);
  add_range(72, 256, 8);
  add_range(272, max_bs, 16);
  out.push_back(max_bs);
  return out;
}

BucketPlan::BucketPlan(std::vector<int32_t> buckets) : buckets_(std::move(buckets)) {
  require(!buckets_.empty(), "BucketPlan", "buckets", "is empty");
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const std::string arg = "buckets[" + std::to_string(i) + "]";
    require_in_range("BucketPlan", arg.c_str(), buckets_[i], i == 0 ? 1 : int64_t(buckets_[i - 1]) + 1,
                     int64_t(1) << 20);
  }
}

int32_t BucketPlan::bucket_for(int32_t n) const {
  require_in_range("BucketPlan::bucket_for", "n", n, 1, INT32_MAX);
  const auto it = std::lower_bound(buckets_.begin(), buckets_.end(), n);
  return it == buckets_.end() ? 0 : *it;
}

void enqueue_host(const Stream& s, std::function<void()> fn) {
  require(s.backend == Backend::cpu, "enqueue_host", "stream.backend",
          "= cuda: enqueue_host is for the CPU backend; enqueue kernels on the CUDA stream instead");
  // Host code may read what the kernels before it wrote (graph/dispatch.h, [TAG_PDL]).
  detail::cpu_submit([fn = std::move(fn)] {
    detail::complete_cpu_kernels();
    fn();
  });
}

namespace detail {

// The graphs of one runner. GraphHandles point here weakly, so they notice when the runner is gone.
struct RunnerState {
  Backend backend;
  std::map<int32_t, Graph> graphs;
  explicit RunnerState(Backend b) : backend(b) {}

  bool has(int32_t bucket) const { return graphs.count(bucket) != 0; }

  void launch(const Stream& s, int32_t bucket) const {
    nvtx::Scoped range(nvtx::Range::replay, bucket);
    graphs.at(bucket).launch(s);
  }
};

}  // namespace detail

void GraphHandle::launch(const Stream& s) const {
  const auto state = state_.lock();
  if (!state)
    throw Error("GraphHandle::launch: the graph of bucket " + std::to_string(bucket_) +
                " was used after its GraphRunner was destroyed");
  detail::validate_stream("GraphHandle::launch", s, state->backend);
  state->launch(s, bucket_);
}

namespace {

std::vector<int32_t> plan_buckets(const RunnerConfig& c, const Verifier& v) {
  return c.buckets.empty() ? default_buckets(v.config().max_rows) : c.buckets;
}

}  // namespace

GraphRunner::GraphRunner(Verifier& verifier, RoundHooks hooks, RunnerConfig config)
    : verifier_(verifier),
      hooks_(std::move(hooks)),
      config_(std::move(config)),
      plan_(plan_buckets(config_, verifier)),
      state_(std::make_shared<detail::RunnerState>(verifier.config().backend)),
      layer_inputs_(size_t(verifier.config().model.layers)),
      conv_inputs_(size_t(verifier.config().model.layers)) {
  const char* where = "GraphRunner";
  require(bool(hooks_.layer_inputs), where, "hooks.layer_inputs", "is empty");
  const bool conv = verifier.config().conv.width > 0;
  require(bool(hooks_.conv_inputs) == conv, where, "hooks.conv_inputs",
          conv ? "is empty, but the verifier's layers have a conv" : "is set, but the verifier's layers have no conv");
  require(!hooks_.path_sampler || verifier.config().trees, where, "hooks.path_sampler",
          "is set, but the verifier was built without trees (VerifierConfig::trees)");
  require(!(hooks_.path_sampler && hooks_.sampler), where, "hooks.path_sampler",
          "is set with hooks.sampler: a round accepts either lengths or paths");
  require_in_range(where, "largest bucket", plan_.max_bs(), 1, verifier.config().max_rows);
}

GraphRunner::~GraphRunner() = default;

bool GraphRunner::sampler_in_round() const {
  return (hooks_.sampler || hooks_.path_sampler) && config_.sampler_in_graph;
}

void GraphRunner::enqueue_body(const Stream& s, int32_t rows, bool with_sampler) {
  // Every layer's inputs are checked before any work is enqueued: a round refused at layer l after
  // layers 0 to l - 1 ran would already have overwritten the rows their next seed reads (the scratch in
  // fused accept, the pool in replay), and the refusal must change nothing (docs/errors.md).
  const RoundSpec& spec = verifier_.spec();
  const bool fused = fuses_conv(verifier_.config());  // one kernel per layer: q, k and v stay in it
  for (int32_t l = 0; l < spec.model.layers; ++l) {
    char where[64];  // names the layer, with no allocation on a round's path
    std::snprintf(where, sizeof where, "GraphRunner: hooks.layer_inputs(%d)", int(l));
    detail::validate_layer_inputs(where, layer_inputs_[size_t(l)] = hooks_.layer_inputs(l), spec, !fused);
    verifier_.check_gates(l, layer_inputs_[size_t(l)]);
    if (!hooks_.conv_inputs) continue;
    std::snprintf(where, sizeof where, "GraphRunner: hooks.conv_inputs(%d)", int(l));
    detail::validate_conv_inputs(where, conv_inputs_[size_t(l)] = hooks_.conv_inputs(l), spec.conv.channels,
                                 spec.io_dtype, fused);
  }
  if (hooks_.before_round) hooks_.before_round(s, rows);
  verifier_.enqueue_indices(s, rows);
  for (int32_t l = 0; l < spec.model.layers; ++l) {
    if (hooks_.before_layer) hooks_.before_layer(s, l, rows);
    if (fused) {
      verifier_.enqueue_conv_verify(s, l, conv_inputs_[size_t(l)], layer_inputs_[size_t(l)], rows);
      continue;
    }
    if (hooks_.conv_inputs) verifier_.enqueue_conv(s, l, conv_inputs_[size_t(l)], rows);
    verifier_.enqueue_verify(s, l, layer_inputs_[size_t(l)], rows);
  }
  if (!with_sampler) return;
  if (hooks_.path_sampler) verifier_.enqueue_accept_path(s, hooks_.path_sampler(s, rows), rows);
  else verifier_.enqueue_accept(s, hooks_.sampler(s, rows), rows);
  if (mode_policy(verifier_.config().mode).commit) verifier_.enqueue_commit(s, rows);
}

void GraphRunner::capture(const Stream& s) {
  const char* where = "GraphRunner::capture";
  detail::validate_stream(where, s, verifier_.config().backend);
  if (config_.exec == Exec::eager) return;
  std::vector<int32_t> order = plan_.buckets();
  std::reverse(order.begin(), order.end());  // largest first: later captures reuse its memory
  for (int32_t bucket : order) {
    if (state_->has(bucket)) continue;
    nvtx::Scoped range(nvtx::Range::capture, bucket);
    BucketCaptureStats st;
    st.bucket = bucket;
    const auto t0 = std::chrono::steady_clock::now();
    // Measured before the capture begins: no query that is not stream work runs while it is open.
    const int64_t free_before = detail::free_device_bytes(s.backend);
    detail::CaptureGuard capture(s, where);
    enqueue_body(s, bucket, sampler_in_round());
    {
      nvtx::Scoped inst(nvtx::Range::instantiate, bucket);
      detail::Graph graph = capture.end();
      st.kernel_nodes = graph.kernel_nodes();
      graph.upload(s);
      state_->graphs[bucket] = std::move(graph);
    }
    detail::StreamHandle::view(s).synchronize();  // setup, not a round: settle the memory figure
    st.device_bytes = free_before - detail::free_device_bytes(s.backend);
    st.capture_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    stats_.push_back(st);
  }
}

bool GraphRunner::captured() const { return config_.exec == Exec::graph && state_->has(plan_.max_bs()); }

void GraphRunner::set_batch(const Stream& s, const int32_t* slots, int32_t n) {
  verifier_.set_batch(s, slots, n);
  n_ = n;
}

int32_t GraphRunner::rows() const {
  require(n_ > 0, "GraphRunner::rows", "batch", "is not set: call set_batch first");
  const int32_t bucket = plan_.bucket_for(n_);
  return config_.exec == Exec::graph && bucket > 0 ? bucket : n_;
}

void GraphRunner::run_round(const Stream& s) {
  const char* where = "GraphRunner::run_round";
  detail::validate_stream(where, s, verifier_.config().backend);
  require(n_ > 0, where, "batch", "is not set: call set_batch first");
  const int32_t bucket = plan_.bucket_for(n_);
  if (bucket == 0 && config_.strict)
    throw InvalidArgument("n", std::string(where) + ": n = " + std::to_string(n_) +
                                   " exceeds the largest bucket " + std::to_string(plan_.max_bs()) +
                                   " (strict mode)");
  if (config_.exec == Exec::graph && bucket > 0) {
    require(state_->has(bucket), where, "graphs", "are not captured: call capture first");
    state_->launch(s, bucket);  // a CPU graph's replay is one cpu_round (graph/capture.cpp)
    return;
  }
  if (config_.exec == Exec::graph && !warned_eager_) {
    std::fprintf(stderr, "kdagraph: a batch of %d rows exceeds the largest bucket %d; running it eagerly "
                         "(warned once)\n", n_, plan_.max_bs());
    warned_eager_ = true;
  }
  // Eagerly the round needs no padding: it runs the batch's n rows.
  nvtx::Scoped range(nvtx::Range::eager_round, n_);
  detail::cpu_round(s, [&] { enqueue_body(s, n_, sampler_in_round()); });
}

void GraphRunner::accept(const Stream& s, const int32_t* accepted) {
  require(!sampler_in_round(), "GraphRunner::accept", "sampler",
          "is captured in the round already; accept runs inside it");
  const int32_t r = rows();
  detail::cpu_round(s, [&] {
    verifier_.enqueue_accept(s, accepted, r);
    if (mode_policy(verifier_.config().mode).commit) verifier_.enqueue_commit(s, r);
  });
}

void GraphRunner::accept_path(const Stream& s, const int32_t* accept_index) {
  require(!sampler_in_round(), "GraphRunner::accept_path", "sampler",
          "is captured in the round already; accept runs inside it");
  const int32_t r = rows();
  detail::cpu_round(s, [&] {
    verifier_.enqueue_accept_path(s, accept_index, r);
    if (mode_policy(verifier_.config().mode).commit) verifier_.enqueue_commit(s, r);
  });
}

const BucketPlan& GraphRunner::plan() const { return plan_; }
const std::vector<BucketCaptureStats>& GraphRunner::capture_stats() const { return stats_; }

GraphMemoryStats GraphRunner::measure_graph_memory(const Stream& s, int32_t bucket, int32_t copies) {
  const char* where = "GraphRunner::measure_graph_memory";
  detail::validate_stream(where, s, verifier_.config().backend);
  require_in_range(where, "bucket", bucket, 1, plan_.max_bs());
  require(plan_.bucket_for(bucket) == bucket, where, "bucket",
          "= " + std::to_string(bucket) + " is not a bucket of the plan");
  require_in_range(where, "copies", copies, 1, 4096);
  GraphMemoryStats st;
  st.bucket = bucket;
  st.copies = copies;
  const detail::StreamHandle stream = detail::StreamHandle::view(s);
  stream.synchronize();  // nothing in flight may take or free memory while the copies are measured
  const int64_t free_before = detail::free_device_bytes(s.backend);
  std::vector<detail::Graph> graphs;
  {
    detail::CaptureGuard capture(s, where);
    enqueue_body(s, bucket, sampler_in_round());
    graphs = capture.end_copies(copies);
  }
  for (const detail::Graph& g : graphs) g.upload(s);
  stream.synchronize();
  st.device_bytes = free_before - detail::free_device_bytes(s.backend);
  return st;
}

GraphHandle GraphRunner::graph(int32_t bucket) const {
  require(state_->has(bucket), "GraphRunner::graph", "bucket",
          "= " + std::to_string(bucket) + " has no captured graph");
  return GraphHandle(state_, bucket);
}

}  // namespace kdagraph
