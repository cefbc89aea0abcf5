// kdagraph: the operations of a round over buffers the caller owns (docs/ops.md).
//
// An engine that keeps its own state pools (SGLang's one [L, P + 1, HV, V, K] tensor, vLLM's tensor per
// layer) describes them with views and calls these operations; the Verifier is an owner of buffers
// built on exactly these calls. A fused-accept round:
//
//   ops::build_indices(s, spec, storage, batch, idx);                 // once per forward
//   for (int l = 0; l < L; ++l)
//     ops::verify_layer(s, spec, storage, idx, batch.rows, l, inputs[l], &batch);
//     // with a conv, one kernel per layer instead: ops::conv_verify_layer(..., l, convs[l], inputs[l], &batch)
//   ...the engine's sampler writes accept lengths [rows] on the device...
//   ops::accept(s, spec, storage, idx, batch.rows, accepted);
//   ops::commit(s, spec, storage, idx, batch.rows);                   // two-phase mode only
//   ops::materialize(s, spec, storage, slots, count);                 // before reading pool rows directly
//
// Every operation is stream-ordered and capture-safe: it allocates nothing and never synchronizes. Each
// validates its arguments on the host before it enqueues anything and throws InvalidArgument naming the
// argument, its value and the allowed range; a refused call changes nothing. What only the device can
// see (an accept length written by another kernel, a null entry in a device-resident layer table) is
// clamped to a safe value and recorded in SlotStorage::errors.
//
// Programmatic dependent launch (docs/graphs.md, RoundSpec::pdl, on by default on sm_90 and later): each kernel
// of a round may start while the kernel before it on the stream is still running. Before its wait on
// that kernel it reads only what earlier rounds wrote (the seed rows of the pool or scratch, replay's
// ring records, conv state columns, the slots' kept paths of a tree, weights and gate parameters);
// the inputs of this round (q, k, v, g, beta, x, the indices, accept lengths) only after. So does the first kernel of ours after a kernel
// of the engine's: an engine kernel placed just before a verify_layer, conv_layer, materialize or commit
// (its projections, its own attention or MoE, a state copy of its own) must not write the state rows,
// scratch rows, ring records or conv state the next operation reads for its batch, or that operation
// may read them before the engine's kernel has written them. Writes to that operation's inputs are
// fine. Where an engine's kernel must write such rows, run the round with pdl = false, or enqueue
// between the two a kernel that lets its dependents start only after it has waited for that one (or that
// never triggers early). build_slot_indices and short_conv launch plainly.
#pragma once

#include <cstdint>

#include "kdagraph/buffers.hpp"
#include "kdagraph/error.hpp"
#include "kdagraph/types.hpp"

namespace kdagraph {

// Whether a round keeps SlotStorage::accept_path: token trees with the conv state's halves (fused
// accept and replay with a conv).
bool needs_accept_path(const RoundSpec& spec);

// Whether a round keeps SlotStorage::round_parity: the offset-window modes with a conv (the conv
// state's halves).
bool needs_round_parity(const RoundSpec& spec);

// Whether a round keeps SlotStorage::rounding_seed and rounding_counter: stochastic rounding into a
// 16-bit state dtype (an fp32 state is stored exactly, and needs neither).
bool needs_rounding_state(const RoundSpec& spec, DType state_dtype);

// Elements of one slot's ring rows (replay, [TAG_RING_LAYOUT]): ring_kg, io dtype, R (H K + HV K);
// ring_u, fp32, R HV V.
int64_t ring_kg_row_elems(const RoundSpec& spec);
int64_t ring_u_row_elems(const RoundSpec& spec);

// Elements (io dtype) of one conv state row: 2 (W - 1 + S) columns of C in the offset-window modes
// (fused-accept, replay: two halves), W - 1 in two-phase. 0 when spec.conv.width is 0.
int64_t conv_state_row_elems(const RoundSpec& spec, int32_t scratch_steps);
// Elements (io dtype) of one conv scratch row (two-phase): one token's window, (W - 1) * C.
int64_t conv_scratch_row_elems(const RoundSpec& spec);

// The conv inputs whose outputs are the verify's q [rows, T, H, K], k [rows, T, H, K] and
// v [rows, T, HV, V]: channels [0, HK), [HK, 2HK) and [2HK, C).
ConvLayerInputs conv_into_verify_inputs(const RoundSpec& spec, const void* x, const float* weight, const float* bias,
                                        void* q, void* k, void* v);

// int32 elements the indices of `rows` rows of `tokens` tokens take.
int64_t round_index_elems(int32_t rows, int32_t tokens);
// The indices laid out in `storage` (round_index_elems(rows, tokens) int32, backend memory).
RoundIndices round_indices(int32_t* storage, int32_t rows, int32_t tokens);

namespace ops {

// docs/indices.md: the round's indices from the batch and the accept lengths. Slots the device finds out of
// range or repeated make their rows padding; an accept length outside [0, S] is clamped. Both are
// recorded in storage.errors.
void build_indices(const Stream& s, const RoundSpec& spec, const SlotStorage& storage, const BatchView& batch,
                   const RoundIndices& idx);

// docs/math.md, docs/modes.md: the T-token verify of layer `layer` for `rows` rows: each row seeds where `idx` says,
// writes every post-state to scratch row write_row[n][t] (a negative row: not written) and every output.
// Padded rows read nothing, write no state and output zeros.
// `batch`, optional, is the batch `idx` was built from (docs/graphs.md, programmatic dependent launch): with it
// each block loads its seed tile before it waits on the previous kernel, from where the batch, the
// slots' accept lengths and their round parities say it is (the index arrays confirm it after the
// wait). The kernel enqueued just before the verify may then run while the seed loads: it must not
// write the state, accept_len, round_parity or the batch the verify reads early.
// Replay with the gate in the kernel: each row first folds its slot's pending records, whose raw gate
// an earlier round's verify recorded, with `in`'s A_log and dt_bias. They must be the ones that round
// was given, the layer's weights: the operations keep nothing between calls and cannot check it (the
// Verifier does, Verifier::check_gates). The same holds for conv_verify_layer and for materialize's
// `gates`.
void verify_layer(const Stream& s, const RoundSpec& spec, const SlotStorage& storage, const RoundIndices& idx,
                  int32_t rows, int32_t layer, const LayerInputs& in, const BatchView* batch = nullptr);

// docs/conv.md "fused with the verify": layer `layer`'s short convolution and its verify in one launch, bitwise
// what conv_layer followed by verify_layer gives (outputs, post-states, conv state, conv scratch, token
// cache), without writing q, k and v anywhere: `conv` gives x (16-byte aligned), weight and bias (its
// output segments are not used), `in` gives g, beta, o and the gate parameters (its q, k and v are not
// read). The conv state follows the mode's layout (ops.hpp, SlotStorage); `batch` as for verify_layer,
// and then the conv window loads before the wait too.
void conv_verify_layer(const Stream& s, const RoundSpec& spec, const SlotStorage& storage, const RoundIndices& idx,
                       int32_t rows, int32_t layer, const ConvLayerInputs& conv, const LayerInputs& in,
                       const BatchView* batch = nullptr);

// docs/math.md, docs/python.md: the T-token verify of layer `layer` of `rows` rows over rows the caller names (`idx`),
// not slots: FlashInfer's spec decode. Row n seeds where idx says (a negative seed row: a padded row,
// zero output, nothing read or written), writes the post-state of token t to row write_row[n][t] of
// `states` (negative: not written) and every output. A seed length outside [1, T] is clamped, a row
// outside its view is not touched; both are recorded in `errors` (optional). `spec.mode` is not used;
// `seeds` is read only when idx.seed_row is set, and may be `states` itself. Rows that write the same
// state row, or read one another row writes, are the caller's error: their result is undefined.
void verify_indexed(const Stream& s, const RoundSpec& spec, const StateView& seeds, const StateView& states,
                    const IndexedRows& idx, int32_t rows, int32_t layer, const LayerInputs& in,
                    DeviceErrorWord* errors = nullptr);

// docs/indices.md, docs/python.md: SGLang's fused-accept index pair for `rows` rows of `slots` (-1 marks a padded row):
// write_row[n][t] = slot * scratch_steps + t ([rows, tokens]) and accepted[n] = accept_len[max(slot, 0)]
// ([rows]), all in backend memory. A padded row's write rows are all -1 and it gathers from slot 0. A
// slot outside [0, pool_slots) or repeated makes its row padding and is recorded in `errors` (optional).
void build_slot_indices(const Stream& s, const int32_t* slots, int32_t rows, const int32_t* accept_len,
                        int32_t pool_slots, int32_t scratch_steps, int32_t tokens, int32_t* write_row,
                        int32_t* accepted, DeviceErrorWord* errors = nullptr);

// docs/conv.md: the short convolution of layer `layer` for `rows` rows, before its verify: each row reads
// its window from storage.conv_state (fused-accept, replay: column a of half p, with a and p the
// gathered idx.seed_accept and idx.row_parity, and writes its history to half 1 - p; two-phase: at
// column 0, each token's window written to conv_scratch row write_row[n][t]) and writes y to the
// segments of `in`. Padded rows read and write no conv state and output zeros.
void conv_layer(const Stream& s, const RoundSpec& spec, const SlotStorage& storage, const RoundIndices& idx,
                int32_t rows, int32_t layer, const ConvLayerInputs& in);

// docs/python.md short_conv over one caller-owned conv state (see ShortConvCall).
void short_conv(const Stream& s, const ShortConvCall& call);

// docs/modes.md accept: `accepted` [rows] in backend memory (the sampler's lengths). Fused-accept writes
// accept_len[slot] = a; two-phase records a in idx.row_accept for the commit. Where the spec keeps a
// round parity, the slot's flips to the buffers this round wrote. A length outside [1, T] is clamped into
// it and recorded.
void accept(const Stream& s, const RoundSpec& spec, const SlotStorage& storage, const RoundIndices& idx,
            int32_t rows, const int32_t* accepted);

// docs/trees.md, with spec.trees: accept as ops::accept does, from the sampler's accepted root-to-node paths,
// `accept_index` [rows, T] in backend memory (SGLang's form: each row's node indices from a child of
// the seed, token 0 in SGLang's trees, down the tree, -1 after the path's end). The row's accept length
// becomes its last node + 1, so the next seed (fused accept), the commit and materialize read that
// node's post-state row. A first node whose parent is not -1, or a node that is not a child
// (RoundIndices::parent) of the one before it, cuts the path there (a path cut to nothing keeps token
// 0) and is recorded (path_invalid).
void accept_path(const Stream& s, const RoundSpec& spec, const SlotStorage& storage, const RoundIndices& idx,
                 int32_t rows, const int32_t* accept_index);

// Two-phase: copies each row's accepted post-state (scratch row slot*S + a - 1) into pool[slot], every
// layer in one launch; with a conv, also its window a - 1 (conv_scratch row slot*S + a - 1) into
// columns [0, W - 1) of conv_state[slot], every layer in one more launch.
void commit(const Stream& s, const RoundSpec& spec, const SlotStorage& storage, const RoundIndices& idx,
            int32_t rows);

// docs/modes.md materialize: for each of the `count` slots listed in `slots` (backend memory), pool[slot] =
// the slot's latest state, in every layer. Fused-accept copies scratch row slot*S + a - 1 (a =
// accept_len[slot] >= 1); replay folds the slot's pending records into its checkpoint, which needs each
// layer's gate parameters when the gate is in the kernel: `gates` [L] (host array of backend pointers),
// those the records were verified with (verify_layer); else unused. With a conv (fused-accept, replay)
// the window moves to columns [0, W - 1) (half 0's base) first. Then accept_len[slot] = 0, and
// round_parity, ring_pending and ring_start, where kept, 0. Entries outside [0, P) are skipped and
// recorded.
void materialize(const Stream& s, const RoundSpec& spec, const SlotStorage& storage, const int32_t* slots,
                 int32_t count, const GateParams* gates = nullptr);

}  // namespace ops
}  // namespace kdagraph
