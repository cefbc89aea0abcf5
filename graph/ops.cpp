// SPEC §10: the operations of a round over caller-owned buffers. Each validates, then builds its
// kernel's parameters and enqueues them through the backend seam (graph/dispatch.h).
#include "kdagraph/ops.hpp"

#include <string>

#include "graph/dispatch.h"
#include "graph/validate.h"
#include "kernels/accept.h"
#include "kernels/indices.h"
#include "kernels/state_copy.h"
#include "kernels/verify.h"
#include "profiling/nvtx.h"

namespace kdagraph {

StateView state_view(void* base, DType dtype, int32_t layers, int64_t layer_stride, int64_t rows,
                     int64_t row_stride) {
  return StateView{dtype, layers, rows, row_stride, base, layer_stride, nullptr};
}

StateView state_view_table(void* const* layer_table, DType dtype, int32_t layers, int64_t rows,
                           int64_t row_stride) {
  return StateView{dtype, layers, rows, row_stride, nullptr, 0, layer_table};
}

int64_t round_index_elems(int32_t rows, int32_t tokens) {
  require_in_range("round_index_elems", "rows", rows, 0, INT32_MAX);
  require_in_range("round_index_elems", "tokens", tokens, 1, 1024);
  return int64_t(rows) * (5 + tokens);
}

RoundIndices round_indices(int32_t* storage, int32_t rows, int32_t tokens) {
  const int64_t n = rows;
  require(storage != nullptr || round_index_elems(rows, tokens) == 0, "round_indices", "storage", "is null");
  RoundIndices idx;
  idx.capacity = rows;
  idx.tokens = tokens;
  idx.row_slot = storage;
  idx.seed_pool = storage + n;
  idx.seed_scratch = storage + 2 * n;
  idx.seed_accept = storage + 3 * n;
  idx.row_accept = storage + 4 * n;
  idx.write_row = storage + 5 * n;
  return idx;
}

namespace ops {
namespace {

// Checks shared by every operation: the spec, the storage views, and the indices at `rows`.
void validate_round(const char* where, const Stream& s, const RoundSpec& spec, const SlotStorage& storage,
                    const RoundIndices& idx, int32_t rows) {
  detail::validate_spec(where, spec, s.backend);
  detail::validate_storage(where, spec, storage, s.backend);
  detail::validate_indices(where, spec, idx, rows);
}

StateCopyParams copy_params(const RoundSpec& spec, const SlotStorage& st, int32_t count, const int32_t* slot_of,
                            const int32_t* accept_of) {
  StateCopyParams p;
  p.count = count;
  p.slot_of = slot_of;
  p.accept_of = accept_of;
  p.accept_len = st.accept_len;
  p.slots = st.slots;
  p.scratch_steps = st.scratch_steps;
  p.row_elems = int64_t(spec.model.value_heads) * spec.model.head_v * spec.model.head_k;
  p.pool = st.pool;
  p.scratch = st.scratch;
  p.errors = st.errors;
  return p;
}

}  // namespace

void build_indices(const Stream& s, const RoundSpec& spec, const SlotStorage& storage, const BatchView& batch,
                   const RoundIndices& idx) {
  const char* where = "ops::build_indices";
  validate_round(where, s, spec, storage, idx, batch.rows);
  detail::validate_batch_view(where, batch);
  nvtx::Scoped range(nvtx::Range::index_build, batch.rows);
  IndexBuildParams p;
  p.slots = batch.slots;
  p.n_real = batch.n_real;
  p.accept_len = storage.accept_len;
  p.pool_slots = storage.slots;
  p.scratch_steps = storage.scratch_steps;
  p.tokens = spec.tokens;
  p.rows = batch.rows;
  p.errors = storage.errors;
  p.out = idx;
  detail::enqueue<BuildIndicesOp>(s, p);
}

void verify_layer(const Stream& s, const RoundSpec& spec, const SlotStorage& storage, const RoundIndices& idx,
                  int32_t rows, int32_t layer, const LayerInputs& in) {
  const char* where = "ops::verify_layer";
  validate_round(where, s, spec, storage, idx, rows);
  detail::validate_layer_index(where, layer, spec.model.layers);
  detail::validate_layer_inputs(where, in, spec);
  nvtx::Scoped range(nvtx::Range::layer, layer);
  VerifyParams p;
  p.rows = rows;
  p.tokens = spec.tokens;
  p.heads = spec.model.heads;
  p.value_heads = spec.model.value_heads;
  p.head_k = spec.model.head_k;
  p.head_v = spec.model.head_v;
  p.io_dtype = spec.io_dtype;
  p.options = spec.options;
  p.q = in.q;
  p.k = in.k;
  p.v = in.v;
  p.g = in.g;
  p.beta = in.beta;
  p.o = in.o;
  p.A_log = in.A_log;
  p.dt_bias = in.dt_bias;
  p.pool = storage.pool;
  p.scratch = storage.scratch;
  p.layer = layer;
  p.seed_pool = idx.seed_pool;
  p.seed_scratch = idx.seed_scratch;
  p.write_row = idx.write_row;
  p.errors = storage.errors;
  detail::enqueue<VerifyOp>(s, p);
}

void accept(const Stream& s, const RoundSpec& spec, const SlotStorage& storage, const RoundIndices& idx,
            int32_t rows, const int32_t* accepted) {
  const char* where = "ops::accept";
  validate_round(where, s, spec, storage, idx, rows);
  detail::require_buffer(where, "accepted", accepted, alignof(int32_t));
  nvtx::Scoped range(nvtx::Range::accept, rows);
  AcceptParams p;
  p.rows = rows;
  p.tokens = spec.tokens;
  p.sets_slot = mode_policy(spec.mode).accept_sets_slot;
  p.row_slot = idx.row_slot;
  p.accepted = accepted;
  p.accept_len = storage.accept_len;
  p.row_accept = idx.row_accept;
  p.errors = storage.errors;
  detail::enqueue<AcceptOp>(s, p);
}

void commit(const Stream& s, const RoundSpec& spec, const SlotStorage& storage, const RoundIndices& idx,
            int32_t rows) {
  const char* where = "ops::commit";
  validate_round(where, s, spec, storage, idx, rows);
  require(mode_policy(spec.mode).commit, where, "spec.mode",
          std::string("= ") + to_string(spec.mode) + ": this mode has no commit (two-phase has)");
  nvtx::Scoped range(nvtx::Range::commit, rows);
  detail::enqueue<CopyAcceptedStatesOp>(s, copy_params(spec, storage, rows, idx.row_slot, idx.row_accept));
}

void materialize(const Stream& s, const RoundSpec& spec, const SlotStorage& storage, const int32_t* slots,
                 int32_t count) {
  const char* where = "ops::materialize";
  detail::validate_spec(where, spec, s.backend);
  detail::validate_storage(where, spec, storage, s.backend);
  require_in_range(where, "count", count, 0, INT32_MAX);
  if (count == 0) return;
  detail::require_buffer(where, "slots", slots, alignof(int32_t));
  nvtx::Scoped range(nvtx::Range::materialize, count);
  const StateCopyParams p = copy_params(spec, storage, count, slots, nullptr);
  detail::enqueue<CopyAcceptedStatesOp>(s, p);
  detail::enqueue<ResetAcceptLenOp>(s, p);
}

}  // namespace ops
}  // namespace kdagraph
