// kdagraph: a host engine that decodes rounds the way an inference engine would (docs/cli.md). It stands
// in for the model: each layer's inputs and the sampler's accept lengths are counter-based hashes of
// (seed, round, slot, layer, token, element), generated on the backend inside the round; with a conv
// (VerifierConfig::conv) the hashed inputs are the pre-conv projections and the conv makes q, k and v.
// Requests join (prefill, with a hashed conv window) and retire (materialize, state read back) between
// rounds.
//
// It is the multi-round driver the tests and the command line share: two engines with the same seed
// see the same requests, batches and inputs, whatever their mode, backend or execution.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kdagraph/graph_runner.hpp"
#include "kdagraph/verifier.hpp"

namespace kdagraph {

struct HostEngineConfig {
  VerifierConfig verifier;      // max_rows: the largest batch; pool.slots: at least max_rows
  RunnerConfig runner;          // eager or graph, buckets, strict, sampler inside the graph or not
  int32_t batch = 1;            // live requests per round
  double accept_rate = 0.7;     // probability that each draft token is accepted, in [0, 1]
  uint64_t seed = 1;
  double retire_rate = 0.0;     // per round, each live request retires with this probability
  bool vary_batch = false;      // each round runs a random subset of 1..batch live requests
  bool keep_outputs = false;    // copy each round's outputs to the host (tests, --check)
  // docs/trees.md: 0, chains; K >= 1, each round's T tokens of a request form a hashed tree of at most K
  // children a node (synthetic_tree, drafted on the backend inside the round), and the sampler accepts a
  // root-to-node path (synthetic_path). The engine's verifier then runs with VerifierConfig::trees.
  int32_t tree = 0;
};

void validate(const HostEngineConfig& config);

struct RoundRecord {
  std::vector<int32_t> slots;     // the batch, in row order
  std::vector<uint8_t> outputs;   // kept outputs: [L, n, T, HV, V] in the io dtype
};

struct RetiredRequest {
  uint64_t request = 0;
  int32_t slot = -1;
  int32_t rounds = 0;             // rounds it was verified in
  std::vector<uint8_t> state;     // materialized pool state [L, HV, V, K], state dtype
  std::vector<uint8_t> conv_window;  // with a conv: its materialized windows [L, W - 1, C], io dtype
};

class HostEngine {
 public:
  explicit HostEngine(const HostEngineConfig& config);
  ~HostEngine();
  // Owns the verifier and runner whose buffers the graphs point at.
  HostEngine(const HostEngine&) = delete;
  HostEngine& operator=(const HostEngine&) = delete;

  // Joins the first requests and captures the graphs (Exec::graph).
  void start(const Stream& s);
  // Between rounds: retirements and joins, a new batch when it changed. Then the round itself.
  void run_round(const Stream& s);
  // Retires every live request (materialize, read back).
  void finish(const Stream& s);

  int32_t rounds_run() const;
  // Tokens accepted so far, from the same hash the device sampler uses (no device read-back).
  int64_t tokens_accepted() const;
  const std::vector<RoundRecord>& rounds() const;  // filled with keep_outputs
  const std::vector<RetiredRequest>& retired() const;
  // The round's batch after the last run_round.
  const std::vector<int32_t>& batch_slots() const;

  Verifier& verifier();
  GraphRunner& runner();
  const HostEngineConfig& config() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kdagraph
