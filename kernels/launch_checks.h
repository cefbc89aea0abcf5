// What every launcher checks before it enqueues: the pointers its kernel addresses, aligned for the
// widest access it makes, and the state views it walks, whose rows and layers must start on 16-byte
// boundaries (docs/ops.md; short_conv's conv state on any element, docs/python.md). Host code, shared by the CUDA launchers; the ops check the same views with the
// user's argument names before a launcher is reached, so these guard direct callers of the launchers.
#pragma once

#include <cstdint>
#include <string>

#include "kdagraph/buffers.hpp"
#include "kdagraph/error.hpp"
#include "kernels/layout.h"

namespace kdagraph::detail {

// A non-null pointer aligned to `alignment` bytes (the ops' validation uses it too).
inline void require_buffer(const char* where, const char* name, const void* p, uintptr_t alignment) {
  require(p != nullptr, where, name, "is null");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  require(addr % alignment == 0, where, name,
          [&] { return "= " + std::to_string(addr) + " is not " + std::to_string(alignment) + "-byte aligned"; });
}

// A view of rows of at least `row_elems` elements of `dtype`: one base aligned to `row_align_bytes`
// with multiples of it for the row and layer strides (16 bytes, docs/ops.md; short_conv's conv state takes
// one element, docs/python.md), or a table of per-layer bases (each checked by the kernels, layer_base_invalid).
inline void require_state_view(const char* where, const char* name, const StateView& v, DType dtype, int64_t row_elems,
                               int64_t row_align_bytes = 16) {
  require(v.dtype == dtype, where, name, [&] {
    return std::string("dtype = ") + to_string(v.dtype) + " differs from the expected " + to_string(dtype);
  });
  require(v.row_stride >= row_elems, where, name, [&] {
    return "row_stride = " + std::to_string(v.row_stride) + " elements is below a row's " + std::to_string(row_elems);
  });
  const int64_t es = elem_bytes(v.dtype);
  require(v.row_stride * es % row_align_bytes == 0, where, name, [&] {
    return "row_stride = " + std::to_string(v.row_stride) + " elements is not a multiple of " +
           std::to_string(row_align_bytes) + " bytes";
  });
  if (v.layer_table != nullptr) {
    require_buffer(where, name, v.layer_table, alignof(void*));
    return;
  }
  require_buffer(where, name, v.base, uintptr_t(row_align_bytes));
  require(v.layers <= 1 || v.layer_stride * es % row_align_bytes == 0, where, name, [&] {
    return "layer_stride = " + std::to_string(v.layer_stride) + " elements is not a multiple of " +
           std::to_string(row_align_bytes) + " bytes";
  });
}

}  // namespace kdagraph::detail
