// kdagraph: the value types of a round over buffers the caller owns (docs/storage.md, docs/ops.md): views
// of state, the per-slot storage, the round's spec, one layer's inputs, the batch and its indices. Plain
// data, no behaviour: the operations that take them are in kdagraph/ops.hpp, and the kernels read them.
#pragma once

#include <cstdint>

#include "kdagraph/error.hpp"
#include "kdagraph/types.hpp"

namespace kdagraph {

// Where one kind of state lives for every layer: the pool (row = slot) or the per-token scratch
// (row = slot * S + t). Row r of layer l starts r * row_stride elements after layer l's base; inside a
// row the HV heads are compact [HV, V, K] (docs/storage.md). The memory is the caller's, in the backend's memory.
struct StateView {
  DType dtype = DType::f32;
  int32_t layers = 0;      // L
  int64_t rows = 0;        // rows of each layer
  int64_t row_stride = 0;  // elements from a row to the next: at least HV * V * K, a multiple of 16 bytes
  // One allocation: layer l starts layer_stride elements after layer l - 1 (16-byte aligned base) ...
  void* base = nullptr;
  int64_t layer_stride = 0;
  // ... or a table of L per-layer bases (16-byte aligned each) in memory the backend's kernels read:
  // device memory on CUDA, so one launch can address every layer.
  void* const* layer_table = nullptr;
};

// A view of one allocation holding `layers` layers `layer_stride` elements apart.
inline StateView state_view(void* base, DType dtype, int32_t layers, int64_t layer_stride, int64_t rows,
                            int64_t row_stride) {
  return StateView{dtype, layers, rows, row_stride, base, layer_stride, nullptr};
}
// A view of per-layer allocations whose bases are listed in `layer_table` [layers].
inline StateView state_view_table(void* const* layer_table, DType dtype, int32_t layers, int64_t rows,
                                  int64_t row_stride) {
  return StateView{dtype, layers, rows, row_stride, nullptr, 0, layer_table};
}

// The per-slot storage a round reads and writes (docs/storage.md).
struct SlotStorage {
  int32_t slots = 0;          // P: a batch names slots in [0, P)
  int32_t scratch_steps = 0;  // S >= T
  StateView pool;             // at least P rows
  StateView scratch;          // at least P * S rows, same dtype as the pool (modes with per-token scratch)
  int32_t* accept_len = nullptr;  // [P] int32
  // Replay mode (docs/modes.md), the corrections ring [TAG_RING_LAYOUT]: row = slot, R records of one
  // layer. ring_kg holds each record's k [R, H, K] then its g [R, HV, K] in the io dtype
  // (ring_kg_row_elems), ring_u its u [R, HV, V] in fp32 (ring_u_row_elems). ring_pending [P] counts
  // the slot's accepted records not yet folded into its checkpoint (pool[slot]), which start at record
  // ring_start [P]; both int32, 0 after a prefill and materialize. Other modes leave them unset.
  StateView ring_kg;
  StateView ring_u;
  int32_t* ring_pending = nullptr;
  int32_t* ring_start = nullptr;
  // [P] int32, where needs_round_parity(spec): per slot, which half of the conv state its last
  // accepted round wrote (fused-accept and replay with a conv). The accept step flips it; a prefill and
  // materialize set it to 0.
  int32_t* round_parity = nullptr;
  // The short convolution's state (docs/conv.md), present exactly when spec.conv.width > 0. Both in the io
  // dtype, time-major with the C channels of one column contiguous [TAG_CONV_LAYOUT]:
  //   conv_state:   row = slot, conv_state_row_elems. Fused-accept and replay: two halves of W - 1 + S
  //                 columns, [W - 1 base | S new] each; the slot's history is half round_parity[slot]'s
  //                 base, then its first accept_len new columns, and a round writes the other half. A
  //                 prefill writes the last W - 1 inputs at columns [0, W - 1) (half 0's base) with
  //                 accept_len 0 and parity 0; materialize moves the window there. Two-phase: the
  //                 window alone, W - 1 columns.
  //   conv_scratch: two-phase only, row = slot * S + t, conv_scratch_row_elems: token t's W - 1 columns.
  StateView conv_state;
  StateView conv_scratch;
  // docs/trees.md, where needs_accept_path(spec): [P, T] int32, each slot's accepted root-to-node path (its
  // node indices, -1 after), written by the accept step: the conv state's halves hold the round's
  // inputs in token order, and the next round reads the slot's history through the path (no scatter).
  int32_t* accept_path = nullptr;
  // Optional: where kernels record what only the device can see (device-writable; host-mapped pinned
  // memory lets the host read it without synchronizing).
  DeviceErrorWord* errors = nullptr;
  // Stochastic rounding (RoundSpec::rounding, docs/low_precision.md): each slot's seed, the key of its draws, and its
  // store counter, which the accept step advances every round, so that a graph's replays draw afresh
  // with no host work. A prefill gives a reused slot a new seed (Verifier::prefill does; a caller of
  // the ops writes its own). Null, and not read, with round to nearest.
  uint64_t* rounding_seed = nullptr;     // [P]
  uint32_t* rounding_counter = nullptr;  // [P]
  // Optional, for measurements: a counter (device-writable, like `errors`) to which the verify, commit
  // and materialize kernels add the bytes of state and ring records they read and write, as they move
  // them (the conv state is not counted). Null: nothing is counted, at no cost.
  uint64_t* bytes_moved = nullptr;
};

// What every operation of a round agrees on.
struct RoundSpec {
  ModelShape model;       // L, H, HV, K, V
  int32_t tokens = 0;     // T = 1 + draft tokens, 1 <= T <= S
  DType io_dtype = DType::f32;
  VerifyOptions options;
  // How the round's state stores round to the storage's state dtype (docs/low_precision.md); stochastic needs
  // SlotStorage::rounding_seed and rounding_counter.
  Rounding rounding = Rounding::nearest;
  Mode mode = Mode::fused_accept;
  // Replay (docs/modes.md): R records a slot and flush_min, both resolved (round_spec fills a config's
  // defaults): 2 T <= R, 0 <= flush_min <= R - T. Other modes ignore it.
  ReplayRing ring;
  ConvShape conv;         // the layers' short convolution; width 0: none
  // Programmatic dependent launch of the round's kernels (see the top of this file); false launches each
  // only after the previous one has finished (for A/B runs). Ignored where the device has no PDL.
  bool pdl = true;
  // docs/trees.md: the round's tokens of a row may form a tree (BatchView::parent), and the sampler accepts a
  // root-to-node path (ops::accept_path). Off: every round is a chain, and a batch's parent is refused.
  // With a tree, the verify keeps the states later tokens branch from aside (in fp32), so at most
  // kMaxCudaTreeTokens tokens on CUDA. Every mode (replay: the accept step moves the accepted path's
  // records into place), with the conv fused in (conv_verify_layer) or not.
  bool trees = false;
};

// docs/trees.md: the most tokens of a round of token trees on the CUDA backend (RoundSpec::trees).
inline constexpr int32_t kMaxCudaTreeTokens = 16;

// One layer's inputs for a batch of rows, in backend memory, row-major with the last dim contiguous, in
// the io dtype (g and beta: see gate_f32). q, k, v, g and o are 16-byte aligned; q, k and v may be
// strided views (their strides multiples of 16 bytes), the others are compact.
struct LayerInputs {
  const void* q = nullptr;         // [rows, T, H, K]
  const void* k = nullptr;         // [rows, T, H, K]
  const void* v = nullptr;         // [rows, T, HV, V]
  const void* g = nullptr;         // [rows, T, HV, K] log decay, or raw gate input (gate in kernel)
  const void* beta = nullptr;      // [rows, T, HV]
  void* o = nullptr;               // [rows, T, HV, V]
  // The layer's weights, fp32, gate in kernel only. In replay mode they must not change between rounds
  // (ops::verify_layer).
  const float* A_log = nullptr;    // [gate_heads], null: zeros
  const float* dt_bias = nullptr;  // [gate_heads * K], null: zeros
  // Heads the gate parameters are given for: HV (0 means HV; FLA's form), or H, one per query/key head
  // shared by its value heads (FlashInfer's GQA form).
  int32_t gate_heads = 0;
  InputStrides q_strides, k_strides, v_strides;  // [rows, T, H, K], [rows, T, H, K], [rows, T, HV, V]
  // g and beta in fp32 whatever the io dtype (vLLM's decode passes an fp32 g beside bf16 q, k and v);
  // false: in the io dtype. Not with replay's ring at a 16-bit io dtype (its records keep g in that dtype).
  bool gate_f32 = false;
};

// The batch of a round, in backend memory; the host writes it when the batch changes.
struct BatchView {
  const int32_t* slots = nullptr;   // [rows] slot of each row; -1 marks a padded row
  const int32_t* n_real = nullptr;  // [1] rows >= n_real are padding whatever `slots` holds
  int32_t rows = 0;                 // N: the bucket the round runs at
  // docs/trees.md, with RoundSpec::trees: [rows, T] the parent of each token of each row, parent[n][0] = -1
  // and parent[n][t] in [-1, t) (-1: a child of the seed). Null: chains. The index build copies it into
  // RoundIndices::parent, reading as t - 1 (and recording) a parent outside that range.
  const int32_t* parent = nullptr;
};

// The per-row indices of one round (docs/indices.md), built on the device once per forward and shared by every
// layer. Every entry of a padded row is negative. [TAG_INDEX_LAYOUT]
struct RoundIndices {
  int32_t capacity = 0;             // rows the arrays hold
  int32_t tokens = 0;               // T of write_row
  int32_t* row_slot = nullptr;      // [N] slot of the row, -1 padded
  int32_t* seed_pool = nullptr;     // [N] slot when the seed is pool[slot], else -1
  int32_t* seed_scratch = nullptr;  // [N] scratch row when the seed is scratch, else -1
  int32_t* seed_accept = nullptr;   // [N] accept_len gathered for the row's slot, -1 padded
  int32_t* write_row = nullptr;     // [N, T] scratch row of each post-state, -1 padded
  int32_t* row_accept = nullptr;    // [N] two-phase: the row's accept length, which the commit reads
  // Replay, the slot's ring as the round found it (ring_pending, ring_start, clamped) and whether this
  // round flushes; the accept step moves the cursor from them. -1 for padded rows.
  int32_t* ring_pending = nullptr;  // [N]
  int32_t* ring_start = nullptr;    // [N]
  int32_t* ring_flush = nullptr;    // [N] 1: the verify writes its folded state back, the new records restart
  int32_t* row_parity = nullptr;    // [N] round_parity[slot] where the spec needs it, else -1; the accept
                                    // step sets the slot's parity to 1 - row_parity[n]
  int32_t* parent = nullptr;        // [N, T] the checked token tree (docs/trees.md): chains when the round has none
};

// One layer's short convolution for a batch of rows (docs/conv.md), in backend memory. The outputs are up
// to three segments that tile the channels [0, C) in order, each [rows, T, channels] contiguous in the
// io dtype: a plain y [rows, T, C] is one segment; q, k and v as the verify reads them are three
// (conv_into_verify_inputs). Unused segments have channels 0.
struct ConvOutputSegment {
  int32_t channels = 0;
  void* y = nullptr;
};
inline constexpr int kMaxConvSegments = 3;

struct ConvLayerInputs {
  const void* x = nullptr;        // [rows, T, C] the pre-conv projections, io dtype
  const float* weight = nullptr;  // [C, W] fp32
  const float* bias = nullptr;    // [C] fp32, optional
  ConvOutputSegment out[kMaxConvSegments];
};

// A standalone short convolution with docs/python.md's short_conv semantics (the fused-accept offset window,
// in place): x [batch, T, C], y [batch, T, C], one conv state of rows of W - 2 + S columns.
struct ShortConvCall {
  ConvShape conv;                 // C, W, activation
  DType io_dtype = DType::f32;    // of x, y and the state
  int32_t batch = 0;              // B
  int32_t tokens = 0;             // T <= S
  int32_t scratch_steps = 0;      // S: the state rows hold W - 2 + S columns
  const void* x = nullptr;
  const float* weight = nullptr;  // [C, W]
  const float* bias = nullptr;    // [C], optional
  void* y = nullptr;
  // One layer, rows N: row state_indices[b] is batch row b's. Any C (docs/python.md): the base and the row
  // stride need only be element-aligned here, not 16-byte aligned as a round's views are.
  StateView conv_state;
  const int32_t* state_indices = nullptr;  // [B] negative: a padded row (zero output, nothing read or written)
  const int32_t* num_accepted = nullptr;   // [B] the window starts at column max(a - 1, 0)
  // docs/trees.md, optional: [B, T] this call's token tree per row (parent[b][t] in [-1, t); outside is read as
  // t - 1 and recorded): token t's window runs back along its ancestors ...
  const int32_t* parent = nullptr;
  // ... and [B, T] the path each row accepted in the call before (SGLang's accept_index: node indices
  // from the root, -1 after the end), whose inputs that call wrote at columns [W - 2, W - 2 + T): the
  // window is then the last W - 1 inputs of columns [0, W - 2) followed by those columns in path order,
  // not column max(a - 1, 0). A row with an empty path (-1 first) reads as a chain. Entries outside
  // [0, T) end the path.
  const int32_t* accept_index = nullptr;
  DeviceErrorWord* errors = nullptr;       // optional: clamped accept lengths, rows outside [0, N)
};

// One layer's gate parameters (gate in kernel), as its LayerInputs name them.
struct GateParams {
  const float* A_log = nullptr;    // [gate_heads], null: zeros
  const float* dt_bias = nullptr;  // [gate_heads * K], null: zeros
  int32_t gate_heads = 0;          // LayerInputs::gate_heads
};

// Rows a caller names itself, FlashInfer's recurrent_kda way (docs/python.md): int32 arrays in backend memory,
// where a negative entry names no row. Set exactly one of seed_row and seed_token.
struct IndexedRows {
  const int32_t* seed_row = nullptr;    // [rows] the seed is row seed_row[n] of `seeds` ...
  const int32_t* seed_token = nullptr;  // ... or [rows] row write_row[n][seed_token[n] - 1] of `states`
  const int32_t* write_row = nullptr;   // [rows, T] the row of `states` the post-state of token t goes to
  // false: a frozen verify (FlashInfer's disable_state_update): the same seeds and outputs, no state row
  // written. write_row is then read only to find a seed_token's row.
  bool write_states = true;
  // docs/trees.md, optional: [rows, T] a token tree per row (as BatchView::parent), with spec.trees. Null: chains.
  const int32_t* parent = nullptr;
};

}  // namespace kdagraph
