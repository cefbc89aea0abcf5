// docs/trees.md: the verify of a token tree (VerifyParams::parent), the family's kernel (kernels/
// verify_kernel.cuh) with kTree, on the narrow tile (the fused conv's with the conv), in a unit of its
// own. Its branch states are in dynamic shared memory ([TAG_TREE]); like the chain kernels it may
// keep nothing in local memory (kernels/CMakeLists.txt).
#include "kernels/verify_kernel.cuh"
#include "kernels/verify_shapes.cuh"

namespace kdagraph::verify_detail {

template <int K, class IoT, class StateT>
cudaError_t launch_tree(const VerifyParams& p, Launch on) {
  using Tiles = LibraryTiles<K>;
  constexpr OutputFormula kFormula = OutputFormula::decayed_state;
  if (p.conv.width > 0)
    return launch_verify_tiles<typename Tiles::fused, kFormula, VerifyProbe::none, true, true, IoT, StateT>(p, on);
  return launch_verify_tiles<typename Tiles::narrow, kFormula, VerifyProbe::none, false, true, IoT, StateT>(p, on);
}

template cudaError_t launch_tree<128, float, float>(const VerifyParams&, Launch);
template cudaError_t launch_tree<128, float, bf16>(const VerifyParams&, Launch);
template cudaError_t launch_tree<128, float, math::f16>(const VerifyParams&, Launch);
template cudaError_t launch_tree<128, bf16, float>(const VerifyParams&, Launch);
template cudaError_t launch_tree<128, bf16, bf16>(const VerifyParams&, Launch);
template cudaError_t launch_tree<128, math::f16, float>(const VerifyParams&, Launch);
template cudaError_t launch_tree<128, math::f16, math::f16>(const VerifyParams&, Launch);
template cudaError_t launch_tree<64, float, float>(const VerifyParams&, Launch);
template cudaError_t launch_tree<64, float, bf16>(const VerifyParams&, Launch);
template cudaError_t launch_tree<64, float, math::f16>(const VerifyParams&, Launch);
template cudaError_t launch_tree<64, bf16, float>(const VerifyParams&, Launch);
template cudaError_t launch_tree<64, bf16, bf16>(const VerifyParams&, Launch);
template cudaError_t launch_tree<64, math::f16, float>(const VerifyParams&, Launch);
template cudaError_t launch_tree<64, math::f16, math::f16>(const VerifyParams&, Launch);

}  // namespace kdagraph::verify_detail
