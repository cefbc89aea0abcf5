// SPEC §5: buckets, capture, instantiate, upload, replay.
#include "kdagraph/graph_runner.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>

#include "graph/cpu_capture.h"
#include "graph/validate.h"
#include "kernels/cuda_check.h"
#include "profiling/nvtx.h"

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
  detail::cpu_submit(std::move(fn));
}

namespace detail {

// The graphs of one runner. GraphHandles point here weakly, so they notice when the runner is gone.
struct RunnerState {
  Backend backend;
  std::map<int32_t, std::vector<CpuNode>> cpu_graphs;
#if defined(KDAGRAPH_WITH_CUDA)
  std::map<int32_t, cudaGraphExec_t> cuda_graphs;
#endif
  explicit RunnerState(Backend b) : backend(b) {}
  ~RunnerState() {
#if defined(KDAGRAPH_WITH_CUDA)
    for (auto& [bucket, exec] : cuda_graphs) KDA_CUDA_CHECK_NOTHROW(cudaGraphExecDestroy(exec));
#endif
  }
  // Owns graph executables that must be destroyed exactly once.
  RunnerState(const RunnerState&) = delete;
  RunnerState& operator=(const RunnerState&) = delete;

  bool has(int32_t bucket) const {
#if defined(KDAGRAPH_WITH_CUDA)
    if (backend == Backend::cuda) return cuda_graphs.count(bucket) != 0;
#endif
    return cpu_graphs.count(bucket) != 0;
  }

  void launch(const Stream& s, int32_t bucket) const {
    nvtx::Scoped range(nvtx::Range::replay, bucket);
    if (backend == Backend::cpu) {
      for (const CpuNode& node : cpu_graphs.at(bucket)) node();
      return;
    }
#if defined(KDAGRAPH_WITH_CUDA)
    KDA_CUDA_CHECK(cudaGraphLaunch(cuda_graphs.at(bucket), s.stream));
#else
    (void)s;
#endif
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
      state_(std::make_shared<detail::RunnerState>(verifier.config().backend)) {
  const char* where = "GraphRunner";
  require(bool(hooks_.layer_inputs), where, "hooks.layer_inputs", "is empty");
  require_in_range(where, "largest bucket", plan_.max_bs(), 1, verifier.config().max_rows);
}

GraphRunner::~GraphRunner() = default;

bool GraphRunner::sampler_in_round() const { return bool(hooks_.sampler) && config_.sampler_in_graph; }

void GraphRunner::enqueue_body(const Stream& s, int32_t rows, bool with_sampler) {
  verifier_.enqueue_indices(s, rows);
  for (int32_t l = 0; l < verifier_.config().model.layers; ++l) {
    if (hooks_.before_layer) hooks_.before_layer(s, l, rows);
    verifier_.enqueue_verify(s, l, hooks_.layer_inputs(l), rows);
  }
  if (!with_sampler) return;
  verifier_.enqueue_accept(s, hooks_.sampler(s, rows), rows);
  if (verifier_.config().mode == Mode::two_phase) verifier_.enqueue_commit(s, rows);
}

void GraphRunner::capture(const Stream& s) {
  const char* where = "GraphRunner::capture";
  detail::validate_stream(where, s, verifier_.config().backend);
  if (config_.exec == Exec::eager) return;
#if defined(KDAGRAPH_WITH_CUDA)
  if (s.backend == Backend::cuda)
    require(s.stream != nullptr && s.stream != cudaStreamLegacy, where, "stream",
            "is the legacy default stream; capture needs a stream created with cudaStreamCreate");
#endif
  std::vector<int32_t> order = plan_.buckets();
  std::reverse(order.begin(), order.end());  // largest first: later captures reuse its memory
  for (int32_t bucket : order) {
    if (state_->has(bucket)) continue;
    nvtx::Scoped range(nvtx::Range::capture, bucket);
    BucketCaptureStats st;
    st.bucket = bucket;
    const auto t0 = std::chrono::steady_clock::now();
    if (s.backend == Backend::cpu) {
      detail::cpu_capture_begin();
      try {
        enqueue_body(s, bucket, sampler_in_round());
      } catch (...) {
        detail::cpu_capture_end();
        throw;
      }
      state_->cpu_graphs[bucket] = detail::cpu_capture_end();
    } else {
#if defined(KDAGRAPH_WITH_CUDA)
      KDA_CUDA_CHECK(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeThreadLocal));
      cudaGraph_t graph = nullptr;
      try {
        enqueue_body(s, bucket, sampler_in_round());
      } catch (...) {
        cudaStreamEndCapture(s.stream, &graph);
        if (graph) cudaGraphDestroy(graph);
        // An invalidated capture leaves its error as the thread's last error, which the next
        // launcher's cudaGetLastError would report as its own: the exception reports it instead.
        (void)cudaGetLastError();
        throw;
      }
      KDA_CUDA_CHECK(cudaStreamEndCapture(s.stream, &graph));
      size_t free_before = 0, free_after = 0, total = 0;
      KDA_CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
      cudaGraphExec_t exec = nullptr;
      nvtx::Scoped inst(nvtx::Range::instantiate, bucket);
      const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
      KDA_CUDA_CHECK_NOTHROW(cudaGraphDestroy(graph));
      KDA_CUDA_CHECK(err);
      state_->cuda_graphs[bucket] = exec;
      KDA_CUDA_CHECK(cudaGraphUpload(exec, s.stream));
      KDA_CUDA_CHECK(cudaStreamSynchronize(s.stream));  // setup, not a round: settle memory numbers
      KDA_CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
      st.device_bytes = int64_t(free_before) - int64_t(free_after);
#endif
    }
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
    state_->launch(s, bucket);
    return;
  }
  if (config_.exec == Exec::graph && !warned_eager_) {
    std::fprintf(stderr, "kdagraph: a batch of %d rows exceeds the largest bucket %d; running it eagerly "
                         "(warned once)\n", n_, plan_.max_bs());
    warned_eager_ = true;
  }
  // Eagerly the round needs no padding: it runs the batch's n rows.
  nvtx::Scoped range(nvtx::Range::eager_round, n_);
  enqueue_body(s, n_, sampler_in_round());
}

void GraphRunner::accept(const Stream& s, const int32_t* accepted) {
  require(!sampler_in_round(), "GraphRunner::accept", "sampler",
          "is captured in the round already; accept runs inside it");
  const int32_t r = rows();
  verifier_.enqueue_accept(s, accepted, r);
  if (verifier_.config().mode == Mode::two_phase) verifier_.enqueue_commit(s, r);
}

const BucketPlan& GraphRunner::plan() const { return plan_; }
const std::vector<BucketCaptureStats>& GraphRunner::capture_stats() const { return stats_; }

GraphHandle GraphRunner::graph(int32_t bucket) const {
  require(state_->has(bucket), "GraphRunner::graph", "bucket",
          "= " + std::to_string(bucket) + " has no captured graph");
  return GraphHandle(state_, bucket);
}

}  // namespace kdagraph
