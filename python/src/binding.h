// The pieces every part of the extension shares: names of dtypes, modes, gates and conv activations as
// the command line spells them, the gate parameters' checks, the stream a call enqueues on, and the
// device error word the drop-in functions and the ops record in.
#pragma once

#include <nanobind/nanobind.h>

#include <string>

#include "kdagraph/error.hpp"
#include "kdagraph/types.hpp"
#include "python/src/arrays.h"

namespace kdagraph::python {

// "float32" / "f32", "bfloat16" / "bf16", "float16" / "f16" / "half".
DType dtype_from(const std::string& name, const char* argument);
// "nearest" or "stochastic" (docs/low_precision.md), else InvalidArgument naming rounding.
Rounding rounding_from(const std::string& name);
// A Mode, or its command-line name: "two-phase", "fused-accept", "replay".
Mode mode_from(nb::handle mode);
// "precomputed" (g is the log decay), "softplus", "lower-bound" (docs/math.md gate in kernel).
GateMode gate_from(const std::string& name);
Backend backend_from(const std::string& name);
// docs/conv.md activation: "silu", or "none" (also spelled "linear", or None).
ConvActivation conv_activation_from(nb::handle activation, const char* argument);
const char* conv_activation_name(ConvActivation a);
// The conv of layers of shape `m`: width 0 (none) or 2 to 4, over C = 2 H K + HV V channels.
ConvShape conv_shape(const ModelShape& m, int32_t width, nb::handle activation);

// One layer's gate parameters (docs/math.md gate in kernel), checked: A_log [HV] and dt_bias [HV * K] or
// [HV, K], float32, where `reference` is. The names are the caller's arguments.
// A layer's gate parameters (docs/python.md): per value head (A_log [HV], dt_bias [HV * K] or [HV, K], FLA's
// form) or per query/key head (H and H * K, FlashInfer's GQA form, with `heads` given), either None
// (zeros). `heads` is the head count they are given for (0 when both are None).
struct GateArrays {
  Array A_log, dt_bias;
  int32_t heads = 0;
};
GateArrays take_gate(nb::handle A_log, nb::handle dt_bias, const std::string& A_log_name,
                     const std::string& dt_bias_name, int64_t value_heads, int64_t head_k, const Array& reference,
                     int64_t heads = 0);

// docs/math.md options as the Python functions take them; scale None means 1 / sqrt(K).
VerifyOptions verify_options(bool l2norm_qk, nb::handle scale, GateMode gate, float lower_bound, bool beta_is_logit);

// The stream to enqueue on: `stream` (an integer handle, or an object with .cuda_stream such as a
// torch.cuda.Stream) when given; otherwise, on CUDA, the current stream of the framework `reference`
// belongs to when that framework is imported (torch's for a torch tensor, cupy's for a cupy array), or
// with no reference torch's, else cupy's, current stream; else the legacy default stream 0. kdagraph
// imports neither framework itself. Ignored on the CPU.
Stream resolve_stream(Backend backend, nb::handle stream, nb::handle reference = nb::none());

// The module's device error word for the backend of `s` (host-mapped on CUDA). On CUDA it is allocated
// by the first call that needs it, which must not be inside a stream capture (allocating there is not
// capture-safe): a first call on a capturing `s` is refused, InvalidArgument naming "stream".
DeviceErrorWord* module_errors(const Stream& s);

void bind_ops(nb::module_& m);
void bind_classes(nb::module_& m);
void bind_reference(nb::module_& m);

}  // namespace kdagraph::python
