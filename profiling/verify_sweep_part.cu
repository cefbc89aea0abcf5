// One part of the sweep's members (profiling/verify_sweep.h): the members of profiling/verify_variants.cuh
// whose place in their list is KDAGRAPH_SWEEP_PART modulo kSweepParts, instantiated for bf16 inputs and
// fp32 or bf16 state. profiling/cuda_benchmarks.cmake compiles this file once per part.
#include <tuple>
#include <utility>

#include "kernels/verify_kernel.cuh"
#include "profiling/verify_sweep.h"
#include "profiling/verify_variants.cuh"

#if !defined(KDAGRAPH_SWEEP_PART)
#error "KDAGRAPH_SWEEP_PART names the part this unit compiles (profiling/cuda_benchmarks.cmake)"
#endif

namespace kdagraph::profiling {
namespace {

using namespace verify_detail;

template <class V, bool kConv>
SweepMember member() {
  SweepMember m;
  m.name = V::name();
  m.conv = kConv;
  m.exact = V::kFormula == OutputFormula::decayed_state && V::kProbe == VerifyProbe::none;
  m.probe = V::kProbe != VerifyProbe::none;
  m.tile_rows = V::Tile::kTileV;
  m.threads = V::Tile::kThreads;
  m.f32_state = &launch_verify_tiles<typename V::Tile, V::kFormula, V::kProbe, kConv, false, bf16, float, V::kSchedule>;
  m.bf16_state = &launch_verify_tiles<typename V::Tile, V::kFormula, V::kProbe, kConv, false, bf16, bf16, V::kSchedule>;
  return m;
}

template <bool kConv, class List, size_t... I>
void add_part(std::vector<SweepMember>& out, std::index_sequence<I...>) {
  (
      [&] {
        if constexpr (I % kSweepParts == KDAGRAPH_SWEEP_PART) out.push_back(member<std::tuple_element_t<I, List>, kConv>());
      }(),
      ...);
}

template <bool kConv, class List>
void add_list(std::vector<SweepMember>& out) {
  add_part<kConv, List>(out, std::make_index_sequence<std::tuple_size_v<List>>{});
}

}  // namespace

template <>
void add_sweep_members<KDAGRAPH_SWEEP_PART>(std::vector<SweepMember>& out) {
  add_list<false, ChainVariants128>(out);
  add_list<true, ConvVariants128>(out);
}

}  // namespace kdagraph::profiling
