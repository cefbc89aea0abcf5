// The functions of the public value types (include/kdagraph/types.hpp, error.hpp): names, the errors
// every layer throws, the device error word. The bottom of the library: the kernels' launchers call
// these too, so they live beside them.
#include <cstdint>
#include <string>

#include "kdagraph/error.hpp"
#include "kdagraph/types.hpp"

#if defined(KDAGRAPH_WITH_CUDA)
#include <cuda_runtime_api.h>
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

bool cuda_available() {
#if defined(KDAGRAPH_WITH_CUDA)
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
#else
  return false;
#endif
}

const char* to_string(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
  }
  return "?";
}
const char* to_string(Rounding r) {
  switch (r) {
    case Rounding::nearest: return "nearest";
    case Rounding::stochastic: return "stochastic";
  }
  return "?";
}
const char* to_string(Backend b) { return b == Backend::cpu ? "cpu" : b == Backend::cuda ? "cuda" : "?"; }
const char* to_string(Mode m) {
  switch (m) {
    case Mode::two_phase: return "two-phase";
    case Mode::fused_accept: return "fused-accept";
    case Mode::replay: return "replay";
  }
  return "?";
}
DeviceErrorWord read_device_errors(const DeviceErrorWord* word) {
  require(word != nullptr, "read_device_errors", "word", "is null");
  const auto* w = reinterpret_cast<const volatile DeviceErrorWord*>(word);
  DeviceErrorWord out;
  out.count = w->count;
  out.code = w->code;
  out.row = w->row;
  out.value = w->value;
  return out;
}

void clear_device_errors(DeviceErrorWord* word) {
  require(word != nullptr, "clear_device_errors", "word", "is null");
  auto* w = reinterpret_cast<volatile DeviceErrorWord*>(word);
  w->code = 0;
  w->row = -1;
  w->value = 0;
  w->count = 0;
}

const char* to_string(DeviceErrorCode c) {
  switch (c) {
    case DeviceErrorCode::none: return "none";
    case DeviceErrorCode::slot_out_of_range: return "slot_out_of_range";
    case DeviceErrorCode::slot_repeated: return "slot_repeated";
    case DeviceErrorCode::accept_out_of_range: return "accept_out_of_range";
    case DeviceErrorCode::layer_base_invalid: return "layer_base_invalid";
    case DeviceErrorCode::parent_out_of_range: return "parent_out_of_range";
    case DeviceErrorCode::path_invalid: return "path_invalid";
    case DeviceErrorCode::ring_out_of_range: return "ring_out_of_range";
  }
  return "?";
}

}  // namespace kdagraph
