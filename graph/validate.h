// docs/errors.md, docs/ops.md: host-side validation, one function per concept. Each throws InvalidArgument naming the
// entry point, the argument, its value and the allowed range, before anything is enqueued.
#pragma once

#include <cstdint>
#include <string>

#include "kdagraph/ops.hpp"
#include "kdagraph/verifier.hpp"
#include "kernels/launch_checks.h"  // require_buffer

namespace kdagraph::detail {

// The round's shape, options and mode, and what `backend` supports of them.
// Replay's ring (docs/modes.md): 2 T <= R <= 65536 and 0 <= flush_min <= R - T, named `name`.records and
// `name`.flush_min.
void validate_ring(const char* where, const char* name, const ReplayRing& ring, int32_t tokens);
void validate_spec(const char* where, const RoundSpec& spec, Backend backend);
// The storage views against the spec: dtypes, layers, rows, strides, alignment, and on the CPU backend
// the entries of a layer table. `spec` is valid.
void validate_storage(const char* where, const RoundSpec& spec, const SlotStorage& storage, Backend backend);
// One state view against the spec: dtype, layers, rows (at least min_rows), strides, alignment.
void validate_state_view(const char* where, const char* name, const StateView& view, const RoundSpec& spec,
                         int64_t min_rows, Backend backend);
// One view `name`: dtype, spec.model.layers layers, at least `min_rows` rows of at least `row_elems`
// elements, exactly one of base and layer table. Rows, layers and the base start at multiples of
// `row_align_bytes`: 16 for every view of a round (docs/ops.md), one element for short_conv's conv state
// (docs/python.md: any channel count). A table's entries are 16-byte aligned whatever the rows (layer_base).
void validate_view(const char* where, const char* name, const StateView& v, const RoundSpec& spec,
                   int64_t min_rows, int64_t row_elems, Backend backend, int64_t row_align_bytes = 16);
// Index arrays present, T matching the spec, and `rows` in [1, capacity].
void validate_indices(const char* where, const RoundSpec& spec, const RoundIndices& idx, int32_t rows);
void validate_batch_view(const char* where, const BatchView& batch);

void validate_batch(const char* where, const int32_t* slots, int32_t n, int32_t max_rows,
                    int32_t pool_slots);
void validate_rows(const char* where, int32_t rows, int32_t n_real, int32_t max_rows);
void validate_layer_index(const char* where, int32_t layer, int32_t layers);
void validate_slot(const char* where, int32_t slot, int32_t pool_slots);
void validate_slot_list(const char* where, const int32_t* slots, int32_t count, int32_t pool_slots);
void validate_accept_lengths(const char* where, const int32_t* accepted, int32_t n, int32_t tokens);
// docs/trees.md, host memory: `parent` [n, tokens], each row a token tree (parent[r][0] = -1, parent[r][t] in
// [-1, t)), refused as "parent[r][t]".
void validate_tree(const char* where, const int32_t* parent, int32_t n, int32_t tokens);
// docs/trees.md, host memory: `accept_index` [n, tokens], each row a path of `tree`'s row (from a child of the
// seed down, -1 after its end), refused as "accept_index[r][i]".
void validate_accept_paths(const char* where, const int32_t* accept_index, const int32_t* tree, int32_t n,
                           int32_t tokens);
// A verify's inputs; q, k and v only when it reads them (fused with the conv it does not).
void validate_layer_inputs(const char* where, const LayerInputs& in, const RoundSpec& spec, bool reads_qkv = true);
// A conv's width (2 to 4), channels and activation.
void validate_conv(const char* where, const ConvShape& conv);
// A conv shape (width 0: none) against the layer shape it convolves for.
void validate_conv_shape(const char* where, const ConvShape& conv, const ModelShape& m);
// A conv's x, weight, bias and output segments, which must tile [0, channels) in order. Fused with the
// verify: no output segments (q, k and v stay in the kernel), and x 16-byte aligned (it moves in
// 16-byte copies).
void validate_conv_inputs(const char* where, const ConvLayerInputs& in, int32_t channels, DType io_dtype,
                          bool fused = false);
void validate_stream(const char* where, const Stream& s, Backend backend);

}  // namespace kdagraph::detail
