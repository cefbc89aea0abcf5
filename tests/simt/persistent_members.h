// The persistent members of the verify family (profiling/verify_variants.cuh), launched as the sweep
// launches them, for the mutants of tests/simt/CMakeLists.txt: included after a copy of
// kernels/verify_kernel.cuh (this header includes no kernel of its own, so it takes the copy's, which
// live in the same unnamed namespace of the same translation unit). The tiles are the family's
// persistent ones: K = 64, 16 rows in 4 warps (bf16 state's 8-byte prefetch copies in the family test),
// and K = 128, the library's 16-row tile; the library's formula, fp32 io and state, chains.
#pragma once

#include <cuda_runtime.h>

#include "kernels/launch.h"
#include "kernels/verify.h"

namespace kdagraph {
namespace {

cudaError_t launch_persistent_member(const VerifyParams& p, Launch on) {
  using verify_detail::OutputFormula;
  using verify_detail::VerifyProbe;
  using verify_detail::VerifySchedule;
  using verify_detail::VerifyTile;
  if (p.io_dtype != DType::f32 || p.pool.dtype != DType::f32) return cudaErrorInvalidValue;
  if (p.head_k == 64)
    return launch_verify_tiles<VerifyTile<64, 16, 2, 4, 4>, OutputFormula::decayed_state, VerifyProbe::none, false,
                               false, float, float, VerifySchedule::persistent>(p, on);
  if (p.head_k == 128)
    return launch_verify_tiles<VerifyTile<128, 32, 4, 4, 4>, OutputFormula::decayed_state, VerifyProbe::none, false,
                               false, float, float, VerifySchedule::persistent>(p, on);
  return cudaErrorInvalidValue;
}

}  // namespace
}  // namespace kdagraph
