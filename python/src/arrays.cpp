#include "python/src/arrays.h"

#include <nanobind/stl/string.h>

#include <algorithm>
#include <iterator>
#include <string>

#include "kdagraph/error.hpp"

namespace kdagraph::python {

namespace {

[[noreturn]] void refuse(const std::string& name, const std::string& what) {
  throw InvalidArgument(name, name + " " + what);
}

std::string join(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// numpy's bfloat16 (ml_dtypes) has no DLPack code: its uint16 view carries the same bits, zero-copy.
nb::object bf16_bits_view(nb::handle obj, bool& is_bf16) {
  is_bf16 = false;
  if (!nb::hasattr(obj, "dtype") || !nb::hasattr(obj, "view") || !nb::hasattr(obj, "__array_interface__"))
    return nb::borrow(obj);
  nb::object dtype = obj.attr("dtype");
  if (!nb::hasattr(dtype, "name") || nb::cast<std::string>(nb::str(dtype.attr("name"))) != "bfloat16")
    return nb::borrow(obj);
  is_bf16 = true;
  nb::object numpy = nb::module_::import_("numpy");
  return obj.attr("view")(numpy.attr("uint16"));
}

// A DLPack dtype by the name numpy, torch and ml_dtypes give it (float16, int64, bool, float8_e4m3fn).
// Codes by number (DLPack's DLDataTypeCode): older nanobind releases name only the first six.
std::string dtype_name(const nb::dlpack::dtype& t) {
  static const char* const sized[] = {"int", "uint", "float", nullptr, "bfloat", "complex"};
  static const char* const named[] = {"bool", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn",
                                      "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
                                      "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"};
  const size_t code = t.code;
  std::string name;
  if (code < std::size(sized) && sized[code] != nullptr)
    name = sized[code] + std::to_string(t.bits);
  else if (code >= std::size(sized) && code - std::size(sized) < std::size(named))
    name = named[code - std::size(sized)];
  else
    name = "DLPack type code " + std::to_string(t.code) + " of " + std::to_string(t.bits) + " bits";
  return t.lanes == 1 ? name : name + " x " + std::to_string(t.lanes) + " lanes";
}

Elem elem_of(const nb::dlpack::dtype& t, bool numpy_bf16, const std::string& name) {
  using code = nb::dlpack::dtype_code;
  if (t.lanes == 1) {
    if (numpy_bf16 && t.code == uint8_t(code::UInt) && t.bits == 16) return Elem::bf16;
    if (t.code == uint8_t(code::Float) && t.bits == 32) return Elem::f32;
    if (t.code == uint8_t(code::Bfloat) && t.bits == 16) return Elem::bf16;
    if (t.code == uint8_t(code::Float) && t.bits == 16) return Elem::f16;
    if (t.code == uint8_t(code::Int) && t.bits == 32) return Elem::i32;
  }
  refuse(name, "has dtype " + dtype_name(t) + ": kdagraph takes float32, bfloat16, float16 and int32 arrays");
}

// A torch tensor that requires grad exports no DLPack capsule; its .detach() is the same memory.
nb::object without_autograd(nb::handle obj) {
  if (nb::hasattr(obj, "requires_grad") && nb::hasattr(obj, "detach") && nb::cast<bool>(obj.attr("requires_grad")))
    return obj.attr("detach")();
  return nb::borrow(obj);
}

// `row_align_bytes` 0: every dimension C-contiguous; kAnyStrides: the last dimension contiguous, the
// others any stride (a view); otherwise dimension 0 may have any stride that holds a compact row and is a
// multiple of `row_align_bytes`.
constexpr int64_t kAnyStrides = -1;
Array take_strided(nb::handle obj, const char* name, int64_t row_align_bytes) {
  if (obj.is_none()) refuse(name, "is None");
  bool numpy_bf16 = false;
  nb::object source = bf16_bits_view(without_autograd(obj), numpy_bf16);
  nb::ndarray<> nd;
  if (!nb::try_cast(source, nd, /*convert=*/false))
    refuse(name, "is not an array with __dlpack__ (numpy, torch, cupy); got " +
                     nb::cast<std::string>(nb::str(obj.type().attr("__name__"))));
  Array a;
  a.name = name;
  a.elem = elem_of(nd.dtype(), numpy_bf16, name);
  for (size_t i = 0; i < nd.ndim(); ++i) a.shape.push_back(int64_t(nd.shape(i)));
  for (size_t i = 0; i < nd.ndim(); ++i) a.strides.push_back(int64_t(nd.stride(i)));
  // Compact: strides (in elements) are the running products; extents of 1 may carry any stride.
  const bool rows = row_align_bytes > 0 && !a.shape.empty(), view = row_align_bytes == kAnyStrides;
  int64_t expect = 1;
  for (size_t i = nd.ndim(); i-- > (rows ? 1 : view ? nd.ndim() - 1 : 0);) {
    if (a.shape[i] != 1 && nd.stride(i) != expect)
      refuse(name, std::string("is not ") + (rows ? "compact inside a row" : view ? "contiguous in its last dimension" : "C-contiguous") + " (shape " +
                       a.shape_string() + ", stride " + std::to_string(nd.stride(i)) + " in dimension " +
                       std::to_string(i) + " where compact is " + std::to_string(expect) +
                       "): kdagraph works in place and never copies" +
                       (rows ? "; only dimension 0 may have a free stride" : ""));
    expect *= a.shape[i];
  }
  if (!rows && !view && !a.shape.empty()) a.row_stride = expect / std::max<int64_t>(a.shape[0], 1);
  if (view && !a.shape.empty()) a.row_stride = a.strides[0];
  if (rows) {  // compact rows too must fall on the alignment; a single row's stride is its size
    const int64_t stride = a.shape[0] > 1 ? int64_t(nd.stride(0)) : expect, es = a.elem == Elem::bf16 || a.elem == Elem::f16 ? 2 : 4;
    if (stride < expect || stride * es % row_align_bytes != 0)
      refuse(name, "has a row stride of " + std::to_string(stride) + " elements (" + std::to_string(stride * es) +
                       " bytes) in dimension 0 (shape " + a.shape_string() + "): a row stride holds one row of " +
                       std::to_string(expect) + " elements and is a multiple of " + std::to_string(row_align_bytes) +
                       " bytes");
    a.row_stride = stride;
  }
  switch (nd.device_type()) {
    case nb::device::cpu::value: a.backend = Backend::cpu; break;
    case nb::device::cuda::value: a.backend = Backend::cuda; break;
    default: refuse(name, "is in memory of DLPack device type " + std::to_string(nd.device_type()) +
                              ": kdagraph takes CPU and CUDA arrays");
  }
  a.device = nd.device_id();
  a.data = nd.data();
  a.owner = std::move(nd);
  return a;
}

}  // namespace

const char* to_string(Elem e) {
  switch (e) {
    case Elem::f32: return "float32";
    case Elem::bf16: return "bfloat16";
    case Elem::f16: return "float16";
    case Elem::i32: return "int32";
  }
  return "?";
}

int64_t Array::size() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string Array::shape_string() const { return join(shape); }

Array take(nb::handle obj, const char* name) { return take_strided(obj, name, 0); }

Array take_view(nb::handle obj, const char* name) { return take_strided(obj, name, kAnyStrides); }

Array take_rows(nb::handle obj, const char* name, int64_t row_align_bytes) {
  return take_strided(obj, name, row_align_bytes);
}

Array take_optional(nb::handle obj, const char* name) {
  if (obj.is_none()) {
    Array a;
    a.name = name;
    return a;
  }
  return take(obj, name);
}

void require_elem(const Array& a, std::initializer_list<Elem> allowed) {
  std::string names;
  for (Elem e : allowed) {
    if (a.elem == e) return;
    names += (names.empty() ? "" : " or ") + std::string(to_string(e));
  }
  refuse(a.name, std::string("has dtype ") + to_string(a.elem) + "; expected " + names);
}

void require_shape(const Array& a, std::initializer_list<int64_t> shape) {
  const std::vector<int64_t> want(shape);
  bool ok = want.size() == a.shape.size();
  for (size_t i = 0; ok && i < want.size(); ++i) ok = want[i] < 0 || want[i] == a.shape[i];
  if (ok) return;
  std::string w = "[";
  for (size_t i = 0; i < want.size(); ++i) w += (i ? ", " : "") + (want[i] < 0 ? std::string("*") : std::to_string(want[i]));
  refuse(a.name, "has shape " + a.shape_string() + "; expected " + w + "]");
}

void require_same_place(const Array& a, const Array& reference) {
  if (a.backend == reference.backend && a.device == reference.device) return;
  refuse(a.name, std::string("is on ") + to_string(a.backend) + ":" + std::to_string(a.device) + " but " +
                     reference.name + " is on " + to_string(reference.backend) + ":" + std::to_string(reference.device));
}

Stream stream_for(Backend backend, uintptr_t handle) {
  return Stream{backend, backend == Backend::cuda ? reinterpret_cast<cudaStream_t>(handle) : nullptr};
}

}  // namespace kdagraph::python
