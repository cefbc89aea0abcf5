// NVTX ranges of domain "kdagraph" (what Nsight Systems shows). Compiled out when the build option
// KDAGRAPH_ENABLE_NVTX is OFF. The names are registered strings, so a push costs no string hashing.
#pragma once

#include <cstdint>

namespace kdagraph::nvtx {

// Every range the library emits; profiling/README.md says what each covers.
enum class Range : int {
  capture,      // capturing one bucket's graph; payload: the bucket
  instantiate,  // instantiating and uploading one bucket's graph; payload: the bucket
  replay,       // launching one bucket's graph; payload: the bucket
  eager_round,  // one round run without a graph; payload: rows
  index_build,  // the fused-accept index build
  layer,        // one eager layer's verify; payload: the layer
  accept,       // the accept step
  commit,       // the two-phase commit
  materialize,  // materialize; payload: the number of slots
  prefill,      // prefill of one slot; payload: the slot
  conv,         // one layer's short convolution (eager); payload: the layer
  count_
};

const char* name(Range r);

#if defined(KDAGRAPH_WITH_NVTX)
void push(Range r, int64_t payload, bool has_payload);
void pop();
#else
inline void push(Range, int64_t, bool) {}
inline void pop() {}
#endif

// A range for the enclosing scope.
class Scoped {
 public:
  explicit Scoped(Range r) { push(r, 0, false); }
  Scoped(Range r, int64_t payload) { push(r, payload, true); }
  ~Scoped() { pop(); }
  Scoped(const Scoped&) = delete;
  Scoped& operator=(const Scoped&) = delete;
};

}  // namespace kdagraph::nvtx
