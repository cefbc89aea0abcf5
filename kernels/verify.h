// docs/math.md, docs/modes.md: the T-token verify of one KDA layer for a batch of N rows.
//
// Each (row, value head) starts from its seed (pool[slot] or a scratch row, as RoundIndices says),
// applies the update for t = 1..T, writes every post-state to scratch row write_row[n][t] (a negative
// row: not written) and every output o_t. Padded rows read no state, write no state and output zeros
// (the CUDA kernel's small tiles may start reading a row's inputs before its indices say it is padded).
//
// Replay mode (the corrections ring, [TAG_RING_LAYOUT]): a row seeds from its checkpoint, pool[slot],
// first folds its slot's pending records into it (per record S = a S, then S = S + k u: the decay and
// rank-1 arithmetic of the update, no projection, no output), writes the folded state back to the
// checkpoint when the round flushes, then verifies its T new tokens from it and appends their records
// (k and g as given, u as computed) after the pending ones. Materialize in replay mode is the same
// kernel over a list of slots with no new tokens, always flushing.
//
// With VerifyParams::conv (docs/conv.md, one kernel per layer) the new tokens' q, k and v come from the
// short convolution of x, computed by the verify itself with the functions of kernels/conv.h.
#pragma once

#include <cstdint>
#include <string>

#include "kdagraph/types.hpp"
#include "kernels/conv.h"
#include "kernels/device_error.h"
#include "kernels/indices.h"
#include "kernels/layout.h"
#include "kernels/rounding.h"
#include "kernels/tree.h"

namespace kdagraph {

struct VerifyParams {
  int32_t rows = 0;         // N
  int32_t tokens = 0;       // T new tokens per row (0: materialize, replay only)
  int32_t heads = 0;        // H
  int32_t value_heads = 0;  // HV
  int32_t head_k = 0;       // K
  int32_t head_v = 0;       // V
  DType io_dtype = DType::f32;  // of q, k, v, g, beta, o and the ring's k and g; the state dtype is pool.dtype
  VerifyOptions options;

  const void* q = nullptr;     // [N, T, H, K]
  const void* k = nullptr;     // [N, T, H, K]
  const void* v = nullptr;     // [N, T, HV, V]
  const void* g = nullptr;     // [N, T, HV, K] log decay, or raw gate input
  const void* beta = nullptr;  // [N, T, HV]
  void* o = nullptr;           // [N, T, HV, V]
  const float* A_log = nullptr;    // [gate_heads], gate in kernel only; null: zeros
  const float* dt_bias = nullptr;  // [gate_heads * K], gate in kernel only; null: zeros
  int32_t gate_heads = 0;          // HV or H (LayerInputs::gate_heads); 0: HV
  bool gate_f32 = false;           // g and beta in fp32, not the io dtype (LayerInputs::gate_f32)
  // Element strides of q, k and v (LayerInputs); 0: the compact layout's.
  InputStrides q_strides, k_strides, v_strides;

  // Layer `layer` of the views: seeds come from pool row seed_pool[n] or scratch row seed_scratch[n],
  // post-states go to scratch rows write_row[n][t] when writes_scratch. A row outside its view is not
  // read or written, and recorded.
  StateView pool;
  StateView scratch;
  int32_t layer = 0;
  bool writes_scratch = true;             // ModePolicy::per_token_scratch
  const int32_t* seed_pool = nullptr;     // [N], or null: no row seeds from the pool
  const int32_t* seed_scratch = nullptr;  // [N], or null: no row seeds from scratch
  const int32_t* write_row = nullptr;     // [N, T]
  // Optional [N], FlashInfer's spec decode (docs/python.md): row n seeds from scratch row
  // write_row[n][seed_token[n] - 1], its own post-state row of that token, a length outside [1, T]
  // clamped and recorded. seed_pool and seed_scratch are then not read.
  const int32_t* seed_token = nullptr;
  DeviceErrorWord* errors = nullptr;      // what the device finds invalid is recorded here
  // docs/low_precision.md: stochastic rounding of the state stores (a 16-bit pool dtype), the draws keyed by the
  // seed and store counter of each row's slot: row_slot[n] (RoundIndices::row_slot), or slot_list[n]
  // when materializing. Round to nearest: none of them read.
  Rounding rounding = Rounding::nearest;
  const int32_t* row_slot = nullptr;
  const uint64_t* rounding_seed = nullptr;
  const uint32_t* rounding_counter = nullptr;
  unsigned long long* bytes_moved = nullptr;  // SlotStorage::bytes_moved: state and record bytes moved
  // docs/trees.md, optional [N, T]: the new tokens of row n form a tree, token t updating the post-state of
  // token parent[n][t] (-1: the seed, after any replay) instead of token t - 1's; a parent outside
  // [-1, t) is read as t - 1 and recorded (kernels/tree.h). Null: the chain. A chain given as a tree
  // runs exactly as the chain: a state is kept aside only where a later token branches from it.
  const int32_t* parent = nullptr;

  // Replay mode [TAG_RING_LAYOUT]: row n folds ring_pending[n] records of its slot's ring rows from
  // record ring_start[n] on, writes the state back when ring_flush[n], and appends its new tokens'
  // records after them. Null ring_pending: no ring.
  StateView ring_kg;
  StateView ring_u;
  int32_t ring_records = 0;  // R
  const int32_t* ring_pending = nullptr;
  const int32_t* ring_start = nullptr;
  const int32_t* ring_flush = nullptr;
  // Materialize in replay mode: row n is slot slot_list[n] (outside [0, slots): skipped, recorded), which
  // folds slot_pending[slot] records from slot_start[slot] and writes the state back; tokens is 0.
  const int32_t* slot_list = nullptr;
  int32_t slots = 0;
  const int32_t* slot_pending = nullptr;
  const int32_t* slot_start = nullptr;

  // docs/conv.md, the short convolution fused in (one kernel per layer): with conv.width > 0 each new
  // token's q, k and v are the conv of conv.x over its row's conv history, rounded to the io dtype as the
  // conv operation writes them, and q, k and v above are not read. conv.rows, tokens, layer, errors and
  // index arrays are this verify's; its output segments are not used. Layouts halves (the owner of a
  // channel writes its history to the half the row does not read) and fixed_window (conv scratch).
  ConvParams conv;
  // docs/graphs.md: with pre_round.slots set (the batch the index build reads, and the slots' accept lengths
  // and parities), a block loads its seed tile and conv window before it waits on the previous kernel,
  // from where resolve_row and row_indices (kernels/indices.h) predict them; after the wait the index
  // arrays confirm them (a row they make padding discards the loads). Unset: every read after the wait.
  IndexBuildParams pre_round;
};

// The gate parameters' head of value head h (VerifyParams::gate_heads: HV, or H).
KDA_HD int32_t gate_head(const VerifyParams& p, int32_t h) {
  return p.gate_heads > 0 && p.gate_heads != p.value_heads ? h / (p.value_heads / p.gate_heads) : h;
}

// Element offset of head `head` of token t of row n in an input [rows, tokens, heads, dim] with strides
// `s` (a stride of 0: the compact one).
KDA_HD int64_t input_offset(const InputStrides& s, int32_t tokens, int32_t heads, int32_t dim, int64_t n, int64_t t,
                            int64_t head) {
  const int64_t head_stride = s.head != 0 ? s.head : dim;
  const int64_t token_stride = s.token != 0 ? s.token : int64_t(heads) * dim;
  const int64_t row_stride = s.row != 0 ? s.row : int64_t(tokens) * heads * dim;
  return n * row_stride + t * token_stride + head * head_stride;
}
KDA_HD int64_t q_offset(const VerifyParams& p, int64_t n, int64_t t, int32_t hq) {
  return input_offset(p.q_strides, p.tokens, p.heads, p.head_k, n, t, hq);
}
KDA_HD int64_t k_offset(const VerifyParams& p, int64_t n, int64_t t, int32_t hq) {
  return input_offset(p.k_strides, p.tokens, p.heads, p.head_k, n, t, hq);
}
KDA_HD int64_t v_offset(const VerifyParams& p, int64_t n, int64_t t, int32_t h) {
  return input_offset(p.v_strides, p.tokens, p.value_heads, p.head_v, n, t, h);
}

// What row n of a launch does, decided once per row by the CPU and the CUDA kernel alike.
struct VerifyRow {
  int32_t seed_pool = -1;     // pool row of the seed, or -1
  int32_t seed_scratch = -1;  // scratch row of the seed, or -1 (both -1: a padded row)
  int32_t replay = 0;         // ring records to fold first
  int32_t ring_start = 0;     // the first of them, then ring_record(ring_start, i, R) ...
  bool records = false;       // ... and the new tokens' records after them (a ring row)
  bool flush = false;         // the folded state is written back to the checkpoint
  KDA_HD bool padded() const { return seed_pool < 0 && seed_scratch < 0; }
};

KDA_HD VerifyRow verify_row(const VerifyParams& p, int32_t n, bool report) {
  VerifyRow r;
  if (p.slot_list != nullptr) {
    const int32_t slot = checked_slot(p.slot_list, n, p.slots, p.errors, report);
    if (slot < 0) return r;
    const int32_t pending = checked_ring(p.slot_pending[slot], p.ring_records, slot, p.errors, report);
    if (pending == 0) return r;  // nothing pending: the checkpoint holds the state already
    r.seed_pool = slot;
    r.replay = pending;
    r.ring_start = checked_ring(p.slot_start[slot], p.ring_records - 1, slot, p.errors, report);
    r.flush = true;
    return r;
  }
  if (p.seed_token != nullptr) {
    const int32_t a = p.seed_token[n], clamped = a < 1 ? 1 : (a > p.tokens ? p.tokens : a);
    r.seed_scratch = p.write_row[int64_t(n) * p.tokens + clamped - 1];
    if (report && a != clamped && r.seed_scratch >= 0)  // a padded row's length is never read
      record_device_error(p.errors, DeviceErrorCode::accept_out_of_range, n, a);
  } else {
    r.seed_pool = p.seed_pool != nullptr ? p.seed_pool[n] : -1;
    r.seed_scratch = p.seed_scratch != nullptr ? p.seed_scratch[n] : -1;
  }
  if (r.seed_pool >= p.pool.rows || r.seed_scratch >= p.scratch.rows) {  // outside its view: padding
    if (report)
      record_device_error(p.errors, DeviceErrorCode::slot_out_of_range, n,
                          r.seed_pool >= p.pool.rows ? r.seed_pool : r.seed_scratch);
    return VerifyRow{};
  }
  if (p.ring_pending != nullptr && r.seed_pool >= 0) {
    // Built by the index build, but in memory the caller owns: a cursor outside the ring is clamped
    // (as the build clamps the slot's) and recorded.
    r.replay = checked_ring(p.ring_pending[n], p.ring_records - p.tokens, n, p.errors, report);
    r.ring_start = checked_ring(p.ring_start[n], p.ring_records - 1, n, p.errors, report);
    r.flush = p.ring_flush[n] != 0 && r.replay > 0;
    r.records = true;
  }
  return r;
}

// Row n's seed as predicted from pre-round data (p.pre_round, docs/graphs.md), for the loads a kernel issues
// before its grid dependency wait; nothing is recorded (the index build records). padded() when the
// prediction names no row, or one outside its view.
KDA_HD VerifyRow predicted_row(const VerifyParams& p, const RowIndices& i) {
  VerifyRow r;
  r.seed_pool = i.seed_pool;
  r.seed_scratch = i.seed_scratch;
  if (r.seed_pool >= p.pool.rows || r.seed_scratch >= p.scratch.rows) return VerifyRow{};
  return r;
}

// Scratch row the post-state of new token t of row n goes to, or -1: not written (no scratch in this
// mode, a negative entry, or one outside the scratch view, which is recorded when `report`).
KDA_HD int32_t post_state_row(const VerifyParams& p, int32_t n, int32_t t, bool report) {
  if (!p.writes_scratch) return -1;
  const int32_t row = p.write_row[int64_t(n) * p.tokens + t];
  if (row >= p.scratch.rows) {
    if (report) record_device_error(p.errors, DeviceErrorCode::slot_out_of_range, n, row);
    return -1;
  }
  return row < 0 ? -1 : row;
}

// The layer bases row `r` reads and writes, checked: `ok` is false (recorded when `report`) when one it
// needs is invalid (a bad entry in a device-resident table), and the row is then treated as padding.
struct VerifyBases {
  char* pool = nullptr;
  char* scratch = nullptr;
  char* ring_kg = nullptr;
  char* ring_u = nullptr;
  bool ok = false;
};

KDA_HD VerifyBases verify_bases(const VerifyParams& p, const VerifyRow& r, int32_t n, bool report) {
  VerifyBases b;
  b.pool = layer_base(p.pool, p.layer);
  b.scratch = layer_base(p.scratch, p.layer);
  b.ring_kg = layer_base(p.ring_kg, p.layer);
  b.ring_u = layer_base(p.ring_u, p.layer);
  const bool needs_scratch = r.seed_scratch >= 0 || (p.writes_scratch && p.tokens > 0);
  const bool needs_ring = r.replay > 0 || r.records;
  b.ok = (r.seed_pool < 0 || b.pool != nullptr) && (!needs_scratch || b.scratch != nullptr) &&
         (!needs_ring || (b.ring_kg != nullptr && b.ring_u != nullptr));
  if (!b.ok && report) record_device_error(p.errors, DeviceErrorCode::layer_base_invalid, n, p.layer);
  return b;
}

// Where the seed of row `r` starts.
template <class StateT>
KDA_HD const StateT* verify_seed(const VerifyParams& p, const VerifyRow& r, const VerifyBases& b) {
  return reinterpret_cast<const StateT*>(r.seed_pool >= 0 ? state_row(b.pool, p.pool, r.seed_pool)
                                                          : state_row(b.scratch, p.scratch, r.seed_scratch));
}

// The draws of row n's stores to value head h's state (docs/low_precision.md), the store left to set: none (round to
// nearest) unless the rounding is stochastic into a 16-bit state. Called for a real row only.
KDA_HD math::StoreDraws row_store_draws(const VerifyParams& p, int32_t n, int32_t h) {
  if (p.rounding != Rounding::stochastic || p.pool.dtype == DType::f32) return math::StoreDraws{};
  const int32_t slot = p.slot_list != nullptr ? p.slot_list[n] : p.row_slot[n];
  return math::store_draws(true, p.rounding_seed[slot], p.rounding_counter[slot], p.layer, h, 0);
}

// The same draws for one store: a new token's post-state (t), or the flush of the checkpoint.
KDA_HD math::StoreDraws for_store(math::StoreDraws d, uint32_t store) {
  d.store = store;
  return d;
}
KDA_HD uint32_t flush_store(const VerifyParams& p) {
  return p.slot_list != nullptr ? math::kStoreMaterialize : math::kStoreFlush;
}

// The (io, state) dtype pairs the CUDA verify is built for (each pair is a set of kernels, and the build's
// time is CI's budget): an fp32 state with any io, a 16-bit state with fp32 io or io of its own dtype;
// stochastic rounding with io of the state's dtype. The CPU backend has every pair.
constexpr bool verify_cuda_dtypes(DType io, DType state) {
  return state == DType::f32 || io == DType::f32 || io == state;
}
constexpr bool verify_cuda_stochastic(DType io, DType state) { return state != DType::f32 && io == state; }

// Host backend: both cores over the independent (row, head) units. Runs now.
void verify_cpu(const VerifyParams& p);

// [TAG_VERIFY_SHAPES] Which of the library's tiles the CUDA verify launches for `units` (row, value head)
// pairs on a device of `multiprocessors` SMs (kernels/verify_shapes.cuh): wide, a block a head, once
// there are heads enough for two blocks an SM; narrow, several blocks a head, below, so a small batch
// still spreads over the device. Both compute the same bits, so a bucket's graph and an eager call of
// fewer rows agree whichever each takes.
enum class VerifyTiling { narrow, wide };
inline constexpr int64_t kWideTileUnitsPerSm = 2;
inline VerifyTiling verify_tiling(int64_t units, int32_t multiprocessors) {
  return units >= kWideTileUnitsPerSm * multiprocessors ? VerifyTiling::wide : VerifyTiling::narrow;
}

}  // namespace kdagraph

#if defined(KDAGRAPH_WITH_CUDA) || defined(KDAGRAPH_SIMT)  // SIMT: simt/ runs the launchers on the CPU
#include <cuda_runtime_api.h>

#include "kernels/launch.h"

namespace kdagraph {
// Head dims the CUDA kernel is built for (docs/math.md: at least K = V = 128 and 64).
bool verify_cuda_supports(int32_t head_k, int32_t head_v);
// Enqueues the verify as `on` says; allocates nothing, never synchronizes. Throws InvalidArgument, naming
// the check and the value, for parameters the kernel is not built for.
cudaError_t launch_verify(const VerifyParams& p, Launch on);
}  // namespace kdagraph
#endif

namespace kdagraph {
struct VerifyOp {
  using Params = VerifyParams;
  static constexpr const char* kName = "verify";
  static void cpu(const Params& p) { verify_cpu(p); }
#if defined(KDAGRAPH_WITH_CUDA) || defined(KDAGRAPH_SIMT)
  static cudaError_t cuda(const Params& p, Launch on) { return launch_verify(p, on); }
#endif
  static std::string shape(const Params& p) {
    return "layer=" + std::to_string(p.layer) + " rows=" + std::to_string(p.rows) + " T=" + std::to_string(p.tokens) +
           " H=" + std::to_string(p.heads) + " HV=" + std::to_string(p.value_heads) + " K=" + std::to_string(p.head_k) +
           " V=" + std::to_string(p.head_v);
  }
};
}  // namespace kdagraph
