// kdagraph: bucketed CUDA graphs of a whole round (docs/graphs.md).
//
// A GraphRunner captures, for every bucket of a BucketPlan, the round of a Verifier: the index build,
// then the L verifies (each after the engine's optional per-layer work; with a conv, the layer's short
// convolution fused into it, or before it without VerifierConfig::fuse_conv), and, when the engine hands
// it a capturable sampler, the sampler, the accept step and in two-phase mode the commit. Per round the
// host only sets the batch when it changes and launches one graph.
//
// The CPU backend has the same runner: its "graph" records the round's work with parameters frozen at
// capture and replays it against the same static buffers, so bucket choice, padding and the replay
// contract are tested on machines without a GPU.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kdagraph/types.hpp"
#include "kdagraph/verifier.hpp"

namespace kdagraph {

enum class Exec : int32_t { eager = 0, graph = 1 };
const char* to_string(Exec e);

// docs/graphs.md default buckets: 1-8, 10-32 step 2, 40-64 step 4, 72-256 step 8, then step 16; max_bs is
// always the last one.
std::vector<int32_t> default_buckets(int32_t max_bs);

class BucketPlan {
 public:
  // Buckets must be positive and strictly increasing.
  explicit BucketPlan(std::vector<int32_t> buckets);
  // Smallest bucket >= n, or 0 when n exceeds the largest (the round then runs eagerly). n >= 1.
  int32_t bucket_for(int32_t n) const;
  int32_t max_bs() const { return buckets_.back(); }
  const std::vector<int32_t>& buckets() const { return buckets_; }

 private:
  std::vector<int32_t> buckets_;
};

// Enqueues host work on a CPU-backend stream: run now, or recorded when a CPU graph is being captured.
// Engine callbacks that do CPU work inside a round must go through this so the CPU graph replays it.
void enqueue_host(const Stream& s, std::function<void()> fn);

// The engine's parts of a round. Callbacks enqueue on the given stream, allocate nothing, and always
// address the same buffers (a graph freezes their pointers). layer_inputs and conv_inputs are asked for
// every layer before any of the round's work is enqueued (all are checked first, so a bad one changes
// nothing): they name buffers and must not depend on before_layer having run.
struct RoundHooks {
  // Work before the round's index build, in the graph (e.g. a drafter writing the round's token tree
  // into the verifier's batch_buffers().parent, docs/trees.md). Optional.
  std::function<void(const Stream&, int32_t rows)> before_round;
  // Work before layer `layer`'s verify (a model's projections producing its inputs). Optional. With
  // VerifierConfig::pdl the layer's conv or verify may start before this work finishes: it must not
  // write the state rows they read (include/kdagraph/ops.hpp, programmatic dependent launch).
  std::function<void(const Stream&, int32_t layer, int32_t rows)> before_layer;
  // Layer `layer`'s inputs, sized for the verifier's max_rows. Required.
  std::function<LayerInputs(int32_t layer)> layer_inputs;
  // Layer `layer`'s conv inputs, whose outputs are the q, k and v layer_inputs names
  // (conv_into_verify_inputs). Required exactly when the verifier's layers have a conv. Fused
  // (VerifierConfig::fuse_conv) the kernel keeps q, k and v: they are neither written nor read.
  std::function<ConvLayerInputs(int32_t layer)> conv_inputs;
  // A capturable sampler: enqueues work writing accept lengths [rows] and returns that buffer. Optional.
  std::function<const int32_t*(const Stream&, int32_t rows)> sampler;
  // With VerifierConfig::trees (docs/trees.md), instead of `sampler`: a capturable sampler that enqueues work
  // writing accepted root-to-node paths [rows, T] (accept_index, ops::accept_path) and returns that
  // buffer. The round's tree is the verifier's (Verifier::set_tree, or batch_buffers().parent), device
  // data read inside the graph, so one graph per bucket serves every tree.
  std::function<const int32_t*(const Stream&, int32_t rows)> path_sampler;
};

struct RunnerConfig {
  std::vector<int32_t> buckets;   // empty: default_buckets(verifier max_rows)
  Exec exec = Exec::graph;
  bool strict = false;            // a batch above the largest bucket is an error, not an eager round
  bool sampler_in_graph = true;   // with a sampler: the graph holds sampler, accept (and commit)
};

struct BucketCaptureStats {
  int32_t bucket = 0;
  double capture_ms = 0;      // capture, instantiate and upload, host wall time
  // Free device memory the capture, instantiate and upload took (cudaMemGetInfo around them; 0 on the
  // CPU). It moves in the allocator's pages (2 MiB on an H200), so most buckets read 0 and a few a whole
  // page, and the first captures also pay for loading the kernels' modules: GraphMemoryStats is the
  // figure of one graph.
  int64_t device_bytes = 0;
  int32_t kernel_nodes = 0;   // kernel nodes of the captured round (CPU twin: operations of kernels/)
};

// What GraphRunner::measure_graph_memory found: `copies` executables of one bucket's round, instantiated
// and uploaded at once, took `device_bytes` of free device memory together (0 on the CPU). One page more
// or less moves the share of one graph by only page / copies. Free memory is the whole device's
// (cudaMemGetInfo): another process that allocates or frees meanwhile moves it too, even below 0, so
// measure on a device nothing else is using.
struct GraphMemoryStats {
  int32_t bucket = 0;
  int32_t copies = 0;
  int64_t device_bytes = 0;
  double bytes_per_graph() const { return copies > 0 ? double(device_bytes) / double(copies) : 0.0; }
};

namespace detail {
struct RunnerState;
}

// One bucket's graph. Launching it after its runner was destroyed is an error, not a crash.
class GraphHandle {
 public:
  void launch(const Stream& s) const;
  int32_t bucket() const { return bucket_; }

 private:
  friend class GraphRunner;
  GraphHandle(std::weak_ptr<detail::RunnerState> state, int32_t bucket)
      : state_(std::move(state)), bucket_(bucket) {}
  std::weak_ptr<detail::RunnerState> state_;
  int32_t bucket_;
};

class GraphRunner {
 public:
  // `verifier` must outlive the runner; its max_rows must cover the largest bucket.
  GraphRunner(Verifier& verifier, RoundHooks hooks, RunnerConfig config);
  ~GraphRunner();
  // Owns instantiated graphs that must be destroyed exactly once.
  GraphRunner(const GraphRunner&) = delete;
  GraphRunner& operator=(const GraphRunner&) = delete;

  // Captures every bucket, largest first, in thread-local capture mode; instantiates and uploads.
  // On CUDA `s` must be a created stream, not the legacy default stream. No-op for Exec::eager.
  void capture(const Stream& s);
  bool captured() const;

  // Host, when the batch changes: validates and writes n_real and the slots (Verifier::set_batch).
  void set_batch(const Stream& s, const int32_t* slots, int32_t n);
  // One round of the current batch: launches bucket_for(n)'s graph, or runs the round eagerly
  // (Exec::eager, or n above the largest bucket outside strict mode).
  void run_round(const Stream& s);
  // Accept step when the sampler runs outside the graph: `accepted` [rows] in backend memory; then, in
  // two-phase mode, the commit. Separate launches, as engines ship it today.
  void accept(const Stream& s, const int32_t* accepted);
  // The same with trees: `accept_index` [rows, T] in backend memory, the sampler's accepted paths.
  void accept_path(const Stream& s, const int32_t* accept_index);

  // Rows the current batch runs with: its bucket, or n when it runs eagerly.
  int32_t rows() const;
  bool sampler_in_round() const;
  const BucketPlan& plan() const;
  const std::vector<BucketCaptureStats>& capture_stats() const;
  GraphHandle graph(int32_t bucket) const;
  // Device memory of one instantiated graph of `bucket` (a bucket of the plan), below the allocator's
  // page: its round captured again on `s`, instantiated `copies` times (1 to 4096), every copy uploaded,
  // the free memory they took measured, then the copies destroyed. The runner's own graphs and the
  // state are untouched. Setup, not a round: synchronizes `s`.
  GraphMemoryStats measure_graph_memory(const Stream& s, int32_t bucket, int32_t copies);

 private:
  void enqueue_body(const Stream& s, int32_t rows, bool with_sampler);
  Verifier& verifier_;
  RoundHooks hooks_;
  RunnerConfig config_;
  BucketPlan plan_;
  std::shared_ptr<detail::RunnerState> state_;
  std::vector<BucketCaptureStats> stats_;
  // One round's hook inputs, every layer's checked before any is enqueued; sized once, so an eager
  // round allocates nothing.
  std::vector<LayerInputs> layer_inputs_;
  std::vector<ConvLayerInputs> conv_inputs_;
  int32_t n_ = 0;
  bool warned_eager_ = false;
};

}  // namespace kdagraph
