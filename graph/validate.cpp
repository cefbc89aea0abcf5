#include "graph/validate.h"

#include <cstdint>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "kernels/conv.h"

#if defined(KDAGRAPH_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "kernels/verify.h"
#endif

namespace kdagraph {


namespace {

bool is_mode(Mode m) {
  switch (m) {
    case Mode::two_phase:
    case Mode::fused_accept:
    case Mode::replay: return true;
  }
  return false;
}

bool is_dtype(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }
bool is_rounding(Rounding r) { return r == Rounding::nearest || r == Rounding::stochastic; }

// The (io, state) pairs and the rounding the CUDA verify is built for (kernels/verify.h,
// verify_cuda_dtypes); the CPU backend has every pair.
void require_cuda_dtypes(const char* where, const RoundSpec& spec, DType state, Backend backend) {
#if defined(KDAGRAPH_WITH_CUDA)
  if (backend != Backend::cuda) return;
  require(verify_cuda_dtypes(spec.io_dtype, state), where, "io_dtype", [&] {
    return std::string("= ") + to_string(spec.io_dtype) + " with a " + to_string(state) +
           " state: on CUDA a 16-bit state goes with f32 io or io of its own dtype (the CPU backend has every pair)";
  });
  if (needs_rounding_state(spec, state))
    require(verify_cuda_stochastic(spec.io_dtype, state), where, "pool.rounding", [&] {
      return std::string("= stochastic with io_dtype = ") + to_string(spec.io_dtype) +
             ": on CUDA stochastic rounding goes with io of the state's dtype (the CPU backend has every pair)";
    });
#else
  (void)where, (void)spec, (void)state, (void)backend;  // a CUDA backend is refused on its own
#endif
}

}  // namespace

void validate(const VerifierConfig& c) {
  const char* where = "VerifierConfig";
  require(c.backend == Backend::cpu || c.backend == Backend::cuda, where, "backend", "is not cpu or cuda");
  detail::validate_spec(where, round_spec(c), c.backend);
  require_cuda_dtypes(where, round_spec(c), c.pool.state_dtype, c.backend);
  require_in_range(where, "pool.slots", c.pool.slots, 1, int64_t(1) << 20);
  require_in_range(where, "pool.scratch_steps", c.pool.scratch_steps, 1, 64);
  require_in_range(where, "tokens", c.tokens, 1, c.pool.scratch_steps);
  require_in_range(where, "max_rows", c.max_rows, 1, c.pool.slots);
  require(is_dtype(c.pool.state_dtype), where, "pool.state_dtype", "is not f32, bf16 or f16");
}

namespace detail {

void validate_conv(const char* where, const ConvShape& conv) {
  require_in_range(where, "conv.width", conv.width, kMinConvWidth, kMaxConvWidth);
  require_in_range(where, "conv.channels", conv.channels, 1, INT32_MAX);
  require(conv.activation == ConvActivation::silu || conv.activation == ConvActivation::none, where,
          "conv.activation", [&] { return "= " + std::to_string(int(conv.activation)) + " is not a ConvActivation"; });
}

void validate_conv_shape(const char* where, const ConvShape& conv, const ModelShape& m) {
  if (conv.width == 0) return;
  validate_conv(where, conv);
  require(conv.channels == conv_channels(m), where, "conv.channels", [&] {
    return "= " + std::to_string(conv.channels) + " disagrees with the layer shape 2 * H * K + HV * V = " +
           std::to_string(conv_channels(m));
  });
}

void validate_ring(const char* where, const char* name, const ReplayRing& ring, int32_t tokens) {
  const std::string records = std::string(name) + ".records", flush_min = std::string(name) + ".flush_min";
  require(ring.records >= 2 * int64_t(tokens) && ring.records <= (1 << 16), where, records.c_str(), [&] {
    return "= " + std::to_string(ring.records) + " with tokens = " + std::to_string(tokens) +
           ": the ring holds a round's records beside up to R - T pending ones, so R must be in [2 T, 65536] = [" +
           std::to_string(2 * tokens) + ", 65536]";
  });
  require(ring.flush_min >= 0 && ring.flush_min <= ring.records - tokens, where, flush_min.c_str(), [&] {
    return "= " + std::to_string(ring.flush_min) + " is outside [0, R - T] = [0, " +
           std::to_string(ring.records - tokens) + "]: more pending records than R - T never fit a round";
  });
}

void validate_spec(const char* where, const RoundSpec& spec, Backend backend) {
  constexpr int64_t kMaxDim = 1 << 16;
  const ModelShape& m = spec.model;
  require_in_range(where, "model.layers", m.layers, 1, kMaxDim);
  require_in_range(where, "model.heads", m.heads, 1, kMaxDim);
  require_in_range(where, "model.value_heads", m.value_heads, 1, kMaxDim);
  require(m.value_heads % m.heads == 0, where, "model.value_heads", [&] {
    return "= " + std::to_string(m.value_heads) + " is not a multiple of model.heads = " + std::to_string(m.heads);
  });
  require_in_range(where, "model.head_k", m.head_k, 1, 1024);
  require_in_range(where, "model.head_v", m.head_v, 1, 1024);
  require_in_range(where, "tokens", spec.tokens, 1, 1024);
  require(is_dtype(spec.io_dtype), where, "io_dtype", "is not f32, bf16 or f16");
  require(is_rounding(spec.rounding), where, "rounding",
          [&] { return "= " + std::to_string(int(spec.rounding)) + " is not nearest or stochastic"; });
  require(is_mode(spec.mode), where, "mode", [&] { return "= " + std::to_string(int(spec.mode)) + " is not a Mode"; });
  validate_conv_shape(where, spec.conv, m);
  if (mode_policy(spec.mode).ring) validate_ring(where, "ring", spec.ring, spec.tokens);
  if (spec.options.gate == GateMode::lower_bound)
    require(spec.options.gate_lower_bound < 0.0f, where, "options.gate_lower_bound",
            [&] { return "= " + std::to_string(spec.options.gate_lower_bound) + " must be negative"; });
  switch (backend) {
    case Backend::cpu: return;
    case Backend::cuda:
#if defined(KDAGRAPH_WITH_CUDA)
      require(verify_cuda_supports(m.head_k, m.head_v), where, "model.head_k", [&] {
        return "= " + std::to_string(m.head_k) + " with head_v = " + std::to_string(m.head_v) +
               " is not supported by the CUDA verify (supported: K = V = 64 or 128)";
      });
      if (spec.trees)
        require(spec.tokens <= kMaxCudaTreeTokens, where, "tokens", [&] {
          return "= " + std::to_string(spec.tokens) + " with trees: the CUDA verify keeps a tree's branch states for at "
                 "most " + std::to_string(kMaxCudaTreeTokens) + " tokens";
        });
#else
      require(false, where, "backend", "= cuda, but kdagraph was built without CUDA");
#endif
      return;
  }
  require(false, where, "stream.backend", "is not cpu or cuda");
}

namespace {

// Checks of one field of a view, whose argument name ("name.field") is built only for a failure's
// message: the views are checked on every operation of a round.
struct ViewField {
  const char* where;
  const char* name;
  const char* field;
  std::string argument() const { return std::string(name) + "." + field; }
  void in_range(int64_t value, int64_t lo, int64_t hi) const {
    if (value < lo || value > hi) throw_out_of_range(where, argument().c_str(), value, lo, hi);
  }
  template <class Message>
  void require(bool ok, Message&& what) const {
    if (!ok) throw_invalid(where, argument().c_str(), what());
  }
  void buffer(const void* p, uintptr_t alignment) const {
    if (p == nullptr || reinterpret_cast<uintptr_t>(p) % alignment != 0) require_buffer(where, argument().c_str(), p, alignment);
  }
};

}  // namespace

void validate_view(const char* where, const char* name, const StateView& v, const RoundSpec& spec,
                   int64_t min_rows, int64_t row_elems, Backend backend, int64_t row_align_bytes) {
  auto field = [&](const char* f) { return ViewField{where, name, f}; };
  field("dtype").require(is_dtype(v.dtype), [] { return "is not f32, bf16 or f16"; });
  field("layers").in_range(v.layers, spec.model.layers, spec.model.layers);
  field("rows").in_range(v.rows, min_rows, int64_t(1) << 40);
  field("row_stride").in_range(v.row_stride, row_elems, int64_t(1) << 40);
  const int64_t es = int64_t(dtype_size(v.dtype));
  field("row_stride").require(v.row_stride * es % row_align_bytes == 0, [&] {
    return "= " + std::to_string(v.row_stride) + " elements (" + std::to_string(v.row_stride * es) +
           " bytes) is not a multiple of " + std::to_string(row_align_bytes) + " bytes";
  });
  require((v.base == nullptr) != (v.layer_table == nullptr), where, name,
          "must set exactly one of base (one allocation) and layer_table (per-layer bases)");
  if (v.base != nullptr) {
    field("base").buffer(v.base, uintptr_t(row_align_bytes));
    if (v.layers > 1) {
      field("layer_stride").in_range(v.layer_stride, v.rows * v.row_stride, int64_t(1) << 50);
      field("layer_stride").require(v.layer_stride * es % row_align_bytes == 0, [&] {
        return "= " + std::to_string(v.layer_stride) + " elements (" + std::to_string(v.layer_stride * es) +
               " bytes) is not a multiple of " + std::to_string(row_align_bytes) +
               " bytes: every layer's rows must start on such a boundary";
      });
    }
    return;
  }
  field("layer_table").buffer(v.layer_table, alignof(void*));
  // A table in host memory is checked here; one in device memory by the kernels (layer_base_invalid).
  if (backend == Backend::cpu)
    for (int32_t l = 0; l < v.layers; ++l)
      if (v.layer_table[l] == nullptr || reinterpret_cast<uintptr_t>(v.layer_table[l]) % 16 != 0)
        require_buffer(where, (std::string(name) + ".layer_table[" + std::to_string(l) + "]").c_str(), v.layer_table[l], 16);
}

namespace {

bool has_view(const StateView& v) { return v.base != nullptr || v.layer_table != nullptr; }

// The conv state (and in two-phase the conv scratch): present exactly when the layers have a conv, in
// the io dtype, rows of conv_state_row_elems and conv_scratch_row_elems.
void validate_conv_storage(const char* where, const RoundSpec& spec, const SlotStorage& st, Backend backend) {
  const bool offset_window = mode_policy(spec.mode).conv_offset_window;
  if (spec.conv.width == 0) {
    require(!has_view(st.conv_state), where, "storage.conv_state", "is set, but spec.conv.width = 0: the layers have no conv");
    return;
  }
  validate_view(where, "storage.conv_state", st.conv_state, spec, st.slots, conv_state_row_elems(spec, st.scratch_steps),
                backend);
  require(st.conv_state.dtype == spec.io_dtype, where, "storage.conv_state.dtype", [&] {
    return std::string("= ") + to_string(st.conv_state.dtype) + " differs from io_dtype = " + to_string(spec.io_dtype);
  });
  if (offset_window) return;
  validate_view(where, "storage.conv_scratch", st.conv_scratch, spec, int64_t(st.slots) * st.scratch_steps,
                conv_scratch_row_elems(spec), backend);
  require(st.conv_scratch.dtype == spec.io_dtype, where, "storage.conv_scratch.dtype", [&] {
    return std::string("= ") + to_string(st.conv_scratch.dtype) + " differs from io_dtype = " + to_string(spec.io_dtype);
  });
}

}  // namespace

void validate_state_view(const char* where, const char* name, const StateView& view, const RoundSpec& spec,
                         int64_t min_rows, Backend backend) {
  const int64_t state_elems = int64_t(spec.model.value_heads) * spec.model.head_v * spec.model.head_k;
  validate_view(where, name, view, spec, min_rows, state_elems, backend);
}

void validate_storage(const char* where, const RoundSpec& spec, const SlotStorage& st, Backend backend) {
  require_in_range(where, "storage.slots", st.slots, 1, INT32_MAX);
  require_in_range(where, "storage.scratch_steps", st.scratch_steps, spec.tokens, 1 << 16);
  const int64_t state_elems = int64_t(spec.model.value_heads) * spec.model.head_v * spec.model.head_k;
  validate_state_view(where, "storage.pool", st.pool, spec, st.slots, backend);
  const ModePolicy policy = mode_policy(spec.mode);
  if (policy.ring) {
    validate_view(where, "storage.ring_kg", st.ring_kg, spec, st.slots, ring_kg_row_elems(spec), backend);
    require(st.ring_kg.dtype == spec.io_dtype, where, "storage.ring_kg.dtype", [&] {
      return std::string("= ") + to_string(st.ring_kg.dtype) + " differs from io_dtype = " + to_string(spec.io_dtype);
    });
    validate_view(where, "storage.ring_u", st.ring_u, spec, st.slots, ring_u_row_elems(spec), backend);
    require(st.ring_u.dtype == DType::f32, where, "storage.ring_u.dtype",
            [&] { return std::string("= ") + to_string(st.ring_u.dtype) + ": a record's u is f32 (docs/modes.md)"; });
    require_buffer(where, "storage.ring_pending", st.ring_pending, alignof(int32_t));
    require_buffer(where, "storage.ring_start", st.ring_start, alignof(int32_t));
  }
  if (needs_round_parity(spec)) require_buffer(where, "storage.round_parity", st.round_parity, alignof(int32_t));
  if (needs_accept_path(spec)) require_buffer(where, "storage.accept_path", st.accept_path, alignof(int32_t));
  if (policy.per_token_scratch) {
    validate_view(where, "storage.scratch", st.scratch, spec, int64_t(st.slots) * st.scratch_steps, state_elems,
                  backend);
    require(st.scratch.dtype == st.pool.dtype, where, "storage.scratch.dtype", [&] {
      return std::string("= ") + to_string(st.scratch.dtype) + " differs from storage.pool.dtype = " +
             to_string(st.pool.dtype);
    });
  }
  validate_conv_storage(where, spec, st, backend);
  require_cuda_dtypes(where, spec, st.pool.dtype, backend);
  require_buffer(where, "storage.accept_len", st.accept_len, alignof(int32_t));
  if (needs_rounding_state(spec, st.pool.dtype)) {
    require_buffer(where, "storage.rounding_seed", st.rounding_seed, alignof(uint64_t));
    require_buffer(where, "storage.rounding_counter", st.rounding_counter, alignof(uint32_t));
  }
  if (st.errors != nullptr) require_buffer(where, "storage.errors", st.errors, alignof(DeviceErrorWord));
}

void validate_indices(const char* where, const RoundSpec& spec, const RoundIndices& idx, int32_t rows) {
  require_in_range(where, "idx.tokens", idx.tokens, spec.tokens, spec.tokens);
  require_in_range(where, "idx.capacity", idx.capacity, 1, INT32_MAX);
  require_in_range(where, "rows", rows, 1, idx.capacity);
  const std::pair<const char*, const int32_t*> arrays[] = {
      {"idx.row_slot", idx.row_slot},       {"idx.seed_pool", idx.seed_pool}, {"idx.seed_scratch", idx.seed_scratch},
      {"idx.seed_accept", idx.seed_accept}, {"idx.write_row", idx.write_row}, {"idx.row_accept", idx.row_accept},
      {"idx.row_parity", idx.row_parity}};
  for (const auto& [name, array] : arrays) require_buffer(where, name, array, alignof(int32_t));
  if (mode_policy(spec.mode).ring) {
    require_buffer(where, "idx.ring_pending", idx.ring_pending, alignof(int32_t));
    require_buffer(where, "idx.ring_start", idx.ring_start, alignof(int32_t));
    require_buffer(where, "idx.ring_flush", idx.ring_flush, alignof(int32_t));
  }
  if (spec.trees) require_buffer(where, "idx.parent", idx.parent, alignof(int32_t));
}

void validate_batch_view(const char* where, const BatchView& batch) {
  require_buffer(where, "batch.slots", batch.slots, alignof(int32_t));
  require_buffer(where, "batch.n_real", batch.n_real, alignof(int32_t));
}

void validate_batch(const char* where, const int32_t* slots, int32_t n, int32_t max_rows,
                    int32_t pool_slots) {
  require_in_range(where, "n", n, 1, max_rows);
  require(slots != nullptr, where, "slots", "is null");
  validate_slot_list(where, slots, n, pool_slots);
}

void validate_rows(const char* where, int32_t rows, int32_t n_real, int32_t max_rows) {
  require_in_range(where, "rows", rows, n_real > 0 ? n_real : 1, max_rows);
}

void validate_layer_index(const char* where, int32_t layer, int32_t layers) {
  require_in_range(where, "layer", layer, 0, layers - 1);
}

void validate_slot(const char* where, int32_t slot, int32_t pool_slots) {
  require_in_range(where, "slot", slot, 0, pool_slots - 1);
}

void validate_slot_list(const char* where, const int32_t* slots, int32_t count, int32_t pool_slots) {
  std::vector<int32_t> first_row(size_t(pool_slots), -1);
  for (int32_t i = 0; i < count; ++i) {
    const int32_t s = slots[i];
    if (s < 0 || s >= pool_slots) {
      const std::string arg = "slots[" + std::to_string(i) + "]";
      throw_out_of_range(where, arg.c_str(), s, 0, pool_slots - 1);
    }
    if (first_row[size_t(s)] >= 0)
      throw InvalidArgument("slots", std::string(where) + ": slots[" + std::to_string(i) + "] = " +
                                         std::to_string(s) + " repeats slots[" +
                                         std::to_string(first_row[size_t(s)]) +
                                         "]; each slot may appear once per batch");
    first_row[size_t(s)] = i;
  }
}

void validate_accept_lengths(const char* where, const int32_t* accepted, int32_t n, int32_t tokens) {
  require(accepted != nullptr, where, "accepted", "is null");
  for (int32_t i = 0; i < n; ++i) {
    if (accepted[i] < 1 || accepted[i] > tokens) {
      const std::string arg = "accepted[" + std::to_string(i) + "]";
      throw_out_of_range(where, arg.c_str(), accepted[i], 1, tokens);
    }
  }
}

void validate_tree(const char* where, const int32_t* parent, int32_t n, int32_t tokens) {
  require(parent != nullptr, where, "parent", "is null");
  for (int32_t r = 0; r < n; ++r)
    for (int32_t t = 0; t < tokens; ++t) {
      const int32_t pt = parent[int64_t(r) * tokens + t];
      if (pt < -1 || pt >= t || (t == 0 && pt != -1)) {
        const std::string arg = "parent[" + std::to_string(r) + "][" + std::to_string(t) + "]";
        throw_out_of_range(where, arg.c_str(), pt, -1, t == 0 ? -1 : t - 1);
      }
    }
}

void validate_accept_paths(const char* where, const int32_t* accept_index, const int32_t* tree, int32_t n,
                           int32_t tokens) {
  require(accept_index != nullptr, where, "accept_index", "is null");
  auto refuse = [&](int32_t r, int32_t i, const std::string& what) {
    const std::string arg = "accept_index[" + std::to_string(r) + "][" + std::to_string(i) + "]";
    throw_invalid(where, arg.c_str(), "= " + std::to_string(accept_index[int64_t(r) * tokens + i]) + what);
  };
  for (int32_t r = 0; r < n; ++r) {
    const int32_t* path = accept_index + int64_t(r) * tokens;
    const int32_t* parent = tree + int64_t(r) * tokens;
    int32_t last = -1, i = 0;
    for (; i < tokens && !(path[i] == -1 && i > 0); ++i) {
      const int32_t node = path[i];
      if (node <= last || node >= tokens || parent[node] != last)
        refuse(r, i, (last < 0 ? std::string(" is not a child of the seed (a token whose parent is -1)")
                               : " is not a child of token " + std::to_string(last)) +
                         " in row " + std::to_string(r) + "'s tree");
      last = node;
    }
    for (; i < tokens; ++i)  // the path ended: only -1 follows
      if (path[i] != -1) refuse(r, i, " follows the path's end (-1)");
  }
}

namespace {

// A strided view's strides (LayerInputs): each 0 (the compact one) or a positive multiple of 16 bytes,
// so every head's vector starts on a 16-byte boundary as a compact one does.
void validate_strides(const char* where, const char* name, const InputStrides& s, DType io_dtype) {
  const int64_t es = int64_t(dtype_size(io_dtype));
  const std::pair<const char*, int64_t> fields[] = {{"row", s.row}, {"token", s.token}, {"head", s.head}};
  for (const auto& [field, stride] : fields)
    if (stride < 0 || stride * es % 16 != 0)
      throw_invalid(where, (std::string(name) + "." + field).c_str(),
                    "= " + std::to_string(stride) + " elements (" + std::to_string(stride * es) +
                        " bytes): a stride is 0 (compact) or a positive multiple of 16 bytes");
}

}  // namespace

void validate_layer_inputs(const char* where, const LayerInputs& in, const RoundSpec& c, bool reads_qkv) {
  if (reads_qkv) {
    require_buffer(where, "q", in.q, 16);
    require_buffer(where, "k", in.k, 16);
    require_buffer(where, "v", in.v, 16);
    validate_strides(where, "q_strides", in.q_strides, c.io_dtype);
    validate_strides(where, "k_strides", in.k_strides, c.io_dtype);
    validate_strides(where, "v_strides", in.v_strides, c.io_dtype);
  }
  require_buffer(where, "g", in.g, 16);
  require_buffer(where, "o", in.o, 16);
  require_buffer(where, "beta", in.beta, in.gate_f32 ? sizeof(float) : dtype_size(c.io_dtype));
  // A ring record keeps its token's g in the io dtype, and a fold must see the g the verify saw.
  require(!in.gate_f32 || c.io_dtype == DType::f32 || !mode_policy(c.mode).ring, where, "gate_f32",
          [&] { return std::string("is set with io_dtype = ") + to_string(c.io_dtype) +
                       " in replay mode: the ring keeps g in the io dtype; pass g in it"; });
  // The gate parameters may be absent (zeros, docs/python.md), per value head or per query/key head.
  if (in.A_log != nullptr) require_buffer(where, "A_log", in.A_log, 4);
  if (in.dt_bias != nullptr) require_buffer(where, "dt_bias", in.dt_bias, 4);
  const ModelShape& m = c.model;
  require(in.gate_heads == 0 || in.gate_heads == m.heads || in.gate_heads == m.value_heads, where, "gate_heads", [&] {
    return "= " + std::to_string(in.gate_heads) + " is neither heads = " + std::to_string(m.heads) +
           " nor value_heads = " + std::to_string(m.value_heads) + " (0: value_heads)";
  });
}

void validate_conv_inputs(const char* where, const ConvLayerInputs& in, int32_t channels, DType io_dtype,
                          bool fused) {
  const uintptr_t es = dtype_size(io_dtype);
  require_buffer(where, "x", in.x, fused ? 16 : es);
  require_buffer(where, "weight", in.weight, alignof(float));
  if (in.bias != nullptr) require_buffer(where, "bias", in.bias, alignof(float));
  if (fused) return;
  // The segments' argument names, written out: the conv's inputs are checked every round.
  static constexpr const char* kChannels[] = {"out[0].channels", "out[1].channels", "out[2].channels"};
  static constexpr const char* kY[] = {"out[0].y", "out[1].y", "out[2].y"};
  static_assert(std::size(kChannels) == kMaxConvSegments && std::size(kY) == kMaxConvSegments);
  int64_t covered = 0;
  bool ended = false;  // segments in use come first
  for (int s = 0; s < kMaxConvSegments; ++s) {
    const ConvOutputSegment& seg = in.out[s];
    require_in_range(where, kChannels[s], seg.channels, ended ? 0 : int64_t(s == 0), ended ? 0 : channels - covered);
    ended = ended || seg.channels == 0;
    if (seg.channels > 0) require_buffer(where, kY[s], seg.y, es);
    covered += seg.channels;
  }
  require(covered == channels, where, "out", [&] {
    return "segments cover " + std::to_string(covered) + " channels, not C = " + std::to_string(channels);
  });
}

void validate_stream(const char* where, const Stream& s, Backend backend) {
  require(s.backend == backend, where, "stream.backend", [&] {
    return std::string("= ") + to_string(s.backend) + " does not match the verifier's backend " + to_string(backend);
  });
}

}  // namespace detail

}  // namespace kdagraph
