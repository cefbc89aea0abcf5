// CPU implementation of the short convolution and its window moves (docs/conv.md): the functions of
// kernels/conv.h over every (row, channel) unit, on cpu_threads() threads, compiled once per instruction
// set (kernels/cpu_isa.h). Their arithmetic has no sum across lanes, so every set gives the same bits.
#include "kernels/conv.h"
#include "kernels/cpu_isa.h"

KDAGRAPH_CPU_ISA_BEGIN
namespace {

template <int W, class IoT>
void conv_all(const ConvParams& p) {
  const int64_t units = int64_t(p.rows) * p.channels;
#pragma omp parallel for schedule(static) num_threads(cpu_threads())
  for (int64_t u = 0; u < units; ++u) {
    const int32_t n = int32_t(u / p.channels), c = int32_t(u % p.channels);
    conv_channel<W, IoT>(p, conv_row(p, n, c == 0), n, c);
  }
}

template <class IoT>
void conv_width(const ConvParams& p) {
  switch (p.width) {
    case 2: return conv_all<2, IoT>(p);
    case 3: return conv_all<3, IoT>(p);
    case 4: return conv_all<4, IoT>(p);
  }
  require_in_range("conv_cpu", "width", p.width, kMinConvWidth, kMaxConvWidth);
}

template <class E>
void conv_window_all(const ConvWindowParams& p) {
  const int64_t units = int64_t(p.count) * p.layers;
#pragma omp parallel for schedule(static) num_threads(cpu_threads())
  for (int64_t u = 0; u < units; ++u) {
    const int32_t layer = int32_t(u / p.count), e = int32_t(u % p.count);
    const ConvWindowMove m = conv_window_move(p, e, layer, layer == 0, true);
    if (m.dst == nullptr) continue;
    for (int32_t c = 0; c < p.channels; ++c) conv_window_channel<E>(p, m, c);
  }
}

}  // namespace

void conv_cpu(const ConvParams& p) {
  if (p.io_dtype == DType::f32) conv_width<float>(p);
  else if (p.io_dtype == DType::f16) conv_width<math::f16>(p);
  else conv_width<math::bf16>(p);
}

void conv_window_cpu(const ConvWindowParams& p) {
  if (p.io_dtype == DType::f32) conv_window_all<uint32_t>(p);
  else conv_window_all<uint16_t>(p);
}

KDAGRAPH_CPU_ISA_END
