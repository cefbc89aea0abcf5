// kdagraph: the verify round of every KDA layer of a model, on one backend (docs/storage.md, docs/modes.md, docs/indices.md, docs/errors.md).
//
// A Verifier owns the state storage (pool, scratch, accept_len), the per-round index buffers and the
// batch buffers (n_real, slots) at capacity size, and runs the operations of ops.hpp on them. Nothing
// it enqueues allocates, synchronizes or moves a buffer, so a round can be captured into a CUDA graph
// (see graph_runner.hpp) and replayed. An engine that owns its memory calls the operations directly.
//
// Typical round (eager):
//   v.set_batch(stream, slots, n);           // host: only when the batch changes
//   v.enqueue_round(stream, inputs, rows);   // indices once, then the L verifies
//   ...engine's sampler writes accept lengths on the device...
//   v.enqueue_accept(stream, accepted, rows);
//   v.enqueue_commit(stream, rows);          // two-phase mode only
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kdagraph/error.hpp"
#include "kdagraph/ops.hpp"
#include "kdagraph/types.hpp"

namespace kdagraph {

struct VerifierConfig {
  Backend backend = Backend::cpu;
  ModelShape model;
  PoolShape pool;
  int32_t max_rows = 0;  // batch capacity: the largest bucket
  int32_t tokens = 0;    // T = 1 + draft tokens, 1 <= T <= S
  DType io_dtype = DType::f32;
  VerifyOptions options;
  Mode mode = Mode::fused_accept;
  // Replay's corrections ring (docs/modes.md): R records a slot (0: 3 T) and flush_min (-1: T + 1, or R - T
  // where that is less). The GPU sweep times the choices.
  ReplayRing ring;
  // The layers' short convolution (docs/conv.md); width 0: none. With one, the Verifier also owns the conv
  // state (and in two-phase the conv scratch), a prefill takes the last W - 1 inputs, and each layer's
  // conv runs with its verify.
  ConvShape conv;
  // With a conv: each layer's conv and verify in one kernel (enqueue_conv_verify, ops::conv_verify_layer);
  // false: the two launches enqueue_conv and enqueue_verify, bitwise the same results.
  bool fuse_conv = true;
  // Programmatic dependent launch of every kernel of its rounds, its graphs' included (docs/graphs.md,
  // RoundSpec::pdl, with what it asks of an engine's kernels); false for A/B runs.
  bool pdl = true;
  // docs/trees.md token trees (RoundSpec::trees): the Verifier owns a parent array [max_rows, T] the index
  // build reads (set_tree from the host, or written on the device through batch_buffers().parent), and
  // rounds accept root-to-node paths (enqueue_accept_path). It starts as chains.
  bool trees = false;
  // Stochastic rounding (pool.rounding, docs/low_precision.md): the base of the slots' seeds. Slot s starts with a seed
  // made from it and s, and each prefill gives the slot the next seed of its own sequence, so a reused
  // slot draws afresh and two Verifiers of one config draw alike.
  uint64_t rounding_seed = 0x6b646167726170ull;
  // Count the bytes of state and ring records the round's kernels move (SlotStorage::bytes_moved,
  // Verifier::bytes_moved): one atomic add per unit of work, for measurements.
  bool count_bytes = false;
};

// Throws InvalidArgument naming the first bad field (docs/errors.md).
void validate(const VerifierConfig& config);

// A config's ring with its defaults filled in for T = `tokens` (VerifierConfig::ring).
ReplayRing resolved_ring(const ReplayRing& ring, int32_t tokens);

// What the operations of the Verifier's rounds agree on (the spec its ops calls carry).
RoundSpec round_spec(const VerifierConfig& config);

// Whether a round runs each layer's conv and verify as one kernel: a conv, and fuse_conv.
bool fuses_conv(const VerifierConfig& config);

class Verifier {
 public:
  // Allocates every buffer; pool and scratch start zeroed, accept_len at 0.
  explicit Verifier(const VerifierConfig& config);
  ~Verifier();
  // Owns device allocations that graphs point at: it must neither be copied nor move.
  Verifier(const Verifier&) = delete;
  Verifier& operator=(const Verifier&) = delete;

  const VerifierConfig& config() const;

  // ---- storage, in backend memory (docs/storage.md) ----
  // Pool [L, P, rows] and scratch [L, P * S, rows]: each row holds one slot's [HV, V, K] state and
  // starts row_stride_bytes() after the previous one (the compact size rounded up to 16 bytes).
  void* pool() const;
  void* scratch() const;
  int32_t* accept_len() const;  // [P]
  size_t slot_state_bytes() const;  // one slot, one layer: HV * V * K * state dtype size
  size_t row_stride_bytes() const;
  size_t pool_bytes() const;
  size_t scratch_bytes() const;  // 0 in replay mode, which keeps no per-token states
  // Replay mode: the ring's records ([L, P] rows of R records, include/kdagraph/ops.hpp SlotStorage)
  // and its cursor ([P] ring_pending and ring_start); 0 otherwise.
  size_t ring_bytes() const;
  // The conv state [L, P, rows] and conv scratch [L, P * S, rows] (two-phase) in the io dtype, time-major
  // rows (include/kdagraph/ops.hpp, SlotStorage: two halves in the offset-window modes); nullptr and 0
  // without a conv.
  void* conv_state() const;
  size_t conv_state_bytes() const;
  size_t conv_scratch_bytes() const;
  size_t conv_window_bytes() const;  // one slot, one layer: the W - 1 inputs of C channels, io dtype

  // The same buffers as the operations see them (include/kdagraph/ops.hpp): a round of this Verifier
  // is exactly these calls on these views.
  const RoundSpec& spec() const;
  const SlotStorage& storage() const;
  const RoundIndices& indices() const;
  BatchView batch_view(int32_t rows) const;

  // ---- host setup and inspection: synchronous, never on a round's hot path ----
  // They are ordered on `s` after the work already enqueued there and return when done (they wait
  // for `s`), so they are safe with non-blocking streams too.
  // Prefill: pool[l][slot] = states[l] for every layer, accept_len[slot] = 0 (and its round parity 0).
  // `states` is host memory [L, HV, V, K] in the state dtype. With a conv, `conv_window` is host memory
  // [L, W - 1, C] in the io dtype, each layer's last W - 1 inputs, oldest first: columns [0, W - 1) of
  // the slot's conv state.
  void prefill(const Stream& s, int32_t slot, const void* states, const void* conv_window = nullptr);
  // Copies pool[l][slot] for every layer into host memory [L, HV, V, K]. Call materialize first in
  // fused-accept mode if the slot's latest state may still be in scratch.
  void read_pool(const Stream& s, int32_t slot, void* states) const;
  // With a conv: copies each layer's window, columns [0, W - 1) of the slot's conv state, into host
  // memory [L, W - 1, C]. Call materialize first, as for read_pool.
  void read_conv_window(const Stream& s, int32_t slot, void* conv_window) const;

  // Prefill from backend memory, stream-ordered and asynchronous (the engine's prefill wrote the state
  // on the device): pool[l][slot] = states[l] for every layer, accept_len[slot] = 0. `states` is
  // [L, HV, V, K] in the state dtype and must stay valid until the copy has run; so must `conv_window`
  // [L, W - 1, C] (io dtype), needed with a conv.
  void enqueue_prefill(const Stream& s, int32_t slot, const void* states, const void* conv_window = nullptr);

  // ---- per round: stream-ordered, capture-safe, allocate nothing, never synchronize ----
  // Host: validates n in [1, max_rows] and the slots (in [0, P), no repeats), then writes n_real and
  // the slots into the batch buffers the index build reads.
  void set_batch(const Stream& s, const int32_t* slots, int32_t n);
  int32_t batch_size() const;
  // Builds the round's indices over `rows` rows (n_real <= rows <= max_rows; the rest are padding).
  void enqueue_indices(const Stream& s, int32_t rows);
  // With a conv: the short convolution of layer `layer` with the indices of the last enqueue_indices,
  // writing the segments of `in` (conv_into_verify_inputs: the q, k and v its verify reads).
  void enqueue_conv(const Stream& s, int32_t layer, const ConvLayerInputs& in, int32_t rows);
  // Verifies layer `layer` with the indices of the last enqueue_indices. In replay mode it first folds
  // each row's pending records with `in`'s gate parameters (check_gates).
  void enqueue_verify(const Stream& s, int32_t layer, const LayerInputs& in, int32_t rows);
  // With a conv: layer `layer`'s conv and verify in one kernel (ops::conv_verify_layer): `conv` gives x,
  // weight and bias, `in` g, beta, o and the gate parameters; q, k and v are not written.
  void enqueue_conv_verify(const Stream& s, int32_t layer, const ConvLayerInputs& conv, const LayerInputs& in,
                           int32_t rows);
  // enqueue_indices, then enqueue_verify for every layer; `layers` has L entries. Without a conv only.
  void enqueue_round(const Stream& s, const LayerInputs* layers, int32_t rows);
  // enqueue_indices, then for every layer its conv and its verify (one kernel, or two without
  // config().fuse_conv); `convs` and `layers` have L entries.
  void enqueue_round(const Stream& s, const ConvLayerInputs* convs, const LayerInputs* layers, int32_t rows);
  // With config().trees (docs/trees.md), host: validates `parent` [n, T] of the current batch (parent[r][0]
  // = -1, parent[r][t] in [-1, t)) and writes it where the index build reads it (until the next
  // set_tree; the trees start as chains). A tree is device data: one captured graph per bucket serves
  // any tree. An engine whose drafter builds the tree on the device writes batch_buffers().parent.
  void set_tree(const Stream& s, const int32_t* parent, int32_t n);
  // Accepts the round: `accepted` is backend memory [rows] written by the sampler.
  void enqueue_accept(const Stream& s, const int32_t* accepted, int32_t rows);
  // With config().trees: accepts the sampler's root-to-node paths, `accept_index` [rows, T] in backend
  // memory (ops::accept_path): each slot's accept length becomes its path's last node + 1.
  void enqueue_accept_path(const Stream& s, const int32_t* accept_index, int32_t rows);
  // Same, from host memory [n, T] of the current batch: each row validated as a path of the tree
  // set_tree wrote (from a child of the seed down, -1 after its end), by name, before anything runs.
  void enqueue_accept_path_from_host(const Stream& s, const int32_t* accept_index, int32_t n);
  // Same, from host memory [n] of the current batch: validated in [1, T] first (tests, tools).
  void enqueue_accept_from_host(const Stream& s, const int32_t* accepted, int32_t n);
  // Two-phase only: copies each row's accepted post-state into the pool, all layers in one launch (and
  // with a conv its accepted window into the conv state, in one more).
  void enqueue_commit(const Stream& s, int32_t rows);
  // docs/modes.md materialize: for each listed slot with accept_len a >= 1, pool[slot] = its state after the
  // accepted prefix (fused-accept: scratch row a - 1; replay: the pending records folded), every layer,
  // with a conv its window moved to column 0, then accept_len = 0. `slots` is host memory, validated (in
  // range, no repeats). With the gate in the kernel, replay uses the A_log and dt_bias each layer's last
  // verify was given (check_gates).
  void enqueue_materialize(const Stream& s, const int32_t* slots, int32_t count);

  // Replay mode with the gate in the kernel (docs/modes.md): the records a verify folds hold the raw gate an
  // earlier round was given, not its decay: the verify that folds them applies its own A_log and dt_bias, and
  // materialize those of each layer's last verify. So they are the layer's weights and must not change
  // between rounds, neither their values nor where they are. Throws InvalidArgument naming A_log or
  // dt_bias (with the layer and both addresses) when `in`'s differ from those of layer `layer`'s last
  // verify while a prefix verified with those may be pending; changes nothing. Accept lengths are device
  // data, so the rule is conservative: after a verify of the layer every slot may hold one, until a
  // materialize lists the slot or a prefill refills it (so to move a layer's weights, materialize or
  // prefill every slot first); and once a round was captured into a graph, which may replay at any time,
  // they are fixed for the Verifier's life. Only the addresses are compared: values changed in place are
  // not seen. Every verify entry point (enqueue_verify, enqueue_conv_verify, enqueue_round and the
  // GraphRunner's rounds and captures) checks each of its layers before it enqueues anything; other
  // modes, and the precomputed gate, have nothing to check.
  void check_gates(int32_t layer, const LayerInputs& in) const;

  // ---- device-side errors (docs/errors.md) ----
  // A plain read of host-mapped memory: it does not wait for the stream. Read it after the work you
  // care about has completed (e.g. after your end-of-round event) to see that work's errors.
  DeviceErrorWord device_errors() const;
  void clear_device_errors();
  // With config().count_bytes: the bytes of state and ring records moved since the last clear (a plain
  // read of host-mapped memory, like device_errors); 0 without.
  uint64_t bytes_moved() const;
  void clear_bytes_moved();

  // Device pointers the graph runner and tests address (backend memory).
  struct BatchBuffers {
    int32_t* n_real;      // [1]
    int32_t* slots;       // [max_rows]
    int32_t* accepted;    // [max_rows] staging for enqueue_accept_from_host
    int32_t* parent;      // [max_rows, T] the round's token tree (config().trees; else null)
    int32_t* accept_index;  // [max_rows, T] staging for enqueue_accept_path_from_host (trees; else null)
  };
  BatchBuffers batch_buffers() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kdagraph
