// The Verifier: an owner of the static buffers of docs/storage.md, docs/indices.md that runs the operations of
// include/kdagraph/ops.hpp on them. Host-data entry points validate and stage their data first, so a
// rejected call changes nothing.
#include "kdagraph/verifier.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "graph/dispatch.h"
#include "graph/nvtx.h"
#include "graph/validate.h"
#include "kernels/layout.h"
#include "kernels/memory.h"
#include "kernels/stream.h"

namespace kdagraph {

using detail::Buffer;

ReplayRing resolved_ring(const ReplayRing& ring, int32_t tokens) {
  ReplayRing r = ring;
  if (r.records == 0) r.records = 3 * tokens;
  if (r.flush_min == -1) r.flush_min = std::min(tokens + 1, r.records - tokens);
  return r;
}

RoundSpec round_spec(const VerifierConfig& c) {
  RoundSpec spec;
  spec.model = c.model;
  spec.tokens = c.tokens;
  spec.io_dtype = c.io_dtype;
  spec.options = c.options;
  spec.rounding = c.pool.rounding;
  spec.mode = c.mode;
  spec.ring = resolved_ring(c.ring, c.tokens);
  spec.conv = c.conv;
  spec.pdl = c.pdl;
  spec.trees = c.trees;
  return spec;
}

bool fuses_conv(const VerifierConfig& c) { return c.conv.width > 0 && c.fuse_conv; }

struct Verifier::Impl {
  VerifierConfig cfg;
  RoundSpec spec;
  StateGeometry geo;
  detail::MappedHostBuffer errors;
  detail::MappedHostBuffer traffic;  // with count_bytes: SlotStorage::bytes_moved
  Buffer pool, scratch, accept_len;
  Buffer ring_kg, ring_u;            // replay mode: the records' k and g, and their u
  Buffer ring_cursor;                // replay mode: ring_pending [P], then ring_start [P]
  Buffer round_parity;               // where needs_round_parity(spec): a conv's halves
  Buffer rounding;                   // where needs_rounding_state: seeds [P] (u64), then counters [P] (u32)
  std::vector<uint64_t> prefills;    // with it: prefills per slot, the place in the slot's seed sequence
  Buffer conv_state, conv_scratch;   // with a conv; the scratch in two-phase only
  int64_t conv_state_stride = 0;     // elements per conv state row
  std::vector<GateParams> gates;     // each layer's, as its last verify named them (replay materialize)
  bool gates_known = false;
  // Replay with the gate in the kernel: when `gates` must stay where they are (Verifier::check_gates).
  // may_pend[slot]: the slot may hold a prefix verified with them, from any verify until a materialize
  // lists the slot or a prefill refills it (accept lengths are device data); `pending` counts them.
  // in_use[layer]: the layer was verified since no slot was pending. gates_captured: a captured graph,
  // which may replay at any time unseen, holds them.
  bool replays_gates = false;
  std::vector<uint8_t> may_pend, in_use;
  int32_t pending = 0;
  bool gates_captured = false;
  Buffer index_storage;  // RoundIndices at max_rows
  Buffer batch_storage;  // n_real, slots, accepted, materialize list
  SlotStorage storage;
  RoundIndices idx;
  int32_t* n_real = nullptr;
  int32_t* slots = nullptr;
  int32_t* accepted = nullptr;
  int32_t* materialize_slots = nullptr;
  Buffer tree_storage;                // trees: parent [N, T], then the accept_index staging [N, T]
  Buffer accept_path;                 // where needs_accept_path(spec): [P, T]
  int32_t* parent = nullptr;
  int32_t* accept_index = nullptr;
  std::vector<int32_t> host_tree;     // [N, T] what set_tree wrote (chains at first): the paths' check
  detail::Uploader uploader;
  int32_t n = 0;

  static const VerifierConfig& validated(const VerifierConfig& c) {
    validate(c);
    return c;
  }

  explicit Impl(const VerifierConfig& c)
      : cfg(validated(c)),
        spec(round_spec(c)),
        geo(make_geometry(c.model, c.pool)),
        errors(c.backend, sizeof(DeviceErrorWord)),
        traffic(c.backend, sizeof(uint64_t)),
        uploader(c.backend, std::max<size_t>(1 + size_t(std::max(c.max_rows, c.pool.slots)),
                                             c.trees ? size_t(c.max_rows) * size_t(c.tokens) : 0) *
                                sizeof(int32_t)) {
    const Backend b = c.backend;
    const DType st = c.pool.state_dtype;
    const size_t es = dtype_size(st);
    const ModePolicy policy = mode_policy(c.mode);
    pool = Buffer(b, size_t(geo.pool_elems()) * es);
    if (policy.per_token_scratch) scratch = Buffer(b, size_t(geo.scratch_elems()) * es);
    accept_len = Buffer(b, size_t(c.pool.slots) * sizeof(int32_t));
    pool.fill(0);
    scratch.fill(0);
    accept_len.fill(0);
    if (policy.ring) allocate_ring();
    if (needs_round_parity(spec)) {
      round_parity = Buffer(b, size_t(c.pool.slots) * sizeof(int32_t));
      round_parity.fill(0);
    }
    if (c.conv.width > 0) allocate_conv();
    if (needs_rounding_state(spec, st)) allocate_rounding();
    gates.resize(size_t(c.model.layers));
    replays_gates = policy.ring && c.options.gate != GateMode::precomputed;
    may_pend.assign(size_t(c.pool.slots), 0);
    in_use.assign(size_t(c.model.layers), 0);

    const size_t N = size_t(c.max_rows), P = size_t(c.pool.slots);
    index_storage = Buffer(b, size_t(round_index_elems(c.max_rows, c.tokens)) * sizeof(int32_t));
    idx = round_indices(index_storage.as<int32_t>(), c.max_rows, c.tokens);
    index_storage.fill(0xff);  // all -1: every row padded

    batch_storage = Buffer(b, (1 + 2 * N + P) * sizeof(int32_t));
    n_real = batch_storage.as<int32_t>();
    slots = n_real + 1;
    accepted = slots + N;
    materialize_slots = accepted + N;
    batch_storage.fill(0);
    if (c.trees) {  // chains until set_tree
      std::vector<int32_t> trees(2 * N * size_t(c.tokens), -1);
      for (size_t e = 0; e < N * size_t(c.tokens); ++e) trees[e] = int32_t(e % size_t(c.tokens)) - 1;
      tree_storage = Buffer::copy_of(b, trees);
      host_tree.assign(trees.begin(), trees.begin() + ptrdiff_t(N) * c.tokens);
      parent = tree_storage.as<int32_t>();
      accept_index = parent + N * size_t(c.tokens);
    }
    if (needs_accept_path(spec)) {
      accept_path = Buffer(b, P * size_t(c.tokens) * sizeof(int32_t));
      accept_path.fill(0xff);
    }

    *static_cast<DeviceErrorWord*>(errors.host()) = DeviceErrorWord{};
    storage.slots = c.pool.slots;
    storage.scratch_steps = c.pool.scratch_steps;
    storage.pool = pool_view(geo, pool.data(), st);
    if (scratch.data() != nullptr) storage.scratch = scratch_view(geo, scratch.data(), st);
    storage.accept_len = accept_len.as<int32_t>();
    storage.round_parity = round_parity.as<int32_t>();
    storage.accept_path = accept_path.as<int32_t>();
    if (rounding.data() != nullptr) {
      storage.rounding_seed = rounding.as<uint64_t>();
      storage.rounding_counter = reinterpret_cast<uint32_t*>(storage.rounding_seed + c.pool.slots);
    }
    storage.errors = static_cast<DeviceErrorWord*>(errors.device());
    if (c.count_bytes) storage.bytes_moved = static_cast<uint64_t*>(traffic.device());
  }

  // Seed `generation` of slot `slot`'s sequence (VerifierConfig::rounding_seed): splitmix64 of the three.
  uint64_t slot_seed(int32_t slot, uint64_t generation) const {
    uint64_t z = cfg.rounding_seed + 0x9e3779b97f4a7c15ull * (uint64_t(slot) + 1) + 0xbf58476d1ce4e5b9ull * generation;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

  // The slots' first seeds and zero counters (docs/low_precision.md).
  void allocate_rounding() {
    const size_t P = size_t(cfg.pool.slots);
    std::vector<uint64_t> words(P + (P + 1) / 2, 0);  // seeds, then the u32 counters two a word
    for (size_t s = 0; s < P; ++s) words[s] = slot_seed(int32_t(s), 0);
    rounding = Buffer::copy_of(cfg.backend, words);
    prefills.assign(P, 0);
  }

  // [TAG_RING_LAYOUT] ring_kg [L, P, R (H K + HV K)] in the io dtype and ring_u [L, P, R HV V] in fp32,
  // rows rounded up to 16 bytes, zeroed; the cursor all 0 (an empty ring).
  void allocate_ring() {
    const Backend b = cfg.backend;
    const int64_t L = cfg.model.layers, P = cfg.pool.slots;
    const int64_t kg_stride = aligned_row_elems(ring_kg_row_elems(spec), cfg.io_dtype);
    const int64_t u_stride = aligned_row_elems(ring_u_row_elems(spec), DType::f32);
    ring_kg = Buffer(b, size_t(L * P * kg_stride) * dtype_size(cfg.io_dtype));
    ring_u = Buffer(b, size_t(L * P * u_stride) * sizeof(float));
    ring_cursor = Buffer(b, size_t(2 * P) * sizeof(int32_t));
    ring_kg.fill(0);
    ring_u.fill(0);
    ring_cursor.fill(0);
    storage.ring_kg = state_view(ring_kg.data(), cfg.io_dtype, cfg.model.layers, P * kg_stride, P, kg_stride);
    storage.ring_u = state_view(ring_u.data(), DType::f32, cfg.model.layers, P * u_stride, P, u_stride);
    storage.ring_pending = ring_cursor.as<int32_t>();
    storage.ring_start = storage.ring_pending + P;
  }

  // [TAG_CONV_LAYOUT] conv state [L, P, 2 (W - 1 + S) columns: two halves] (two-phase: W - 1) and, in
  // two-phase, conv scratch [L, P * S, W - 1 columns], rows rounded up to 16 bytes, zeroed.
  void allocate_conv() {
    const Backend b = cfg.backend;
    const DType io = cfg.io_dtype;
    const size_t es = dtype_size(io);
    const int64_t L = cfg.model.layers, P = cfg.pool.slots, S = cfg.pool.scratch_steps;
    conv_state_stride = aligned_row_elems(conv_state_row_elems(spec, cfg.pool.scratch_steps), io);
    conv_state = Buffer(b, size_t(L * P * conv_state_stride) * es);
    conv_state.fill(0);
    storage.conv_state = state_view(conv_state.data(), io, cfg.model.layers, P * conv_state_stride, P, conv_state_stride);
    if (mode_policy(cfg.mode).conv_offset_window) return;
    const int64_t scratch_stride = aligned_row_elems(conv_scratch_row_elems(spec), io);
    conv_scratch = Buffer(b, size_t(L * P * S * scratch_stride) * es);
    conv_scratch.fill(0);
    storage.conv_scratch =
        state_view(conv_scratch.data(), io, cfg.model.layers, P * S * scratch_stride, P * S, scratch_stride);
  }

  size_t conv_window_bytes() const {
    return size_t(conv_scratch_row_elems(spec)) * dtype_size(cfg.io_dtype);
  }
  // Where layer l's window of `slot` starts in the conv state after a prefill or a materialize: column
  // 0 (in the offset-window modes, half 0's base).
  char* conv_window(int32_t layer, int32_t slot) const {
    const int64_t row = (int64_t(layer) * cfg.pool.slots + slot) * conv_state_stride;
    return conv_state.as<char>() + size_t(row) * dtype_size(cfg.io_dtype);
  }

  // Replay's materialize uses the gate parameters each layer's last verify was given; with the gate in
  // the kernel, every slot may now hold a prefix verified with them.
  void remember_gates(const Stream& s, int32_t layer, const LayerInputs& in) {
    gates[size_t(layer)] = GateParams{in.A_log, in.dt_bias, in.gate_heads};
    gates_known = gates_known || layer == cfg.model.layers - 1;
    if (!replays_gates) return;
    if (pending < cfg.pool.slots) {
      std::fill(may_pend.begin(), may_pend.end(), uint8_t(1));
      pending = cfg.pool.slots;
    }
    in_use[size_t(layer)] = 1;
    gates_captured = gates_captured || detail::is_capturing(s);
  }

  // A materialize or a prefill of `slot` leaves it no pending prefix; with none left, no layer's gate
  // parameters are in use.
  void settle(int32_t slot) {
    if (may_pend[size_t(slot)] == 0) return;
    may_pend[size_t(slot)] = 0;
    if (--pending == 0) std::fill(in_use.begin(), in_use.end(), uint8_t(0));
  }

  // Verifier::check_gates, for the entry point `where`.
  void check_gates(const char* where, int32_t layer, const LayerInputs& in) const {
    if (!replays_gates) return;
    require_in_range(where, "layer", layer, 0, cfg.model.layers - 1);
    const GateParams& was = gates[size_t(layer)];
    if (was.A_log == nullptr || !(in_use[size_t(layer)] || gates_captured)) return;  // no prefix pends on them
    auto same = [&](const char* name, const float* now, const float* then) {
      require(now == then, where, name, [&] {
        return "= " + std::to_string(reinterpret_cast<uintptr_t>(now)) + " for layer " + std::to_string(layer) +
               " differs from " + std::to_string(reinterpret_cast<uintptr_t>(then)) + ", the " + name +
               " a pending replay prefix of that layer was verified with: gate parameters are the layer's "
               "weights and must not change between rounds (" +
               (gates_captured ? "a captured graph holds them for the Verifier's life)"
                               : "to move them, materialize or prefill every slot first)");
      });
    };
    same("A_log", in.A_log, was.A_log);
    same("dt_bias", in.dt_bias, was.dt_bias);
  }

  // While a graph is being captured the batch is data, set before each replay; only the capacity
  // applies. Eagerly, the rows must cover the batch that is set.
  void check_rows(const char* where, const Stream& s, int32_t rows) const {
    if (detail::is_capturing(s)) {
      detail::validate_rows(where, rows, 1, cfg.max_rows);
      return;
    }
    require(n > 0, where, "batch", "is not set: call set_batch first");
    detail::validate_rows(where, rows, n, cfg.max_rows);
  }

  // Host-data entry points stage their data at call time; captured, a replay would repeat stale data.
  // A host array of rows of the current batch: set, and n its size.
  void check_batch_size(const char* where, int32_t rows) const {
    require(n > 0, where, "batch", "is not set: call set_batch first");
    require(rows == n, where, "n",
            [&] { return "= " + std::to_string(rows) + " differs from the batch size " + std::to_string(n) + " of set_batch"; });
  }

  static void require_not_capturing(const char* where, const Stream& s) {
    require(!detail::is_capturing(s), where, "stream", "is capturing a graph; call this between replays instead");
  }

  // Both prefills' checks: a window exactly when there is a conv.
  void check_prefill(const char* where, const void* states, const void* window) const {
    require(states != nullptr, where, "states", "is null");
    if (cfg.conv.width > 0)
      require(window != nullptr, where, "conv_window", "is null: the layers have a conv, whose window a prefill sets");
    else
      require(window == nullptr, where, "conv_window", "is given, but the layers have no conv (conv.width = 0)");
  }

  // Both prefills: pool[l][slot] = states[l] and the conv window of every layer, then
  // accept_len[slot] = 0 (and the round parity 0), enqueued on `s`. `states` and `window` may be host or
  // backend memory.
  void enqueue_copy_in(const Stream& s, int32_t slot, const void* states, const void* window) {
    nvtx::Scoped range(nvtx::Range::prefill, slot);
    const size_t es = dtype_size(cfg.pool.state_dtype), bytes = size_t(geo.slot_elems()) * es;
    for (int32_t l = 0; l < cfg.model.layers; ++l) {
      detail::enqueue_copy(s, pool.as<char>() + geo.pool_offset(l, slot, 0) * es,
                           static_cast<const char*>(states) + size_t(l) * bytes, bytes);
      if (window != nullptr)
        detail::enqueue_copy(s, conv_window(l, slot), static_cast<const char*>(window) + size_t(l) * conv_window_bytes(),
                             conv_window_bytes());
    }
    detail::enqueue_fill(s, accept_len.as<int32_t>() + slot, 0, sizeof(int32_t));
    if (round_parity.data() != nullptr) detail::enqueue_fill(s, round_parity.as<int32_t>() + slot, 0, sizeof(int32_t));
    if (ring_cursor.data() != nullptr) {
      detail::enqueue_fill(s, storage.ring_pending + slot, 0, sizeof(int32_t));
      detail::enqueue_fill(s, storage.ring_start + slot, 0, sizeof(int32_t));
    }
    if (rounding.data() != nullptr) {  // a new request: the next seed of the slot's sequence
      const uint64_t seed = slot_seed(slot, ++prefills[size_t(slot)]);
      uploader.upload(s, storage.rounding_seed + slot, &seed, sizeof seed);
      detail::enqueue_fill(s, storage.rounding_counter + slot, 0, sizeof(uint32_t));
    }
  }
};

Verifier::Verifier(const VerifierConfig& config) : impl_(std::make_unique<Impl>(config)) {}
Verifier::~Verifier() = default;

const VerifierConfig& Verifier::config() const { return impl_->cfg; }
void* Verifier::pool() const { return impl_->pool.data(); }
void* Verifier::scratch() const { return impl_->scratch.data(); }
int32_t* Verifier::accept_len() const { return impl_->accept_len.as<int32_t>(); }
size_t Verifier::slot_state_bytes() const {
  return size_t(impl_->geo.slot_elems()) * dtype_size(impl_->cfg.pool.state_dtype);
}
size_t Verifier::row_stride_bytes() const {
  return size_t(impl_->geo.row_stride()) * dtype_size(impl_->cfg.pool.state_dtype);
}
size_t Verifier::pool_bytes() const { return impl_->pool.bytes(); }
size_t Verifier::scratch_bytes() const { return impl_->scratch.bytes(); }
size_t Verifier::ring_bytes() const {
  return impl_->ring_kg.bytes() + impl_->ring_u.bytes() + impl_->ring_cursor.bytes();
}
void* Verifier::conv_state() const { return impl_->conv_state.data(); }
size_t Verifier::conv_state_bytes() const { return impl_->conv_state.bytes(); }
size_t Verifier::conv_scratch_bytes() const { return impl_->conv_scratch.bytes(); }
size_t Verifier::conv_window_bytes() const { return impl_->conv_window_bytes(); }
int32_t Verifier::batch_size() const { return impl_->n; }
const RoundSpec& Verifier::spec() const { return impl_->spec; }
const SlotStorage& Verifier::storage() const { return impl_->storage; }
const RoundIndices& Verifier::indices() const { return impl_->idx; }
BatchView Verifier::batch_view(int32_t rows) const {
  return BatchView{impl_->slots, impl_->n_real, rows, impl_->parent};
}

Verifier::BatchBuffers Verifier::batch_buffers() const {
  return BatchBuffers{impl_->n_real, impl_->slots, impl_->accepted, impl_->parent, impl_->accept_index};
}

void Verifier::prefill(const Stream& s, int32_t slot, const void* states, const void* conv_window) {
  Impl& m = *impl_;
  const char* where = "Verifier::prefill";
  detail::validate_stream(where, s, m.cfg.backend);
  detail::validate_slot(where, slot, m.cfg.pool.slots);
  m.require_not_capturing(where, s);
  m.check_prefill(where, states, conv_window);
  m.enqueue_copy_in(s, slot, states, conv_window);
  m.settle(slot);
  // The caller's host memory is theirs again on return.
  detail::StreamHandle::view(s).synchronize();
}

void Verifier::enqueue_prefill(const Stream& s, int32_t slot, const void* states, const void* conv_window) {
  Impl& m = *impl_;
  const char* where = "Verifier::enqueue_prefill";
  detail::validate_stream(where, s, m.cfg.backend);
  detail::validate_slot(where, slot, m.cfg.pool.slots);
  m.check_prefill(where, states, conv_window);
  m.enqueue_copy_in(s, slot, states, conv_window);
  m.settle(slot);
}

void Verifier::read_pool(const Stream& s, int32_t slot, void* states) const {
  const Impl& m = *impl_;
  const char* where = "Verifier::read_pool";
  detail::validate_stream(where, s, m.cfg.backend);
  detail::validate_slot(where, slot, m.cfg.pool.slots);
  m.require_not_capturing(where, s);
  require(states != nullptr, where, "states", "is null");
  const size_t bytes = slot_state_bytes();
  const size_t es = dtype_size(m.cfg.pool.state_dtype);
  for (int32_t l = 0; l < m.cfg.model.layers; ++l)
    detail::enqueue_copy(s, static_cast<char*>(states) + size_t(l) * bytes,
                         m.pool.as<const char>() + m.geo.pool_offset(l, slot, 0) * es, bytes);
  detail::StreamHandle::view(s).synchronize();
}

void Verifier::read_conv_window(const Stream& s, int32_t slot, void* conv_window) const {
  const Impl& m = *impl_;
  const char* where = "Verifier::read_conv_window";
  detail::validate_stream(where, s, m.cfg.backend);
  require(m.cfg.conv.width > 0, where, "conv.width", "= 0: the layers have no conv");
  detail::validate_slot(where, slot, m.cfg.pool.slots);
  m.require_not_capturing(where, s);
  require(conv_window != nullptr, where, "conv_window", "is null");
  const size_t bytes = m.conv_window_bytes();
  for (int32_t l = 0; l < m.cfg.model.layers; ++l)
    detail::enqueue_copy(s, static_cast<char*>(conv_window) + size_t(l) * bytes, m.conv_window(l, slot), bytes);
  detail::StreamHandle::view(s).synchronize();
}

void Verifier::set_batch(const Stream& s, const int32_t* slots, int32_t n) {
  Impl& m = *impl_;
  const char* where = "Verifier::set_batch";
  detail::validate_stream(where, s, m.cfg.backend);
  detail::validate_batch(where, slots, n, m.cfg.max_rows, m.cfg.pool.slots);
  m.require_not_capturing(where, s);
  std::string packed(sizeof(int32_t) * (1 + size_t(n)), '\0');
  std::memcpy(packed.data(), &n, sizeof n);
  std::memcpy(packed.data() + sizeof n, slots, sizeof(int32_t) * size_t(n));
  m.uploader.upload(s, m.n_real, packed.data(), packed.size());  // n_real and slots are adjacent
  m.n = n;
}

void Verifier::enqueue_indices(const Stream& s, int32_t rows) {
  Impl& m = *impl_;
  const char* where = "Verifier::enqueue_indices";
  detail::validate_stream(where, s, m.cfg.backend);
  m.check_rows(where, s, rows);
  ops::build_indices(s, m.spec, m.storage, batch_view(rows), m.idx);
}

void Verifier::enqueue_conv(const Stream& s, int32_t layer, const ConvLayerInputs& in, int32_t rows) {
  Impl& m = *impl_;
  const char* where = "Verifier::enqueue_conv";
  detail::validate_stream(where, s, m.cfg.backend);
  m.check_rows(where, s, rows);
  ops::conv_layer(s, m.spec, m.storage, m.idx, rows, layer, in);
}

void Verifier::enqueue_verify(const Stream& s, int32_t layer, const LayerInputs& in, int32_t rows) {
  Impl& m = *impl_;
  const char* where = "Verifier::enqueue_verify";
  detail::validate_stream(where, s, m.cfg.backend);
  m.check_rows(where, s, rows);
  m.check_gates(where, layer, in);
  const BatchView batch = batch_view(rows);  // the index build's: the seed loads before the wait
  ops::verify_layer(s, m.spec, m.storage, m.idx, rows, layer, in, &batch);
  m.remember_gates(s, layer, in);
}

void Verifier::enqueue_conv_verify(const Stream& s, int32_t layer, const ConvLayerInputs& conv, const LayerInputs& in,
                                   int32_t rows) {
  Impl& m = *impl_;
  const char* where = "Verifier::enqueue_conv_verify";
  detail::validate_stream(where, s, m.cfg.backend);
  m.check_rows(where, s, rows);
  m.check_gates(where, layer, in);
  const BatchView batch = batch_view(rows);
  ops::conv_verify_layer(s, m.spec, m.storage, m.idx, rows, layer, conv, in, &batch);
  m.remember_gates(s, layer, in);
}

void Verifier::enqueue_round(const Stream& s, const LayerInputs* layers, int32_t rows) {
  require(impl_->cfg.conv.width == 0, "Verifier::enqueue_round", "convs",
          "are missing: the layers have a conv; pass each layer's conv inputs");
  enqueue_round(s, nullptr, layers, rows);
}

void Verifier::enqueue_round(const Stream& s, const ConvLayerInputs* convs, const LayerInputs* layers, int32_t rows) {
  const char* where = "Verifier::enqueue_round";
  const RoundSpec& spec = impl_->spec;
  require(layers != nullptr, where, "layers", "is null");
  require((convs != nullptr) == (spec.conv.width > 0), where, "convs",
          spec.conv.width > 0 ? "is null, but the layers have a conv" : "are given, but the layers have no conv");
  const bool fused = fuses_conv(impl_->cfg);
  for (int32_t l = 0; l < spec.model.layers; ++l) {
    detail::validate_layer_inputs(where, layers[l], spec, !fused);
    if (convs != nullptr) detail::validate_conv_inputs(where, convs[l], spec.conv.channels, spec.io_dtype, fused);
    impl_->check_gates(where, l, layers[l]);
  }
  detail::cpu_round(s, [&] {
    enqueue_indices(s, rows);
    for (int32_t l = 0; l < spec.model.layers; ++l) {
      if (fused) {
        enqueue_conv_verify(s, l, convs[l], layers[l], rows);
        continue;
      }
      if (convs != nullptr) enqueue_conv(s, l, convs[l], rows);
      enqueue_verify(s, l, layers[l], rows);
    }
  });
}

void Verifier::enqueue_accept(const Stream& s, const int32_t* accepted, int32_t rows) {
  Impl& m = *impl_;
  const char* where = "Verifier::enqueue_accept";
  detail::validate_stream(where, s, m.cfg.backend);
  require(accepted != nullptr, where, "accepted", "is null");
  m.check_rows(where, s, rows);
  ops::accept(s, m.spec, m.storage, m.idx, rows, accepted);
}

void Verifier::enqueue_accept_from_host(const Stream& s, const int32_t* accepted, int32_t n) {
  Impl& m = *impl_;
  const char* where = "Verifier::enqueue_accept_from_host";
  detail::validate_stream(where, s, m.cfg.backend);
  m.check_batch_size(where, n);
  detail::validate_accept_lengths(where, accepted, n, m.cfg.tokens);
  m.require_not_capturing(where, s);
  m.uploader.upload(s, m.accepted, accepted, sizeof(int32_t) * size_t(n));
  enqueue_accept(s, m.accepted, n);
}

void Verifier::set_tree(const Stream& s, const int32_t* parent, int32_t n) {
  Impl& m = *impl_;
  const char* where = "Verifier::set_tree";
  detail::validate_stream(where, s, m.cfg.backend);
  require(m.cfg.trees, where, "parent", "is given, but the Verifier was built without trees (VerifierConfig::trees)");
  m.check_batch_size(where, n);
  detail::validate_tree(where, parent, n, m.cfg.tokens);
  m.require_not_capturing(where, s);
  m.uploader.upload(s, m.parent, parent, sizeof(int32_t) * size_t(n) * size_t(m.cfg.tokens));
  std::copy(parent, parent + size_t(n) * size_t(m.cfg.tokens), m.host_tree.begin());
}

void Verifier::enqueue_accept_path(const Stream& s, const int32_t* accept_index, int32_t rows) {
  Impl& m = *impl_;
  const char* where = "Verifier::enqueue_accept_path";
  detail::validate_stream(where, s, m.cfg.backend);
  require(accept_index != nullptr, where, "accept_index", "is null");
  m.check_rows(where, s, rows);
  ops::accept_path(s, m.spec, m.storage, m.idx, rows, accept_index);
}

void Verifier::enqueue_accept_path_from_host(const Stream& s, const int32_t* accept_index, int32_t n) {
  Impl& m = *impl_;
  const char* where = "Verifier::enqueue_accept_path_from_host";
  detail::validate_stream(where, s, m.cfg.backend);
  require(m.cfg.trees, where, "accept_index", "is given, but the Verifier was built without trees (VerifierConfig::trees)");
  m.check_batch_size(where, n);
  const int32_t T = m.cfg.tokens;
  detail::validate_accept_paths(where, accept_index, m.host_tree.data(), n, T);
  m.require_not_capturing(where, s);
  m.uploader.upload(s, m.accept_index, accept_index, sizeof(int32_t) * size_t(n) * size_t(T));
  enqueue_accept_path(s, m.accept_index, n);
}

void Verifier::enqueue_commit(const Stream& s, int32_t rows) {
  Impl& m = *impl_;
  const char* where = "Verifier::enqueue_commit";
  detail::validate_stream(where, s, m.cfg.backend);
  require(mode_policy(m.cfg.mode).commit, where, "mode",
          [&] { return std::string("= ") + to_string(m.cfg.mode) + ": commit exists only in two-phase mode"; });
  m.check_rows(where, s, rows);
  detail::cpu_round(s, [&] { ops::commit(s, m.spec, m.storage, m.idx, rows); });
}

void Verifier::enqueue_materialize(const Stream& s, const int32_t* slots, int32_t count) {
  Impl& m = *impl_;
  const char* where = "Verifier::enqueue_materialize";
  detail::validate_stream(where, s, m.cfg.backend);
  require_in_range(where, "count", count, 0, m.cfg.pool.slots);
  if (count == 0) return;
  require(slots != nullptr, where, "slots", "is null");
  detail::validate_slot_list(where, slots, count, m.cfg.pool.slots);
  m.require_not_capturing(where, s);
  // In replay mode the pending prefix is replayed with each layer's gate parameters, known once every
  // layer has been verified; before that no round has run, so nothing is pending.
  if (mode_policy(m.cfg.mode).ring && !m.gates_known) return;
  m.uploader.upload(s, m.materialize_slots, slots, sizeof(int32_t) * size_t(count));
  detail::cpu_round(s, [&] { ops::materialize(s, m.spec, m.storage, m.materialize_slots, count, m.gates.data()); });
  for (int32_t i = 0; i < count; ++i) m.settle(slots[i]);
}

void Verifier::check_gates(int32_t layer, const LayerInputs& in) const {
  impl_->check_gates("Verifier::check_gates", layer, in);
}

DeviceErrorWord Verifier::device_errors() const {
  return read_device_errors(static_cast<const DeviceErrorWord*>(impl_->errors.host()));
}

void Verifier::clear_device_errors() { kdagraph::clear_device_errors(static_cast<DeviceErrorWord*>(impl_->errors.host())); }

uint64_t Verifier::bytes_moved() const {
  if (!impl_->cfg.count_bytes) return 0;
  return __atomic_load_n(static_cast<const uint64_t*>(impl_->traffic.host()), __ATOMIC_ACQUIRE);
}

void Verifier::clear_bytes_moved() {
  __atomic_store_n(static_cast<uint64_t*>(impl_->traffic.host()), 0, __ATOMIC_RELEASE);
}

}  // namespace kdagraph
