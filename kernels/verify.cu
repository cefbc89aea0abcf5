// docs/math.md, docs/modes.md, docs/conv.md: the CUDA verify's launcher: the checks of its parameters, and the one place that
// picks a kernel of the family (kernels/verify_kernel.cuh) and makes run-time sizes and dtypes template
// parameters. A token tree's kernels are compiled in kernels/verify_tree.cu.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "kdagraph/error.hpp"
#include "kernels/launch_checks.h"
#include "kernels/verify.h"
#include "kernels/verify_kernel.cuh"
#include "kernels/verify_shapes.cuh"

namespace kdagraph {
namespace {

// The fused conv's parameters (VerifyParams::conv): the conv of the verify's own rows, tokens and layer,
// over a layout no block of the launch writes where another reads, x and the conv state moving in
// 16-byte vectors.
void require_fusable_conv(const char* where, const VerifyParams& p) {
  const ConvParams& c = p.conv;
  require_in_range(where, "conv.width", c.width, kMinConvWidth, kMaxConvWidth);
  require(c.layout == ConvLayout::halves || c.layout == ConvLayout::fixed_window, where, "conv.layout",
          "is in_place: blocks of one launch share a row's q and k channels, so the conv fuses only with "
          "the halves (fused-accept, replay) or the fixed window (two-phase)");
  require(c.channels == 2 * p.heads * p.head_k + p.value_heads * p.head_v, where, "conv.channels",
          [&] { return "= " + std::to_string(c.channels) + " is not 2 * H * K + HV * V"; });
  require(c.rows == p.rows && c.tokens == p.tokens && c.layer == p.layer && c.io_dtype == p.io_dtype, where, "conv",
          "describes other rows, tokens, layer or dtype than the verify's");
  require(p.slot_list == nullptr && p.seed_token == nullptr, where, "conv",
          "is fused only into a round's verify (indices from the index build)");
  detail::require_buffer(where, "conv.x", c.x, 16);
  detail::require_buffer(where, "conv.weight", c.weight, alignof(float));
  if (c.bias != nullptr) detail::require_buffer(where, "conv.bias", c.bias, alignof(float));
  detail::require_buffer(where, "conv.row_slot", c.row_slot, alignof(int32_t));
  detail::require_state_view(where, "conv.state", c.state, p.io_dtype,
                             int64_t(conv_state_columns(c.layout, c.width, c.scratch_steps)) * c.channels);
  if (c.layout == ConvLayout::halves) {
    detail::require_buffer(where, "conv.row_accept", c.row_accept, alignof(int32_t));
    detail::require_buffer(where, "conv.row_parity", c.row_parity, alignof(int32_t));
  } else {
    detail::require_buffer(where, "conv.write_row", c.write_row, alignof(int32_t));
    detail::require_state_view(where, "conv.scratch", c.scratch, p.io_dtype, int64_t(c.width - 1) * c.channels);
  }
}

// [TAG_VERIFY_SHAPES] The tile of a launch (kernels/verify_shapes.cuh): a chain's is wide once the
// batch has heads enough to fill the device (verify_tiling), narrow below; with the conv fused in, the
// fused one. Every tile computes the same bits.
template <int K, class IoT, class StateT>
cudaError_t launch_chain(const VerifyParams& p, Launch on) {
  using Tiles = LibraryTiles<K>;
  constexpr OutputFormula kFormula = OutputFormula::decayed_state;
  constexpr VerifyProbe kNone = VerifyProbe::none;
  if (p.conv.width > 0) return launch_verify_tiles<typename Tiles::fused, kFormula, kNone, true, false, IoT, StateT>(p, on);
  if (verify_tiling(int64_t(p.rows) * p.value_heads, detail::device_multiprocessors()) == VerifyTiling::wide)
    return launch_verify_tiles<typename Tiles::wide, kFormula, kNone, false, false, IoT, StateT>(p, on);
  return launch_verify_tiles<typename Tiles::narrow, kFormula, kNone, false, false, IoT, StateT>(p, on);
}

template <int K, class IoT, class StateT>
cudaError_t launch_tiles(const VerifyParams& p, Launch on) {
  if constexpr (sizeof(StateT) == 2 && std::is_same_v<IoT, StateT>)
    if (p.rounding == Rounding::stochastic) return verify_detail::launch_stochastic<K, IoT, StateT>(p, on);
  if (p.parent != nullptr) return verify_detail::launch_tree<K, IoT, StateT>(p, on);
  return launch_chain<K, IoT, StateT>(p, on);
}

// The one place run-time sizes and dtypes become template parameters.
// The pairs of verify_cuda_dtypes (kernels/verify.h); launch_verify refuses the others first.
template <int K, class IoT>
cudaError_t dispatch_state(const VerifyParams& p, Launch on) {
  switch (p.pool.dtype) {
    case DType::f32: return launch_tiles<K, IoT, float>(p, on);
    case DType::bf16:
      if constexpr (!std::is_same_v<IoT, math::f16>) return launch_tiles<K, IoT, bf16>(p, on);
      break;
    case DType::f16:
      if constexpr (!std::is_same_v<IoT, bf16>) return launch_tiles<K, IoT, math::f16>(p, on);
      break;
  }
  return cudaErrorInvalidValue;
}

template <int K>
cudaError_t dispatch_dtypes(const VerifyParams& p, Launch on) {
  switch (p.io_dtype) {
    case DType::f32: return dispatch_state<K, float>(p, on);
    case DType::bf16: return dispatch_state<K, bf16>(p, on);
    case DType::f16: return dispatch_state<K, math::f16>(p, on);
  }
  return cudaErrorInvalidValue;  // not a DType: validation refuses it first
}

}  // namespace

bool verify_cuda_supports(int32_t head_k, int32_t head_v) {
  return head_k == head_v && (head_k == 64 || head_k == 128);
}

cudaError_t launch_verify(const VerifyParams& p, Launch on) {
  const char* where = "launch_verify";
  require(verify_cuda_supports(p.head_k, p.head_v), where, "head_k", [&] {
    return "= " + std::to_string(p.head_k) + " with head_v = " + std::to_string(p.head_v) +
           ": the CUDA verify is built for K = V = 64 and K = V = 128 only";
  });
  require_in_range(where, "rows", p.rows, 0, INT32_MAX);
  require_in_range(where, "tokens", p.tokens, p.slot_list != nullptr ? 0 : 1, INT32_MAX);
  require(p.heads >= 1 && p.value_heads >= 1 && p.value_heads % p.heads == 0, where, "value_heads", [&] {
    return "= " + std::to_string(p.value_heads) + " is not a positive multiple of heads = " + std::to_string(p.heads);
  });
  if (p.rows == 0) return cudaSuccess;
  // q, k, g and v rows move as 16-byte cp.async, state slices as 16- (fp32) or 8-byte (16-bit) words from
  // 16-byte aligned rows, the gate parameters as 4-byte cp.async; ring records like input rows.
  if (p.conv.width > 0) require_fusable_conv(where, p);
  if (p.parent != nullptr) {  // TAG_TREE
    require(p.conv.width == 0 || p.conv.parent == p.parent, where, "conv.parent",
            "differs from parent: the fused conv and the verify run one tree");
    require_in_range(where, "tokens", p.tokens, 1, kMaxCudaTreeTokens);
    detail::require_buffer(where, "parent", p.parent, alignof(int32_t));
  }
  if (p.tokens > 0) {
    if (p.conv.width == 0) {  // fused, the conv makes them
      detail::require_buffer(where, "q", p.q, 16);
      detail::require_buffer(where, "k", p.k, 16);
      detail::require_buffer(where, "v", p.v, 16);
    }
    detail::require_buffer(where, "g", p.g, 16);
    const uintptr_t io_bytes = dtype_size(p.io_dtype);
    detail::require_buffer(where, "o", p.o, io_bytes);
    detail::require_buffer(where, "beta", p.beta, p.gate_f32 ? sizeof(float) : io_bytes);
  }
  if (p.slot_list == nullptr) {
    require(p.seed_token != nullptr || p.seed_pool != nullptr || p.seed_scratch != nullptr, where, "seed_pool",
            "is null, and so are seed_scratch and seed_token: no row has a seed");
    for (const int32_t* index : {p.seed_pool, p.seed_scratch, p.seed_token})
      if (index != nullptr) detail::require_buffer(where, "indices", index, 4);
  }
  if (p.writes_scratch) detail::require_buffer(where, "write_row", p.write_row, 4);
  const bool ring = p.ring_pending != nullptr || p.slot_list != nullptr;
  const int64_t state_elems = int64_t(p.value_heads) * p.head_v * p.head_k;
  detail::require_state_view(where, "pool", p.pool, p.pool.dtype, state_elems);
  if (p.writes_scratch) detail::require_state_view(where, "scratch", p.scratch, p.pool.dtype, state_elems);
  if (ring) {
    const RingLayout layout{p.ring_records, p.heads, p.value_heads, p.head_k, p.head_v};
    detail::require_state_view(where, "ring_kg", p.ring_kg, p.io_dtype, layout.kg_row_elems());
    detail::require_state_view(where, "ring_u", p.ring_u, DType::f32, layout.u_row_elems());
  }
  require(verify_cuda_dtypes(p.io_dtype, p.pool.dtype), where, "io_dtype", [&] {
    return std::string("= ") + to_string(p.io_dtype) + " with a " + to_string(p.pool.dtype) +
           " state: the CUDA verify is built for a 16-bit state with f32 io or io of its own dtype";
  });
  if (p.rounding == Rounding::stochastic && p.pool.dtype != DType::f32) {
    require(verify_cuda_stochastic(p.io_dtype, p.pool.dtype), where, "io_dtype", [&] {
      return std::string("= ") + to_string(p.io_dtype) + ": stochastic rounding on CUDA is built for io of the state's dtype";
    });
    require(p.slot_list != nullptr || p.row_slot != nullptr, where, "row_slot", "is null: stochastic rounding keys each row's draws by its slot");
    detail::require_buffer(where, "rounding_seed", p.rounding_seed, alignof(uint64_t));
    detail::require_buffer(where, "rounding_counter", p.rounding_counter, alignof(uint32_t));
  }
  if (p.A_log != nullptr) detail::require_buffer(where, "A_log", p.A_log, 4);
  if (p.dt_bias != nullptr) detail::require_buffer(where, "dt_bias", p.dt_bias, 4);
  if (p.pre_round.slots != nullptr) {
    detail::require_buffer(where, "pre_round.n_real", p.pre_round.n_real, alignof(int32_t));
    detail::require_buffer(where, "pre_round.accept_len", p.pre_round.accept_len, alignof(int32_t));
  }
  return p.head_k == 128 ? dispatch_dtypes<128>(p, on) : dispatch_dtypes<64>(p, on);
}

}  // namespace kdagraph
