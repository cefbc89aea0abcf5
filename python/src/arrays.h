// docs/python.md: arrays in, zero-copy. Anything with __dlpack__ (numpy, torch, cupy) and numpy arrays of
// ml_dtypes.bfloat16 (which numpy cannot export through DLPack) become a typed view of the caller's
// memory; nothing is ever copied or converted. Every check names the Python argument it refused.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "kdagraph/types.hpp"

namespace kdagraph::python {

namespace nb = nanobind;

// Element types the library takes: fp32 and bf16 for states and inputs, fp16 for inputs, int32 for
// indices and lengths.
enum class Elem { f32, bf16, f16, i32 };
const char* to_string(Elem e);
inline DType dtype_of(Elem e) { return e == Elem::bf16 ? DType::bf16 : e == Elem::f16 ? DType::f16 : DType::f32; }
// The element of an io or state dtype.
inline Elem elem_of(DType d) { return d == DType::f32 ? Elem::f32 : d == DType::f16 ? Elem::f16 : Elem::bf16; }

// A view of a caller's array on one backend: C-contiguous, or (take_rows) a pool of compact rows with
// a free row stride. It keeps the producer alive while it lives.
struct Array {
  nb::ndarray<> owner;
  std::string name;  // the Python argument, for messages
  void* data = nullptr;
  Elem elem = Elem::f32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // in elements, as the producer gives them
  int64_t row_stride = 0;  // elements from one index of dimension 0 to the next (0-d: 0)
  Backend backend = Backend::cpu;
  int device = 0;

  int64_t dim(size_t i) const { return shape[i]; }
  int64_t size() const;
  std::string shape_string() const;
  template <class T = void>
  T* as() const {
    return static_cast<T*>(data);
  }
};

// Takes `obj` as argument `name`: refuses anything that is not an array, not C-contiguous (a copy would
// break in-place updates), not fp32/bf16/fp16/int32, or in memory neither backend reads. A torch tensor that
// requires grad is taken through .detach() (the same memory): kdagraph records no autograd graph.
Array take(nb::handle obj, const char* name);
// A pool of rows (SGLang's per-slot envelopes, docs/ops.md): dimensions 1.. compact, dimension 0 (the
// slot) any stride of at least one row that is a multiple of `row_align_bytes`; the wrong stride is
// named otherwise. Everything else as take.
Array take_rows(nb::handle obj, const char* name, int64_t row_align_bytes);
// A view (SGLang's q, k and v split from one projection): the last dimension contiguous, the others any
// stride (Array::strides); everything else as take.
Array take_view(nb::handle obj, const char* name);
// Same as take, None allowed: returns an Array with data == nullptr.
Array take_optional(nb::handle obj, const char* name);

// Checks that throw InvalidArgument naming the array.
void require_elem(const Array& a, std::initializer_list<Elem> allowed);
// `shape`: -1 accepts any extent there.
void require_shape(const Array& a, std::initializer_list<int64_t> shape);
void require_same_place(const Array& a, const Array& reference);

// The stream to enqueue on: the caller's integer handle on CUDA (0: the legacy default stream); ignored
// on the CPU.
Stream stream_for(Backend backend, uintptr_t handle);

}  // namespace kdagraph::python
