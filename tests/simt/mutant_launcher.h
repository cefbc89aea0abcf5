// The library's chain tiles over a broken copy of kernels/verify_kernel.cuh, for the mutants of
// tests/simt/CMakeLists.txt: included after the copy (this header includes no kernel of its own, so it
// takes the copy's, which live in the same unnamed namespace of the same translation unit). The tile is
// picked as kernels/verify.cu picks a chain's (verify_tiling); fp32 io and state, what
// verify_mutants_simt_test runs: four kernels, not the library launcher's 24, so that the broken copies
// compile in seconds. (tests/simt/mutation_check.py plants bugs in the library's own sources instead.)
#pragma once

#include <cuda_runtime.h>

#include "kernels/launch.h"
#include "kernels/verify.h"
#include "kernels/verify_shapes.cuh"

namespace kdagraph {
namespace {

template <int K>
cudaError_t launch_library_chain(const VerifyParams& p, Launch on) {
  using Tiles = verify_detail::LibraryTiles<K>;
  using verify_detail::OutputFormula;
  using verify_detail::VerifyProbe;
  if (verify_tiling(int64_t(p.rows) * p.value_heads, detail::device_multiprocessors()) == VerifyTiling::wide)
    return launch_verify_tiles<typename Tiles::wide, OutputFormula::decayed_state, VerifyProbe::none, false, false, float,
                               float>(p, on);
  return launch_verify_tiles<typename Tiles::narrow, OutputFormula::decayed_state, VerifyProbe::none, false, false, float,
                             float>(p, on);
}

cudaError_t launch_library_member(const VerifyParams& p, Launch on) {
  if (p.io_dtype != DType::f32 || p.pool.dtype != DType::f32 || p.parent != nullptr || p.conv.width > 0)
    return cudaErrorInvalidValue;
  if (p.head_k == 64) return launch_library_chain<64>(p, on);
  if (p.head_k == 128) return launch_library_chain<128>(p, on);
  return cudaErrorInvalidValue;
}

}  // namespace
}  // namespace kdagraph
