// docs/conv.md on the device: one thread per (row, channel) unit, consecutive threads on consecutive
// channels, so every load and store of x, y, the conv state and the conv scratch is coalesced across a
// warp (C is contiguous in each). The unit's arithmetic is conv_channel of kernels/conv.h, the CPU's.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kdagraph/error.hpp"
#include "kernels/conv.h"
#include "kernels/launch.cuh"
#include "kernels/launch_checks.h"

namespace kdagraph {
namespace {

constexpr int kConvThreads = 128;
// Grid-stride beyond this many blocks for the window moves.
constexpr int64_t kMaxWindowBlocks = int64_t(1) << 20;

template <int W, class IoT>
__global__ void __launch_bounds__(kConvThreads) conv_kernel(const ConvParams p, const int32_t chunks) {
  grid_dependency_wait();
  trigger_dependent_launch();
  const int32_t n = int32_t(blockIdx.x) / chunks;
  const int32_t c = int32_t(blockIdx.x) % chunks * kConvThreads + int32_t(threadIdx.x);
  if (c >= p.channels) return;
  conv_channel<W, IoT>(p, conv_row(p, n, c == 0), n, c);
}

// One block per (entry, layer, chunk of channels), grid-strided.
template <class E>
__global__ void __launch_bounds__(kConvThreads)
    conv_window_kernel(const ConvWindowParams p, const int32_t chunks, const int64_t units) {
  grid_dependency_wait();
  trigger_dependent_launch();
  // Where a unit's window moves from and to, resolved by one thread and shared: a materialize list is
  // checked for repeats by a scan of the entries before it, once per block and unit rather than per thread.
  auto& resolved = shared_object<ConvWindowMove>();
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int32_t chunk = int32_t(u % chunks);
    const int64_t entry_layer = u / chunks;
    const int32_t layer = int32_t(entry_layer % p.layers), e = int32_t(entry_layer / p.layers);
    // One report per entry, and per entry and layer.
    if (threadIdx.x == 0) resolved = conv_window_move(p, e, layer, chunk == 0 && layer == 0, chunk == 0);
    __syncthreads();
    const ConvWindowMove m = resolved;
    __syncthreads();  // every thread has read it before thread 0 resolves the next unit
    const int32_t c = chunk * kConvThreads + int32_t(threadIdx.x);
    if (m.dst != nullptr && c < p.channels) conv_window_channel<E>(p, m, c);
  }
}

// The one place the width and dtype become template parameters; `p.width` is checked to be 2 to 4.
template <class IoT>
cudaError_t dispatch_width(const ConvParams& p, Launch on, int32_t chunks, unsigned blocks) {
  if (p.width == 2) return launch_kernel(conv_kernel<2, IoT>, blocks, kConvThreads, on, p, chunks);
  if (p.width == 3) return launch_kernel(conv_kernel<3, IoT>, blocks, kConvThreads, on, p, chunks);
  return launch_kernel(conv_kernel<4, IoT>, blocks, kConvThreads, on, p, chunks);
}

}  // namespace

cudaError_t launch_conv(const ConvParams& p, Launch on) {
  const char* where = "launch_conv";
  require_in_range(where, "width", p.width, kMinConvWidth, kMaxConvWidth);
  require_in_range(where, "rows", p.rows, 0, INT32_MAX);
  const bool fixed = p.layout == ConvLayout::fixed_window;
  require_in_range(where, "tokens", p.tokens, 1, fixed ? INT32_MAX : p.scratch_steps);
  require_in_range(where, "channels", p.channels, 1, INT32_MAX);
  require(p.io_dtype == DType::f32 || p.io_dtype == DType::bf16 || p.io_dtype == DType::f16, where, "io_dtype",
          "is not f32, bf16 or f16");
  if (p.rows == 0) return cudaSuccess;
  const uintptr_t es = uintptr_t(elem_bytes(p.io_dtype));
  int64_t covered = 0;
  for (int s = 0; s < kMaxConvSegments; ++s) {
    require_in_range(where, "out[].channels", p.out[s].channels, 0, p.channels - covered);
    if (p.out[s].channels > 0) detail::require_buffer(where, "out[].y", p.out[s].y, es);
    covered += p.out[s].channels;
  }
  require(covered == p.channels, where, "out", [&] {
    return "covers " + std::to_string(covered) + " of C = " + std::to_string(p.channels) + " channels";
  });
  detail::require_buffer(where, "x", p.x, es);
  detail::require_buffer(where, "weight", p.weight, alignof(float));
  if (p.bias != nullptr) detail::require_buffer(where, "bias", p.bias, alignof(float));
  detail::require_buffer(where, "row_slot", p.row_slot, alignof(int32_t));
  const int64_t columns = conv_state_columns(p.layout, p.width, p.scratch_steps);
  require(p.state_row_align == 16 || p.state_row_align == int32_t(es), where, "state_row_align",
          "= " + std::to_string(p.state_row_align) + " is not 16 (a round's views) or one element (short_conv)");
  detail::require_state_view(where, "state", p.state, p.io_dtype, columns * p.channels, p.state_row_align);
  if (!fixed) {
    detail::require_buffer(where, "row_accept", p.row_accept, alignof(int32_t));
    if (p.layout == ConvLayout::halves) detail::require_buffer(where, "row_parity", p.row_parity, alignof(int32_t));
  } else {
    detail::require_buffer(where, "write_row", p.write_row, alignof(int32_t));
    detail::require_state_view(where, "scratch", p.scratch, p.io_dtype, int64_t(p.width - 1) * p.channels);
  }
  const int32_t chunks = (p.channels + kConvThreads - 1) / kConvThreads;
  const int64_t blocks = int64_t(p.rows) * chunks;
  require(blocks <= int64_t(INT32_MAX), where, "rows", [&] {
    return "= " + std::to_string(p.rows) + " with C = " + std::to_string(p.channels) + " needs " +
           std::to_string(blocks) + " blocks, more than a grid holds";
  });
  switch (p.io_dtype) {
    case DType::f32: return dispatch_width<float>(p, on, chunks, unsigned(blocks));
    case DType::f16: return dispatch_width<math::f16>(p, on, chunks, unsigned(blocks));
    case DType::bf16: break;
  }
  return dispatch_width<math::bf16>(p, on, chunks, unsigned(blocks));
}

cudaError_t launch_conv_window(const ConvWindowParams& p, Launch on) {
  const char* where = "launch_conv_window";
  require_in_range(where, "count", p.count, 0, INT32_MAX);
  require_in_range(where, "width", p.width, kMinConvWidth, kMaxConvWidth);
  require_in_range(where, "channels", p.channels, 1, INT32_MAX);
  require_in_range(where, "layers", p.layers, 1, INT32_MAX);
  require(p.io_dtype == DType::f32 || p.io_dtype == DType::bf16 || p.io_dtype == DType::f16, where, "io_dtype",
          "is not f32, bf16 or f16");
  if (p.count == 0) return cudaSuccess;
  detail::require_buffer(where, "slot_of", p.slot_of, alignof(int32_t));
  if (p.accept_of != nullptr) detail::require_buffer(where, "accept_of", p.accept_of, alignof(int32_t));
  else detail::require_buffer(where, "accept_len", p.accept_len, alignof(int32_t));
  if (!p.from_scratch) detail::require_buffer(where, "round_parity", p.round_parity, alignof(int32_t));
  const int64_t window = int64_t(p.width - 1) * p.channels;
  detail::require_state_view(where, "state", p.state, p.io_dtype,
                             p.from_scratch ? window : conv_state_columns(ConvLayout::halves, p.width, p.scratch_steps) * int64_t(p.channels));
  if (p.from_scratch) detail::require_state_view(where, "scratch", p.scratch, p.io_dtype, window);
  const int32_t chunks = (p.channels + kConvThreads - 1) / kConvThreads;
  const int64_t units = int64_t(p.count) * p.layers * chunks;
  const unsigned blocks = unsigned(std::min(units, kMaxWindowBlocks));
  return p.io_dtype == DType::f32 ? launch_kernel(conv_window_kernel<uint32_t>, blocks, kConvThreads, on, p, chunks, units)
                                  : launch_kernel(conv_window_kernel<uint16_t>, blocks, kConvThreads, on, p, chunks, units);
}

}  // namespace kdagraph
