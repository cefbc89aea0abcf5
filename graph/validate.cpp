#include "graph/validate.h"

#include <cstdint>
#include <string>
#include <vector>

#if defined(KDAGRAPH_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "kernels/verify.h"
#endif

namespace kdagraph {

namespace detail {

void throw_out_of_range(const char* where, const char* argument, int64_t value, int64_t lo,
                        int64_t hi) {
  throw InvalidArgument(argument, std::string(where) + ": " + argument + " = " + std::to_string(value) +
                                      " is outside the allowed range [" + std::to_string(lo) + ", " +
                                      std::to_string(hi) + "]");
}

void throw_invalid(const char* where, const char* argument, const std::string& what) {
  throw InvalidArgument(argument, std::string(where) + ": " + argument + " " + what);
}

}  // namespace detail

void validate(const VerifierConfig& c) {
  const char* where = "VerifierConfig";
  constexpr int64_t kMaxDim = 1 << 16;
  require(c.backend == Backend::cpu || c.backend == Backend::cuda, where, "backend", "is not cpu or cuda");
  require_in_range(where, "model.layers", c.model.layers, 1, kMaxDim);
  require_in_range(where, "model.heads", c.model.heads, 1, kMaxDim);
  require_in_range(where, "model.value_heads", c.model.value_heads, 1, kMaxDim);
  require(c.model.value_heads % c.model.heads == 0, where, "model.value_heads",
          "= " + std::to_string(c.model.value_heads) + " is not a multiple of model.heads = " +
              std::to_string(c.model.heads));
  require_in_range(where, "model.head_k", c.model.head_k, 1, 1024);
  require_in_range(where, "model.head_v", c.model.head_v, 1, 1024);
  require_in_range(where, "pool.slots", c.pool.slots, 1, int64_t(1) << 20);
  require_in_range(where, "pool.scratch_steps", c.pool.scratch_steps, 1, 64);
  require_in_range(where, "tokens", c.tokens, 1, c.pool.scratch_steps);
  require_in_range(where, "max_rows", c.max_rows, 1, c.pool.slots);
  require(c.io_dtype == DType::f32 || c.io_dtype == DType::bf16, where, "io_dtype", "is not f32 or bf16");
  require(c.pool.state_dtype == DType::f32 || c.pool.state_dtype == DType::bf16, where,
          "pool.state_dtype", "is not f32 or bf16");
  require(c.mode == Mode::two_phase || c.mode == Mode::fused_accept, where, "mode",
          "is not two_phase or fused_accept");
  if (c.options.gate == GateMode::lower_bound)
    require(c.options.gate_lower_bound < 0.0f, where, "options.gate_lower_bound",
            "= " + std::to_string(c.options.gate_lower_bound) + " must be negative");
  if (c.backend == Backend::cuda) {
#if defined(KDAGRAPH_WITH_CUDA)
    require(verify_cuda_supports(c.model.head_k, c.model.head_v), where, "model.head_k",
            "= " + std::to_string(c.model.head_k) + " with head_v = " + std::to_string(c.model.head_v) +
                " is not supported by the CUDA verify (supported: K = V = 64 or 128)");
#else
    require(false, where, "backend", "= cuda, but kdagraph was built without CUDA");
#endif
  }
}

namespace detail {

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

namespace {
void require_buffer(const char* where, const char* name, const void* p, uintptr_t alignment) {
  require(p != nullptr, where, name, "is null");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  require(addr % alignment == 0, where, name,
          "= " + std::to_string(addr) + " is not " + std::to_string(alignment) + "-byte aligned");
}
}  // namespace

void validate_layer_inputs(const char* where, const LayerInputs& in, const VerifierConfig& c) {
  require_buffer(where, "q", in.q, 16);
  require_buffer(where, "k", in.k, 16);
  require_buffer(where, "v", in.v, 16);
  require_buffer(where, "g", in.g, 16);
  require_buffer(where, "o", in.o, 16);
  require_buffer(where, "beta", in.beta, dtype_size(c.io_dtype));
  if (c.options.gate != GateMode::precomputed) {
    require_buffer(where, "A_log", in.A_log, 4);
    require_buffer(where, "dt_bias", in.dt_bias, 4);
  }
}

void validate_stream(const char* where, const Stream& s, Backend backend) {
  require(s.backend == backend, where, "stream.backend",
          std::string("= ") + to_string(s.backend) + " does not match the verifier's backend " +
              to_string(backend));
}

}  // namespace detail

bool cuda_available() {
#if defined(KDAGRAPH_WITH_CUDA)
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
#else
  return false;
#endif
}

const char* to_string(DType t) { return t == DType::f32 ? "f32" : t == DType::bf16 ? "bf16" : "?"; }
const char* to_string(Backend b) { return b == Backend::cpu ? "cpu" : b == Backend::cuda ? "cuda" : "?"; }
const char* to_string(Mode m) {
  return m == Mode::two_phase ? "two-phase" : m == Mode::fused_accept ? "fused-accept" : "?";
}
const char* to_string(DeviceErrorCode c) {
  switch (c) {
    case DeviceErrorCode::none: return "none";
    case DeviceErrorCode::slot_out_of_range: return "slot_out_of_range";
    case DeviceErrorCode::slot_repeated: return "slot_repeated";
    case DeviceErrorCode::accept_out_of_range: return "accept_out_of_range";
  }
  return "?";
}

}  // namespace kdagraph
