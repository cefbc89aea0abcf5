// docs/ops.md: the kernels' parameters of the operations over caller-owned buffers (kdagraph/ops.hpp), built
// from arguments the operation has validated: graph/ops.cpp enqueues them; the verify sweep
// (profiling/bench_verify_sweep.cu) and tests/simt/verify_family_simt_test.cpp launch the kernel family's
// other members on the very parameters a round's verify gets. Host code; nothing here checks.
#pragma once

#include <cstdint>

#include "kdagraph/ops.hpp"
#include "kernels/conv.h"
#include "kernels/indices.h"
#include "kernels/state_copy.h"
#include "kernels/verify.h"

namespace kdagraph::detail {

// A verify of `rows` rows of layer `layer` over the inputs `in`: its shape and inputs, no storage.
VerifyParams verify_params(const RoundSpec& spec, int32_t rows, int32_t layer, const LayerInputs& in);
// The verify of one layer of `rows` rows over a Verifier-style storage, without its indices (and, with
// `in` left empty, without its inputs: materialize's replay).
VerifyParams layer_params(const RoundSpec& spec, const SlotStorage& st, int32_t rows, int32_t layer,
                          const LayerInputs& in = LayerInputs{});
// The accepted-state copies of `count` entries over every layer (commit, materialize).
StateCopyParams copy_params(const RoundSpec& spec, const SlotStorage& st, int32_t count, const int32_t* slot_of,
                            const int32_t* accept_of);
// The conv's parameters shared by the round's conv and the standalone short_conv.
ConvParams conv_params(const ConvShape& shape, DType io_dtype, int32_t rows, int32_t tokens, const ConvLayerInputs& in);
// The conv window moves of `count` entries over every layer: from the conv scratch (commit) or within
// the conv state (materialize).
ConvWindowParams window_params(const RoundSpec& spec, const SlotStorage& st, int32_t count, const int32_t* slot_of,
                               const int32_t* accept_of, bool from_scratch);
// What the index build reads for `batch` (its outputs unset): the build's parameters, and a verify's
// pre-round data (VerifyParams::pre_round).
IndexBuildParams index_params(const RoundSpec& spec, const SlotStorage& storage, const BatchView& batch);
// A round's verify of layer `layer` with its inputs and the round's indices; with `batch`, the pre-round
// data its early loads follow (docs/graphs.md).
VerifyParams round_verify_params(const RoundSpec& spec, const SlotStorage& storage, const RoundIndices& idx,
                                 int32_t rows, int32_t layer, const LayerInputs& in, const BatchView* batch);
// A round's conv of layer `layer` over the round's indices, its outputs those of `in`.
ConvParams round_conv_params(const RoundSpec& spec, const SlotStorage& storage, const RoundIndices& idx,
                             int32_t rows, int32_t layer, const ConvLayerInputs& in);
// The verify of layer `layer` with the short conv fused in (ops::conv_verify_layer).
VerifyParams conv_verify_params(const RoundSpec& spec, const SlotStorage& storage, const RoundIndices& idx,
                                int32_t rows, int32_t layer, const ConvLayerInputs& conv, const LayerInputs& in,
                                const BatchView* batch);

}  // namespace kdagraph::detail
