// docs/low_precision.md: the verify whose state stores round stochastically, the family's kernel (kernels/
// verify_kernel.cuh) with kStochastic on the narrow tile at two blocks an SM, chains and trees, the conv
// fused or not, in a unit of its own. Built for io of the state's dtype only (bf16 or f16, the engines'
// choice with a 16-bit state: verify_cuda_stochastic), to keep the build's kernel count down.
#include "kernels/verify_kernel.cuh"
#include "kernels/verify_shapes.cuh"

namespace kdagraph::verify_detail {

template <int K, class IoT, class StateT>
cudaError_t launch_stochastic(const VerifyParams& p, Launch on) {
  using Tile = typename LibraryTiles<K>::stochastic;
  constexpr OutputFormula kFormula = OutputFormula::decayed_state;
  constexpr VerifyProbe kNone = VerifyProbe::none;
  constexpr VerifySchedule kBlock = VerifySchedule::block_a_unit;
  const bool conv = p.conv.width > 0, tree = p.parent != nullptr;
  if (conv && tree) return launch_verify_tiles<Tile, kFormula, kNone, true, true, IoT, StateT, kBlock, true>(p, on);
  if (conv) return launch_verify_tiles<Tile, kFormula, kNone, true, false, IoT, StateT, kBlock, true>(p, on);
  if (tree) return launch_verify_tiles<Tile, kFormula, kNone, false, true, IoT, StateT, kBlock, true>(p, on);
  return launch_verify_tiles<Tile, kFormula, kNone, false, false, IoT, StateT, kBlock, true>(p, on);
}

template cudaError_t launch_stochastic<128, bf16, bf16>(const VerifyParams&, Launch);
template cudaError_t launch_stochastic<128, math::f16, math::f16>(const VerifyParams&, Launch);
template cudaError_t launch_stochastic<64, bf16, bf16>(const VerifyParams&, Launch);
template cudaError_t launch_stochastic<64, math::f16, math::f16>(const VerifyParams&, Launch);

}  // namespace kdagraph::verify_detail
