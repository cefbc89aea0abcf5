// The Verifier: static buffers of SPEC §2 and §4, and the per-round enqueues of SPEC §3 on either
// backend. Every enqueue validates on the host first, so a rejected call changes nothing.
#include "kdagraph/verifier.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>

#include "graph/cpu_capture.h"
#include "graph/validate.h"
#include "kernels/accept.h"
#include "kernels/cuda_check.h"
#include "kernels/indices.h"
#include "kernels/layout.h"
#include "kernels/memory.h"
#include "kernels/state_copy.h"
#include "kernels/verify.h"
#include "profiling/nvtx.h"

namespace kdagraph {

using detail::Buffer;

#if defined(KDAGRAPH_WITH_CUDA)
namespace {

// Host-to-device uploads of small per-round data (the batch, a slot list) without waiting for the
// stream: a ring of pinned staging entries, each reused only after the copy that last read it ran.
// The host waits only if it is a whole ring of uploads ahead of the device.
class UploadRing {
 public:
  static constexpr int kEntries = 8;

  explicit UploadRing(size_t entry_bytes) : entry_bytes_(entry_bytes) {
    KDA_CUDA_CHECK(cudaHostAlloc(&host_, entry_bytes * kEntries, cudaHostAllocDefault));
    for (auto& e : events_) KDA_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  ~UploadRing() {
    for (auto& e : events_) KDA_CUDA_CHECK_NOTHROW(cudaEventDestroy(e));
    KDA_CUDA_CHECK_NOTHROW(cudaFreeHost(host_));
  }
  // Owns pinned memory and events that must be released exactly once.
  UploadRing(const UploadRing&) = delete;
  UploadRing& operator=(const UploadRing&) = delete;

  void upload(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
    const int i = next_;
    next_ = (next_ + 1) % kEntries;
    KDA_CUDA_CHECK(cudaEventSynchronize(events_[i]));
    char* entry = static_cast<char*>(host_) + size_t(i) * entry_bytes_;
    std::memcpy(entry, src, bytes);
    KDA_CUDA_CHECK(cudaMemcpyAsync(dst, entry, bytes, cudaMemcpyHostToDevice, stream));
    KDA_CUDA_CHECK(cudaEventRecord(events_[i], stream));
  }

 private:
  size_t entry_bytes_;
  void* host_ = nullptr;
  std::array<cudaEvent_t, kEntries> events_{};
  int next_ = 0;
};

}  // namespace
#endif

struct Verifier::Impl {
  VerifierConfig cfg;
  detail::MappedHostBuffer errors;
  StateGeometry geo;
  Buffer pool, scratch, accept_len;
  Buffer index_storage;  // RoundIndices at max_rows
  Buffer batch_storage;  // n_real, slots, accepted, row_accept, materialize list
  RoundIndices idx;
  int32_t* n_real = nullptr;
  int32_t* slots = nullptr;
  int32_t* accepted = nullptr;
  int32_t* row_accept = nullptr;
  int32_t* materialize_slots = nullptr;
  int32_t n = 0;
#if defined(KDAGRAPH_WITH_CUDA)
  std::unique_ptr<UploadRing> uploads;
#endif

  static const VerifierConfig& validated(const VerifierConfig& c) {
    validate(c);
    return c;
  }

  explicit Impl(const VerifierConfig& c)
      : cfg(validated(c)), errors(c.backend, sizeof(DeviceErrorWord)) {
    const Backend b = c.backend;
    geo = StateGeometry{c.model.layers, c.pool.slots, c.pool.scratch_steps,
                        c.model.value_heads, c.model.head_v, c.model.head_k};
    const size_t es = dtype_size(c.pool.state_dtype);
    pool = Buffer(b, size_t(geo.pool_elems()) * es);
    scratch = Buffer(b, size_t(geo.scratch_elems()) * es);
    accept_len = Buffer(b, size_t(c.pool.slots) * sizeof(int32_t));
    detail::fill_bytes(b, pool.data(), 0, pool.bytes());
    detail::fill_bytes(b, scratch.data(), 0, scratch.bytes());
    detail::fill_bytes(b, accept_len.data(), 0, accept_len.bytes());

    const size_t N = size_t(c.max_rows), T = size_t(c.tokens), P = size_t(c.pool.slots);
    index_storage = Buffer(b, (4 * N + N * T) * sizeof(int32_t));
    int32_t* ix = index_storage.as<int32_t>();
    idx = RoundIndices{ix, ix + N, ix + 2 * N, ix + 3 * N, ix + 4 * N};
    detail::fill_bytes(b, ix, 0xff, index_storage.bytes());  // all -1: every row padded

    batch_storage = Buffer(b, (1 + 3 * N + P) * sizeof(int32_t));
    n_real = batch_storage.as<int32_t>();
    slots = n_real + 1;
    accepted = slots + N;
    row_accept = accepted + N;
    materialize_slots = row_accept + N;
    detail::fill_bytes(b, batch_storage.data(), 0, batch_storage.bytes());

    *static_cast<DeviceErrorWord*>(errors.host()) = DeviceErrorWord{};
#if defined(KDAGRAPH_WITH_CUDA)
    if (b == Backend::cuda) uploads = std::make_unique<UploadRing>((1 + std::max(N, P)) * sizeof(int32_t));
#endif
  }

  DeviceErrorWord* device_errors() const { return static_cast<DeviceErrorWord*>(errors.device()); }

  // Copies small host data into backend memory in stream order.
  void upload(const Stream& s, void* dst, const void* src, size_t bytes) {
    if (cfg.backend == Backend::cpu) {
      detail::cpu_submit([dst, src_copy = std::string(static_cast<const char*>(src), bytes)] {
        std::memcpy(dst, src_copy.data(), src_copy.size());
      });
      return;
    }
#if defined(KDAGRAPH_WITH_CUDA)
    uploads->upload(dst, src, bytes, s.stream);
#else
    (void)s;
#endif
  }

  // While a graph is being captured the batch is data, set before each replay; only the capacity
  // applies. Eagerly, the rows must cover the batch that is set.
  void check_rows(const char* where, const Stream& s, int32_t rows) const {
    if (capturing(s)) {
      detail::validate_rows(where, rows, 1, cfg.max_rows);
      return;
    }
    require(n > 0, where, "batch", "is not set: call set_batch first");
    detail::validate_rows(where, rows, n, cfg.max_rows);
  }

  void enqueue_copy_in(const Stream& s, int32_t slot, const void* states);

  // Host-data entry points stage their data at call time; captured, a replay would repeat stale data.
  static void require_not_capturing(const char* where, const Stream& s) {
    require(!capturing(s), where, "stream", "is capturing a graph; call this between replays instead");
  }

  static bool capturing(const Stream& s) {
    if (s.backend == Backend::cpu) return detail::cpu_capture_active();
#if defined(KDAGRAPH_WITH_CUDA)
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    KDA_CUDA_CHECK(cudaStreamIsCapturing(s.stream, &status));
    return status == cudaStreamCaptureStatusActive;
#else
    return false;
#endif
  }

  std::string shape(int32_t rows) const {
    return "rows=" + std::to_string(rows) + " T=" + std::to_string(cfg.tokens) +
           " H=" + std::to_string(cfg.model.heads) + " HV=" + std::to_string(cfg.model.value_heads) +
           " K=" + std::to_string(cfg.model.head_k) + " V=" + std::to_string(cfg.model.head_v);
  }

  StateCopyParams copy_params(int32_t count, const int32_t* slot_of, const int32_t* accept_of) const {
    StateCopyParams p;
    p.count = count;
    p.slot_of = slot_of;
    p.accept_of = accept_of;
    p.accept_len = accept_len.as<int32_t>();
    p.geometry = geo;
    p.state_dtype = cfg.pool.state_dtype;
    p.pool = pool.data();
    p.scratch = scratch.data();
    p.errors = device_errors();
    return p;
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
size_t Verifier::pool_bytes() const { return impl_->pool.bytes(); }
size_t Verifier::scratch_bytes() const { return impl_->scratch.bytes(); }
int32_t Verifier::batch_size() const { return impl_->n; }

Verifier::BatchBuffers Verifier::batch_buffers() const {
  return BatchBuffers{impl_->n_real, impl_->slots, impl_->accepted};
}

// Both prefills: pool[l][slot] = states[l] for every layer, then accept_len[slot] = 0, enqueued on `s`.
// `states` may be host or backend memory (the copy's direction comes from the pointer).
void Verifier::Impl::enqueue_copy_in(const Stream& s, int32_t slot, const void* states) {
  nvtx::Scoped range(nvtx::Range::prefill, slot);
  const size_t es = dtype_size(cfg.pool.state_dtype), bytes = size_t(geo.slot_elems()) * es;
  char* dst = static_cast<char*>(pool.data());
  const char* src = static_cast<const char*>(states);
  int32_t* accept = accept_len.as<int32_t>() + slot;
  const int32_t layers = cfg.model.layers;
  const StateGeometry g = geo;
  if (cfg.backend == Backend::cpu) {
    detail::cpu_submit([=] {
      for (int32_t l = 0; l < layers; ++l)
        std::memcpy(dst + g.pool_offset(l, slot, 0) * es, src + size_t(l) * bytes, bytes);
      *accept = 0;
    });
    return;
  }
#if defined(KDAGRAPH_WITH_CUDA)
  for (int32_t l = 0; l < layers; ++l)
    KDA_CUDA_CHECK(cudaMemcpyAsync(dst + g.pool_offset(l, slot, 0) * es, src + size_t(l) * bytes, bytes,
                                   cudaMemcpyDefault, s.stream));
  KDA_CUDA_CHECK(cudaMemsetAsync(accept, 0, sizeof(int32_t), s.stream));
#else
  (void)s;
#endif
}

void Verifier::prefill(const Stream& s, int32_t slot, const void* states) {
  Impl& m = *impl_;
  detail::validate_stream("Verifier::prefill", s, m.cfg.backend);
  detail::validate_slot("Verifier::prefill", slot, m.cfg.pool.slots);
  m.require_not_capturing("Verifier::prefill", s);
  require(states != nullptr, "Verifier::prefill", "states", "is null");
  m.enqueue_copy_in(s, slot, states);
#if defined(KDAGRAPH_WITH_CUDA)
  // The caller's host memory is theirs again on return.
  if (m.cfg.backend == Backend::cuda) KDA_CUDA_CHECK(cudaStreamSynchronize(s.stream));
#endif
}

void Verifier::enqueue_prefill(const Stream& s, int32_t slot, const void* states) {
  Impl& m = *impl_;
  const char* where = "Verifier::enqueue_prefill";
  detail::validate_stream(where, s, m.cfg.backend);
  detail::validate_slot(where, slot, m.cfg.pool.slots);
  require(states != nullptr, where, "states", "is null");
  m.enqueue_copy_in(s, slot, states);
}

void Verifier::read_pool(const Stream& s, int32_t slot, void* states) const {
  const Impl& m = *impl_;
  detail::validate_stream("Verifier::read_pool", s, m.cfg.backend);
  detail::validate_slot("Verifier::read_pool", slot, m.cfg.pool.slots);
  m.require_not_capturing("Verifier::read_pool", s);
  require(states != nullptr, "Verifier::read_pool", "states", "is null");
  const size_t bytes = slot_state_bytes();
  const size_t es = dtype_size(m.cfg.pool.state_dtype);
  for (int32_t l = 0; l < m.cfg.model.layers; ++l)
    detail::copy_to_host(m.cfg.backend, static_cast<char*>(states) + size_t(l) * bytes,
                         static_cast<const char*>(m.pool.data()) + m.geo.pool_offset(l, slot, 0) * es,
                         bytes, s.stream);
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
  m.upload(s, m.n_real, packed.data(), packed.size());  // n_real and slots are adjacent
  m.n = n;
}

void Verifier::enqueue_indices(const Stream& s, int32_t rows) {
  Impl& m = *impl_;
  const char* where = "Verifier::enqueue_indices";
  detail::validate_stream(where, s, m.cfg.backend);
  m.check_rows(where, s, rows);
  nvtx::Scoped range(nvtx::Range::index_build, rows);
  IndexBuildParams p;
  p.slots = m.slots;
  p.n_real = m.n_real;
  p.accept_len = m.accept_len.as<int32_t>();
  p.pool_slots = m.cfg.pool.slots;
  p.scratch_steps = m.cfg.pool.scratch_steps;
  p.tokens = m.cfg.tokens;
  p.rows = rows;
  p.errors = m.device_errors();
  p.out = m.idx;
  if (m.cfg.backend == Backend::cpu) {
    detail::cpu_submit([p] { build_indices_cpu(p); });
    return;
  }
#if defined(KDAGRAPH_WITH_CUDA)
  detail::check_launch(launch_build_indices(p, s.stream), "build_indices", m.shape(rows));
#endif
}

void Verifier::enqueue_verify(const Stream& s, int32_t layer, const LayerInputs& in, int32_t rows) {
  Impl& m = *impl_;
  const char* where = "Verifier::enqueue_verify";
  detail::validate_stream(where, s, m.cfg.backend);
  detail::validate_layer_index(where, layer, m.cfg.model.layers);
  m.check_rows(where, s, rows);
  detail::validate_layer_inputs(where, in, m.cfg);
  nvtx::Scoped range(nvtx::Range::layer, layer);
  const size_t es = dtype_size(m.cfg.pool.state_dtype);
  VerifyParams p;
  p.rows = rows;
  p.tokens = m.cfg.tokens;
  p.heads = m.cfg.model.heads;
  p.value_heads = m.cfg.model.value_heads;
  p.head_k = m.cfg.model.head_k;
  p.head_v = m.cfg.model.head_v;
  p.io_dtype = m.cfg.io_dtype;
  p.state_dtype = m.cfg.pool.state_dtype;
  p.options = m.cfg.options;
  p.q = in.q;
  p.k = in.k;
  p.v = in.v;
  p.g = in.g;
  p.beta = in.beta;
  p.o = in.o;
  p.A_log = in.A_log;
  p.dt_bias = in.dt_bias;
  p.pool_layer = static_cast<const char*>(m.pool.data()) + m.geo.pool_offset(layer, 0, 0) * es;
  p.scratch_layer = static_cast<char*>(m.scratch.data()) + m.geo.scratch_offset(layer, 0, 0) * es;
  p.seed_pool = m.idx.seed_pool;
  p.seed_scratch = m.idx.seed_scratch;
  p.write_row = m.idx.write_row;
  if (m.cfg.backend == Backend::cpu) {
    detail::cpu_submit([p] { verify_cpu(p); });
    return;
  }
#if defined(KDAGRAPH_WITH_CUDA)
  detail::check_launch(launch_verify(p, s.stream), "verify", m.shape(rows));
#endif
}

void Verifier::enqueue_round(const Stream& s, const LayerInputs* layers, int32_t rows) {
  require(layers != nullptr, "Verifier::enqueue_round", "layers", "is null");
  for (int32_t l = 0; l < impl_->cfg.model.layers; ++l)
    detail::validate_layer_inputs("Verifier::enqueue_round", layers[l], impl_->cfg);
  enqueue_indices(s, rows);
  for (int32_t l = 0; l < impl_->cfg.model.layers; ++l) enqueue_verify(s, l, layers[l], rows);
}

void Verifier::enqueue_accept(const Stream& s, const int32_t* accepted, int32_t rows) {
  Impl& m = *impl_;
  const char* where = "Verifier::enqueue_accept";
  detail::validate_stream(where, s, m.cfg.backend);
  require(accepted != nullptr, where, "accepted", "is null");
  m.check_rows(where, s, rows);
  nvtx::Scoped range(nvtx::Range::accept, rows);
  AcceptParams p;
  p.rows = rows;
  p.tokens = m.cfg.tokens;
  p.mode = m.cfg.mode;
  p.row_slot = m.idx.row_slot;
  p.accepted = accepted;
  p.accept_len = m.accept_len.as<int32_t>();
  p.row_accept = m.row_accept;
  p.errors = m.device_errors();
  if (m.cfg.backend == Backend::cpu) {
    detail::cpu_submit([p] { accept_cpu(p); });
    return;
  }
#if defined(KDAGRAPH_WITH_CUDA)
  detail::check_launch(launch_accept(p, s.stream), "accept", m.shape(rows));
#endif
}

void Verifier::enqueue_accept_from_host(const Stream& s, const int32_t* accepted, int32_t n) {
  Impl& m = *impl_;
  const char* where = "Verifier::enqueue_accept_from_host";
  detail::validate_stream(where, s, m.cfg.backend);
  require(m.n > 0, where, "batch", "is not set: call set_batch first");
  require(n == m.n, where, "n", "= " + std::to_string(n) + " differs from the batch size " +
                                    std::to_string(m.n) + " of set_batch");
  detail::validate_accept_lengths(where, accepted, n, m.cfg.tokens);
  m.require_not_capturing(where, s);
  m.upload(s, m.accepted, accepted, sizeof(int32_t) * size_t(n));
  enqueue_accept(s, m.accepted, n);
}

void Verifier::enqueue_commit(const Stream& s, int32_t rows) {
  Impl& m = *impl_;
  const char* where = "Verifier::enqueue_commit";
  detail::validate_stream(where, s, m.cfg.backend);
  require(m.cfg.mode == Mode::two_phase, where, "mode",
          std::string("= ") + to_string(m.cfg.mode) + ": commit exists only in two-phase mode");
  m.check_rows(where, s, rows);
  nvtx::Scoped range(nvtx::Range::commit, rows);
  const StateCopyParams p = m.copy_params(rows, m.idx.row_slot, m.row_accept);
  if (m.cfg.backend == Backend::cpu) {
    detail::cpu_submit([p] { copy_accepted_states_cpu(p); });
    return;
  }
#if defined(KDAGRAPH_WITH_CUDA)
  detail::check_launch(launch_copy_accepted_states(p, s.stream), "commit", m.shape(rows));
#endif
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
  nvtx::Scoped range(nvtx::Range::materialize, count);
  m.upload(s, m.materialize_slots, slots, sizeof(int32_t) * size_t(count));
  const StateCopyParams p = m.copy_params(count, m.materialize_slots, nullptr);
  if (m.cfg.backend == Backend::cpu) {
    detail::cpu_submit([p] {
      copy_accepted_states_cpu(p);
      reset_accept_len_cpu(p);
    });
    return;
  }
#if defined(KDAGRAPH_WITH_CUDA)
  detail::check_launch(launch_copy_accepted_states(p, s.stream), "materialize",
                       "count=" + std::to_string(count));
  detail::check_launch(launch_reset_accept_len(p, s.stream), "materialize_reset",
                       "count=" + std::to_string(count));
#endif
}

DeviceErrorWord Verifier::device_errors() const {
  const auto* w = static_cast<const volatile DeviceErrorWord*>(impl_->errors.host());
  DeviceErrorWord out;
  out.count = w->count;
  out.code = w->code;
  out.row = w->row;
  out.value = w->value;
  return out;
}

void Verifier::clear_device_errors() {
  auto* w = static_cast<volatile DeviceErrorWord*>(impl_->errors.host());
  w->code = 0;
  w->row = -1;
  w->value = 0;
  w->count = 0;
}

}  // namespace kdagraph
