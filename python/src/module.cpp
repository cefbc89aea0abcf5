// kdagraph._kdagraph (docs/python.md): the library's operations and owning classes for Python. The package
// kdagraph (python/kdagraph/__init__.py) puts the engines' signatures on top of it.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <memory>
#include <string>
#include <vector>

#if defined(KDAGRAPH_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

#include "kernels/memory.h"
#include "python/src/binding.h"

namespace nb = nanobind;

namespace kdagraph::python {

DType dtype_from(const std::string& name, const char* argument) {
  if (name == "float32" || name == "f32") return DType::f32;
  if (name == "bfloat16" || name == "bf16") return DType::bf16;
  if (name == "float16" || name == "f16" || name == "half") return DType::f16;
  throw InvalidArgument(argument, std::string(argument) + " = '" + name + "' is not 'float32', 'bfloat16' or 'float16'");
}

Rounding rounding_from(const std::string& name) {
  if (name == "nearest") return Rounding::nearest;
  if (name == "stochastic") return Rounding::stochastic;
  throw InvalidArgument("rounding", "rounding = '" + name + "' is not 'nearest' or 'stochastic'");
}

Mode mode_from(nb::handle mode) {
  if (nb::isinstance<nb::str>(mode)) {
    const std::string name = nb::cast<std::string>(mode);
    for (Mode m : {Mode::two_phase, Mode::fused_accept, Mode::replay})
      if (name == to_string(m)) return m;
    throw InvalidArgument("mode", "mode = '" + name + "' is not 'two-phase', 'fused-accept' or 'replay'");
  }
  Mode m;
  if (!nb::try_cast(mode, m)) throw InvalidArgument("mode", "mode must be a kdagraph.Mode or its name");
  return m;
}

GateMode gate_from(const std::string& name) {
  if (name == "precomputed") return GateMode::precomputed;
  if (name == "softplus") return GateMode::softplus;
  if (name == "lower-bound") return GateMode::lower_bound;
  throw InvalidArgument("gate", "gate = '" + name + "' is not 'precomputed', 'softplus' or 'lower-bound'");
}

Backend backend_from(const std::string& name) {
  if (name == "cpu") return Backend::cpu;
  if (name == "cuda") return Backend::cuda;
  throw InvalidArgument("backend", "backend = '" + name + "' is not 'cpu' or 'cuda'");
}

VerifyOptions verify_options(bool l2norm_qk, nb::handle scale, GateMode gate, float lower_bound, bool beta_is_logit) {
  VerifyOptions o;
  o.l2norm_qk = l2norm_qk;
  o.use_scale = true;
  o.scale = scale.is_none() ? 0.0f : nb::cast<float>(scale);
  if (!scale.is_none() && o.scale == 0.0f)
    throw InvalidArgument("scale", "scale = 0 would zero every output; pass None for 1 / sqrt(K)");
  o.gate = gate;
  o.gate_lower_bound = lower_bound;
  o.beta_is_logit = beta_is_logit;
  return o;
}

ConvActivation conv_activation_from(nb::handle activation, const char* argument) {
  if (activation.is_none()) return ConvActivation::none;
  if (nb::isinstance<nb::str>(activation)) {
    const std::string name = nb::cast<std::string>(activation);
    if (name == "silu") return ConvActivation::silu;
    if (name == "none" || name == "linear") return ConvActivation::none;
    throw InvalidArgument(argument, std::string(argument) + " = '" + name + "' is not 'silu', 'none' ('linear') or None");
  }
  throw InvalidArgument(argument, std::string(argument) + " must be 'silu', 'none' ('linear') or None");
}

const char* conv_activation_name(ConvActivation a) {
  switch (a) {
    case ConvActivation::silu: return "silu";
    case ConvActivation::none: return "none";
  }
  return "?";
}

ConvShape conv_shape(const ModelShape& m, int32_t width, nb::handle activation) {
  if (width != 0 && (width < 2 || width > 4))
    throw InvalidArgument("conv_width", "conv_width = " + std::to_string(width) + " is not 0 (no conv) or 2 to 4");
  ConvShape c;
  c.width = width;
  c.channels = width > 0 ? conv_channels(m) : 0;
  c.activation = conv_activation_from(activation, "conv_activation");
  return c;
}

GateArrays take_gate(nb::handle A_log_, nb::handle dt_bias_, const std::string& A_log_name,
                     const std::string& dt_bias_name, int64_t value_heads, int64_t head_k, const Array& reference,
                     int64_t heads) {
  GateArrays g{take_optional(A_log_, A_log_name.c_str()), take_optional(dt_bias_, dt_bias_name.c_str())};
  // The head count each one is given for: HV, or H where the caller has query/key heads (0: none fits).
  auto heads_of = [&](const Array& a, int64_t per_head) -> int64_t {
    const std::vector<int64_t>& d = a.shape;
    for (int64_t n : {value_heads, heads}) {
      if (n <= 0) continue;
      if ((d.size() == 1 && d[0] == n * per_head) || (per_head > 1 && d.size() == 2 && d[0] == n && d[1] == per_head))
        return n;
    }
    return 0;
  };
  const std::string hv = std::to_string(value_heads), h = std::to_string(heads), k = std::to_string(head_k);
  const std::string or_h = heads > 0 && heads != value_heads ? " or [H] = [" + h + "]" : "";
  const std::string or_hk = heads > 0 && heads != value_heads ? ", [H * K] or [H, K]" : "";
  int64_t found[2] = {0, 0};
  const Array* arrays[2] = {&g.A_log, &g.dt_bias};
  for (int i = 0; i < 2; ++i) {
    const Array& a = *arrays[i];
    if (a.data == nullptr) continue;  // None: zeros
    require_elem(a, {Elem::f32});
    require_same_place(a, reference);
    found[i] = heads_of(a, i == 0 ? 1 : head_k);
    if (found[i] == 0)
      throw InvalidArgument(a.name, a.name + " has shape " + a.shape_string() + "; expected " +
                                        (i == 0 ? "[HV] = [" + hv + "]" + or_h
                                                : "[HV * K], [HV, K] (HV = " + hv + ", K = " + k + ")" + or_hk));
  }
  if (found[0] != 0 && found[1] != 0 && found[0] != found[1])
    throw InvalidArgument(g.dt_bias.name, g.dt_bias.name + " has shape " + g.dt_bias.shape_string() + ", for " +
                                              std::to_string(found[1]) + " heads, but " + g.A_log.name + " is for " +
                                              std::to_string(found[0]) + ": both are per value head or both per query/key head");
  g.heads = int32_t(found[0] != 0 ? found[0] : found[1]);
  return g;
}

Stream resolve_stream(Backend backend, nb::handle stream, nb::handle reference) {
  if (backend == Backend::cpu) return Stream{Backend::cpu, nullptr};
  if (!stream.is_none()) {
    nb::handle h = stream;
    nb::object attr;
    if (nb::hasattr(stream, "cuda_stream")) {
      attr = stream.attr("cuda_stream");
      h = attr;
    }
    uintptr_t handle = 0;
    if (!nb::try_cast(h, handle)) throw InvalidArgument("stream", "stream must be an integer handle or a torch.cuda.Stream");
    return stream_for(backend, handle);
  }
  // Only frameworks the caller imported: sys.modules.get, never an import (nor a KeyError without them).
  const nb::object modules = nb::module_::import_("sys").attr("modules");
  const nb::object torch = modules.attr("get")("torch"), cupy = modules.attr("get")("cupy");
  auto torch_current = [&](nb::handle device) {
    const nb::object current = torch.attr("cuda").attr("current_stream")(device);
    return stream_for(backend, nb::cast<uintptr_t>(current.attr("cuda_stream")));
  };
  auto cupy_current = [&]() {
    const nb::object current = cupy.attr("cuda").attr("get_current_stream")();
    return stream_for(backend, nb::cast<uintptr_t>(current.attr("ptr")));
  };
  if (reference.is_none()) {
    if (!torch.is_none()) return torch_current(nb::none());
    if (!cupy.is_none()) return cupy_current();
    return stream_for(backend, 0);
  }
  if (!torch.is_none() && nb::cast<bool>(torch.attr("is_tensor")(reference))) return torch_current(reference.attr("device"));
  if (!cupy.is_none()) {
    const int is_cupy = PyObject_IsInstance(reference.ptr(), cupy.attr("ndarray").ptr());
    if (is_cupy < 0) throw nb::python_error();
    if (is_cupy) return cupy_current();
  }
  return stream_for(backend, 0);
}

namespace {

// Whether work enqueued on `s` would be captured into a graph: `s` is capturing, or joins a capture (the
// legacy default stream while another stream captures).
bool capturing(const Stream& s) {
#if defined(KDAGRAPH_WITH_CUDA)
  if (s.backend != Backend::cuda) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t e = cudaStreamIsCapturing(s.stream, &status);
  if (e != cudaSuccess) (void)cudaGetLastError();  // not sticky; any other failure is the work's to report
  return e == cudaErrorStreamCaptureImplicit || (e == cudaSuccess && status != cudaStreamCaptureStatusNone);
#else
  (void)s;
  return false;
#endif
}

// A first allocation of the CUDA word on `s` is refused while `s` captures a graph, or would join one:
// cudaHostAlloc is not capture-safe.
void refuse_allocation_in_capture(const Stream& s) {
  if (capturing(s))
    throw InvalidArgument("stream",
                          "stream is capturing a CUDA graph, and kdagraph's device error word is not allocated yet: "
                          "allocating it inside a capture is not capture-safe. Make a first kdagraph call on CUDA "
                          "outside the capture (or call kdagraph.device_errors('cuda') once), then capture");
}

// One word per backend, for the module's lifetime: host-mapped pinned memory on CUDA, made on first use
// (`s`: the stream of the call that needs it, checked not to be capturing; null for host reads).
struct ErrorWord {
  DeviceErrorWord* device = nullptr;
  DeviceErrorWord* host = nullptr;
};

ErrorWord& error_word(Backend backend, const Stream* s = nullptr) {
  static DeviceErrorWord cpu_word;
  static ErrorWord cpu{&cpu_word, &cpu_word};
  static std::unique_ptr<detail::MappedHostBuffer> mapped;
  static ErrorWord cuda;
  if (backend == Backend::cpu) return cpu;
  if (!mapped) {
    if (s != nullptr) refuse_allocation_in_capture(*s);
    mapped = std::make_unique<detail::MappedHostBuffer>(Backend::cuda, sizeof(DeviceErrorWord));
    cuda = ErrorWord{static_cast<DeviceErrorWord*>(mapped->device()), static_cast<DeviceErrorWord*>(mapped->host())};
    clear_device_errors(cuda.host);
  }
  return cuda;
}

nb::dict errors_dict(const DeviceErrorWord& w) {
  nb::dict d;
  d["code"] = to_string(DeviceErrorCode(w.code));
  d["row"] = w.row;
  d["value"] = w.value;
  d["count"] = w.count;
  return d;
}

}  // namespace

DeviceErrorWord* module_errors(const Stream& s) { return error_word(s.backend, &s).device; }

}  // namespace kdagraph::python

using namespace kdagraph;
using namespace kdagraph::python;

NB_MODULE(_kdagraph, m) {
  m.doc() = "kdagraph: the speculative-decoding verify of Kimi Delta Attention layers (docs/python.md)";

  static nb::object invalid_argument = nb::steal(PyErr_NewExceptionWithDoc(
      "kdagraph.InvalidArgument",
      "A bad argument: a ValueError whose `argument` names it (kdagraph::InvalidArgument).", PyExc_ValueError, nullptr));
  m.attr("InvalidArgument") = invalid_argument;
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const InvalidArgument& e) {
      nb::object exc = invalid_argument(e.what());
      exc.attr("argument") = e.argument();
      PyErr_SetObject(invalid_argument.ptr(), exc.ptr());
    } catch (const Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });

  nb::enum_<Mode>(m, "Mode", "How the state advances between rounds (docs/modes.md)")
      .value("two_phase", Mode::two_phase)
      .value("fused_accept", Mode::fused_accept)
      .value("replay", Mode::replay);

#if defined(KDAGRAPH_WITH_CUDA)
  m.attr("built_with_cuda") = true;
#else
  m.attr("built_with_cuda") = false;
#endif
  m.def("cuda_available", &cuda_available, "True when kdagraph was built with CUDA and a device is visible");
  m.def(
      "device_errors",
      [](const std::string& backend) { return errors_dict(read_device_errors(error_word(backend_from(backend)).host)); },
      nb::arg("backend") = "cpu",
      "What the device clamped in the drop-in functions' and the ops' calls (docs/errors.md): code, row, value, count. "
      "On CUDA the word is host-mapped memory that the first call needing it allocates (this one too); a first "
      "call inside a stream capture is refused, InvalidArgument naming 'stream'.");
  m.def(
      "clear_device_errors", [](const std::string& backend) { clear_device_errors(error_word(backend_from(backend)).host); },
      nb::arg("backend") = "cpu");
  m.def(
      "_default_stream",
      [](nb::handle reference) { return reinterpret_cast<uintptr_t>(resolve_stream(Backend::cuda, nb::none(), reference).stream); },
      nb::arg("reference").none() = nb::none(),
      "The CUDA stream handle a call with stream=None enqueues on for an array like `reference` (tests).");
  m.def(
      "_call_stream",
      [](nb::handle stream, nb::handle reference) {
        const Stream s = resolve_stream(Backend::cuda, stream, reference);
        return nb::make_tuple(reinterpret_cast<uintptr_t>(s.stream), capturing(s));
      },
      nb::arg("stream").none(), nb::arg("reference").none(),
      "(handle, capturing): the CUDA stream a call on CUDA arrays like `reference` enqueues on, and whether work "
      "enqueued there is captured into a graph. The drop-ins convert int64 indices on it, and not while capturing.");

  bind_ops(m);
  bind_classes(m);
  nb::module_ reference = m.def_submodule("_reference", "The C++ reference engine and its synthetic inputs (tests)");
  bind_reference(reference);
}
