// [TAG_VERIFY_VARIANTS] Every member of the verify kernel family (kernels/verify_kernel.cuh) that the GPU
// sweep times (profiling/verify_variants.cuh) runs here first, on the SIMT executor, in place of the
// library's verify kernel in rounds of every mode over caller storage (docs/modes.md, docs/ops.md; each mode once, fp32
// and bf16 each at least once, member_runs): the index build,
// accept, commit and materialize are the library's, the verify the member's, on the very parameters a
// round's verify gets (graph/ops_params.h), launched as the library launches it (programmatic dependent
// launch, [TAG_PDL]). Every tile computes the same bits (kernels/verify_update.cuh,
// [TAG_VERIFY_TILE]), so a member with the library's formula matches the library bitwise: every
// output of every round, every byte of the storage after it, every pool after the last materialize. The
// probes: no_state_stores gives the library's outputs and leaves the post-state rows alone;
// prologue_only writes neither (with the conv fused in, both leave the conv state as the library). And
// the library's own choice of tile, which depends on the batch (verify_tiling), gives the same bits
// whichever tile it takes.
//
// Lanes as OS threads (ThreadSanitizer): the library's two tiles, one other member and one persistent
// member (K = 64, its prefetch without a barrier), two rounds of fused accept (member_runs).
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "graph/ops_params.h"
#include "kdagraph/ops.hpp"
#include "kernels/verify_kernel.cuh"
#include "kernels/verify_shapes.cuh"
#include "profiling/verify_variants.cuh"
#include "simt/executor.h"
#include "tests/common/caller_storage.h"
#include "tests/common/conv_rounds.h"
#include "tests/common/engines.h"
#include "tests/common/reference.h"
#include "tests/common/verify_case.h"
#include "tests/simt/simt_case.h"

namespace kdagraph::test {
namespace {

using namespace verify_detail;

const Stream kCpu{Backend::cpu, nullptr};  // the SIMT build's CPU backend runs the CUDA launchers

// A round's verify of one layer on caller storage: the library's (ops) or a family member's.
using LayerVerify = std::function<void(const CallerStorage&, int32_t rows, int32_t layer, const LayerInputs&,
                                       const ConvLayerInputs* conv)>;

LayerVerify library_verify() {
  return [](const CallerStorage& st, int32_t rows, int32_t layer, const LayerInputs& in, const ConvLayerInputs* conv) {
    const BatchView batch = st.batch_view(rows);
    if (conv != nullptr) ops::conv_verify_layer(kCpu, st.spec, st.storage, st.idx, rows, layer, *conv, in, &batch);
    else ops::verify_layer(kCpu, st.spec, st.storage, st.idx, rows, layer, in, &batch);
  };
}

// Member V on the round's parameters, for fp32 and bf16 (io and state alike). A persistent member runs
// on a stand-in device of one multiprocessor, so that each of its blocks works through several units
// (padded rows' among them) and starts all but its first from the seed tile it prefetched.
template <class V, bool kConv>
LayerVerify member_verify() {
  return [](const CallerStorage& st, int32_t rows, int32_t layer, const LayerInputs& in, const ConvLayerInputs* conv) {
    const BatchView batch = st.batch_view(rows);
    const VerifyParams p = conv != nullptr
                               ? detail::conv_verify_params(st.spec, st.storage, st.idx, rows, layer, *conv, in, &batch)
                               : detail::round_verify_params(st.spec, st.storage, st.idx, rows, layer, in, &batch);
    constexpr bool kPersistent = V::kSchedule == VerifySchedule::persistent;
    simt::Options o = simt::options();
    if (kPersistent) o.multiprocessors = 1;
    const simt::ScopedOptions scoped(o);
    // As the library launches its verify in a round (RoundSpec::pdl): the member's early part runs while
    // the kernel before it (the index build, the layer before) has yet to finish, and the member is held
    // at its dependency wait while the early part of the kernel after it (the next layer, accept) runs.
    const Launch on{nullptr, st.spec.pdl};
    const uint64_t held_before = simt::held_launches();
    cudaError_t e;
    if (p.io_dtype == DType::f32 && p.pool.dtype == DType::f32)
      e = launch_verify_tiles<typename V::Tile, V::kFormula, V::kProbe, kConv, false, float, float, V::kSchedule>(p, on);
    else if (p.io_dtype == DType::bf16 && p.pool.dtype == DType::bf16)
      e = launch_verify_tiles<typename V::Tile, V::kFormula, V::kProbe, kConv, false, bf16, bf16, V::kSchedule>(p, on);
    else
      FAIL() << "the members are built for fp32 and bf16 io and state alike";
    ASSERT_EQ(e, cudaSuccess) << simt::last_error();
    if (on.pdl && o.lanes == simt::Lanes::fibers) {
      ASSERT_GT(simt::held_launches(), held_before) << "the member did not run as a programmatic launch";
    }
    if (kPersistent) {
      const int64_t units = int64_t(rows) * p.value_heads * V::Tile::kTilesPerHead;
      ASSERT_EQ(simt::last_launch().grid.x, unsigned(V::Tile::kMinBlocksPerSm)) << "one multiprocessor's blocks";
      ASSERT_GE(units, 3 * int64_t(simt::last_launch().grid.x)) << "a block should take three units or more";
    }
  };
}

// The library's verify with the stand-in device's multiprocessors set (the tile it picks depends on them),
// checked to launch blocks of `threads` threads (the tile it should pick).
LayerVerify library_on(int multiprocessors, unsigned threads) {
  return [multiprocessors, threads](const CallerStorage& st, int32_t rows, int32_t layer, const LayerInputs& in,
                                    const ConvLayerInputs* conv) {
    simt::Options o = simt::options();
    o.multiprocessors = multiprocessors;
    const simt::ScopedOptions scoped(o);
    library_verify()(st, rows, layer, in, conv);
    ASSERT_EQ(simt::last_launch().block.x, threads) << "the library launched another tile than verify_tiling says";
  };
}

// Two caller storages A and B given the same start, and the fused conv's inputs they share: every slot's
// random recurrent states and, with the conv (conv.width > 0), every layer's random conv window, written
// into both; per layer random conv weights and an x buffer that randomize_x refills each round.
struct TwinStart {
  std::vector<detail::Buffer> x, weight;

  TwinStart(const VerifierConfig& c, const ConvShape& conv, CallerStorage& sa, CallerStorage& sb,
            std::mt19937_64& rng) {
    for (int32_t l = 0; conv.width > 0 && l < c.model.layers; ++l) {
      x.emplace_back(c.backend, size_t(c.max_rows) * c.tokens * conv.channels * dtype_size(c.io_dtype));
      std::uniform_real_distribution<float> d(-0.8f, 0.8f);
      std::vector<float> w(size_t(conv.channels) * conv.width);
      for (auto& e : w) e = d(rng);
      weight.push_back(detail::Buffer::copy_of(c.backend, w));
    }
    for (int32_t slot = 0; slot < c.pool.slots; ++slot) {
      const std::vector<uint8_t> states = random_states(c, rng);
      sa.prefill(slot, states);
      sb.prefill(slot, states);
      for (int32_t l = 0; conv.width > 0 && l < c.model.layers; ++l) {
        const std::vector<uint8_t> window =
            random_io_bytes(size_t(conv_state_row_elems(sa.spec, c.pool.scratch_steps)), c.io_dtype, rng, -2.0f, 2.0f);
        sa.conv_state.write_row(l, slot, window.data());
        sb.conv_state.write_row(l, slot, window.data());
      }
    }
  }

  void randomize_x(DType io, std::mt19937_64& rng) {
    for (auto& xl : x) {
      const std::vector<uint8_t> bytes = random_io_bytes(xl.bytes() / dtype_size(io), io, rng, -1.0f, 1.0f);
      xl.upload(bytes.data(), bytes.size());
    }
  }

  // Layer l's conv inputs on storage st, for a verify with the conv fused in (conv.width > 0 only).
  ConvLayerInputs layer(const CallerStorage& st, int32_t l) const {
    return conv_into_verify_inputs(st.spec, x[size_t(l)].data(), weight[size_t(l)].as<float>(), nullptr, nullptr,
                                   nullptr, nullptr);
  }
};

// `rounds` rounds of random batches (padded to max_rows, random accept lengths) in c.mode, with the conv
// fused in when conv.width > 0, on two caller storages: A verifies with `a`, B with `b`, every other
// operation is the library's on both, and the inputs are the same. Expects, bitwise: every round's
// outputs, every byte of the recurrent storage after every round, and every pool row after the final
// materialize.
void expect_rounds_agree(const VerifierConfig& c, const ConvShape& conv, uint64_t seed, int rounds,
                         const LayerVerify& a, const LayerVerify& b) {
  SCOPED_TRACE(std::string("mode ") + to_string(c.mode) + (conv.width > 0 ? " conv" : "") + " seed " +
               std::to_string(seed));
  std::mt19937_64 rng(seed);
  CallerStorage sa(c, CallerLayout::compact, conv), sb(c, CallerLayout::compact, conv);
  BackendInputs in(c);
  const int32_t P = c.pool.slots, L = c.model.layers, N = c.max_rows, T = c.tokens;
  TwinStart start(c, conv, sa, sb, rng);
  auto storage_bytes = [](const CallerStorage& s) {
    return std::vector<std::vector<uint8_t>>{s.pool.bytes(),       s.scratch.bytes(),    s.ring_kg.bytes(),
                                             s.ring_u.bytes(),      s.conv_state.bytes(), s.accept_len.download<uint8_t>(),
                                             s.ring_cursor.download<uint8_t>()};
  };
  const char* storage_names[] = {"pool", "scratch", "ring k and g", "ring u", "conv state", "accept_len", "ring cursor"};
  for (int r = 0; r < rounds; ++r) {
    SCOPED_TRACE("round " + std::to_string(r));
    const auto [slots, accepted] = random_batch(rng, P, N, T);
    const int32_t n = int32_t(slots.size());
    std::vector<int32_t> packed(size_t(N) + 1, -1);  // n_real, then the slots, padded with -1
    packed[0] = n;
    std::copy(slots.begin(), slots.end(), packed.begin() + 1);
    in.randomize(rng);
    start.randomize_x(c.io_dtype, rng);
    for (int side = 0; side < 2; ++side) {
      CallerStorage& st = side == 0 ? sa : sb;
      st.batch.upload(packed.data(), packed.size() * sizeof(int32_t));
      st.accepted.upload(accepted.data(), accepted.size() * sizeof(int32_t));
      ops::build_indices(kCpu, st.spec, st.storage, st.batch_view(N), st.idx);
      for (int32_t l = 0; l < L; ++l) {
        const ConvLayerInputs cin = conv.width > 0 ? start.layer(st, l) : ConvLayerInputs{};
        (side == 0 ? a : b)(st, N, l, in.view(l, side), conv.width > 0 ? &cin : nullptr);
        if (::testing::Test::HasFatalFailure()) return;
      }
      ops::accept(kCpu, st.spec, st.storage, st.idx, N, st.accepted.as<int32_t>());
      if (mode_policy(c.mode).commit) ops::commit(kCpu, st.spec, st.storage, st.idx, N);
    }
    for (int32_t l = 0; l < L; ++l) {
      const auto oa = in.o[0][size_t(l)].download<uint8_t>(), ob = in.o[1][size_t(l)].download<uint8_t>();
      ASSERT_NE(oa, std::vector<uint8_t>(oa.size(), 0xff)) << "layer " << l << " wrote no output";
      ASSERT_EQ(first_difference(ob, oa), -1) << "outputs of layer " << l << " at this byte";
    }
    const auto ba = storage_bytes(sa), bb = storage_bytes(sb);
    for (size_t i = 0; i < ba.size(); ++i)
      ASSERT_EQ(first_difference(bb[i], ba[i]), -1) << storage_names[i] << " at this byte";
  }
  std::vector<int32_t> all;
  for (int32_t s = 0; s < P; ++s) all.push_back(s);
  const std::vector<GateParams> gates(size_t(L), GateParams{in.gate.as<float>(), in.gate.as<float>() + c.model.value_heads});
  for (CallerStorage* st : {&sa, &sb}) {
    st->materialize_list.upload(all.data(), all.size() * sizeof(int32_t));
    ops::materialize(kCpu, st->spec, st->storage, st->materialize_list.as<int32_t>(), P, gates.data());
  }
  const std::vector<uint8_t> pa = sa.pool.bytes(), pb = sb.pool.bytes();
  EXPECT_EQ(first_difference(pb, pa), -1) << "materialized pools at this byte";
}

// L = 1, H = 1, HV = 2 (G = 2), K = V, 3 rows of 5 slots, T = 5: a member's every tile of both heads, a
// padded row most rounds.
VerifierConfig member_config(int K, Mode mode, DType dtype, int32_t tokens = 5) {
  VerifierConfig c = small_verifier(Backend::cpu, mode, /*layers=*/1, tokens);
  c.model = ModelShape{1, 1, 2, K, K};
  c.pool = PoolShape{5, tokens + 1, dtype};
  c.max_rows = 3;
  c.io_dtype = dtype;
  return c;
}

template <class Tuple>
struct TypesOf;
template <class... Ts>
struct TypesOf<std::tuple<Ts...>> {
  using type = ::testing::Types<Ts...>;
};

struct VariantNames {
  template <class V>
  static std::string GetName(int) {
    std::string n = V::name();
    for (char& ch : n)
      if (ch == '-') ch = '_';
    return "K" + std::to_string(V::Tile::kHeadDim) + "_" + n;
  }
};

// Under OS-thread lanes, the members that run: the library's tiles (as the library launches them), one
// more, and the smallest persistent member.
template <class V>
bool runs_on_thread_lanes() {
  using Tiles = LibraryTiles<V::Tile::kHeadDim>;
  if constexpr (V::kSchedule == VerifySchedule::persistent) return V::Tile::kHeadDim == 64;
  return std::is_same_v<typename V::Tile, typename Tiles::narrow> || std::is_same_v<typename V::Tile, typename Tiles::wide> ||
         std::is_same_v<typename V::Tile, VerifyTile<128, 16, 4, 16, 1>>;
}

// One verify of fused-accept rows on identical storage, the library's on A and probe V's on B, with the
// conv fused in when kConv: no_state_stores gives the library's outputs and writes no post-state;
// prologue_only writes neither (it stops before the token loop); with the conv, both leave the conv
// state as the library does (the conv and its history are the prologue's).
template <class V, bool kConv>
void expect_probe_writes() {
  const int K = V::Tile::kHeadDim;
  const VerifierConfig c = member_config(K, Mode::fused_accept, DType::f32);
  const ConvShape conv = kConv ? ConvShape{conv_channels(c.model), 4, ConvActivation::silu} : ConvShape{};
  CallerStorage sa(c, CallerLayout::compact, conv), sb(c, CallerLayout::compact, conv);
  BackendInputs in(c);
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  TwinStart start(c, conv, sa, sb, rng);
  in.randomize(rng);
  start.randomize_x(c.io_dtype, rng);
  const std::vector<int32_t> packed = {2, 3, 1, -1};  // n_real 2 of 3 rows
  for (CallerStorage* st : {&sa, &sb}) {
    st->batch.upload(packed.data(), packed.size() * sizeof(int32_t));
    ops::build_indices(kCpu, st->spec, st->storage, st->batch_view(c.max_rows), st->idx);
  }
  const std::vector<uint8_t> scratch_before = sb.scratch.bytes(), conv_before = sb.conv_state.bytes();
  for (int side = 0; side < 2; ++side) {
    CallerStorage& st = side == 0 ? sa : sb;
    const ConvLayerInputs cin = kConv ? start.layer(st, 0) : ConvLayerInputs{};
    (side == 0 ? library_verify() : member_verify<V, kConv>())(st, c.max_rows, 0, in.view(0, side),
                                                               kConv ? &cin : nullptr);
    if (::testing::Test::HasFatalFailure()) return;
  }
  ASSERT_EQ(simt::synchronize(), cudaSuccess) << simt::last_error();  // the member, held at its wait, ends
  const auto oa = in.o[0][0].download<uint8_t>(), ob = in.o[1][0].download<uint8_t>();
  EXPECT_EQ(sb.scratch.bytes(), scratch_before) << "a probe wrote a post-state";
  if constexpr (V::kProbe == VerifyProbe::no_state_stores) {
    EXPECT_EQ(first_difference(ob, oa), -1) << "the probe's outputs differ from the library's at this byte";
    EXPECT_NE(sa.scratch.bytes(), scratch_before) << "the library wrote no post-state: the check above proves nothing";
  } else {
    const size_t real = oa.size() / size_t(c.max_rows) * 2;  // the padded row's zeros are written
    EXPECT_EQ(std::vector<uint8_t>(ob.begin(), ob.begin() + ptrdiff_t(real)), std::vector<uint8_t>(real, 0xff))
        << "the prologue probe wrote an output";
  }
  if (kConv) {
    EXPECT_NE(sa.conv_state.bytes(), conv_before)
        << "the library wrote no conv history: the check below proves nothing";
    EXPECT_EQ(first_difference(sb.conv_state.bytes(), sa.conv_state.bytes()), -1)
        << "the probe's conv state differs from the library's at this byte";
  }
}

// The modes and dtypes member V runs its rounds in: each mode once and each dtype (a member's instantiations
// are fp32 and bf16, io and state alike) in at least one mode; with OS-thread lanes, fused accept (its
// barriers are every mode's) in bf16 at K = 128, fp32 at K = 64, so that both instantiations are raced.
template <class V>
std::vector<std::pair<Mode, DType>> member_runs() {
  if (threads_lanes()) {
    note_subset(1, 3);
    return {{Mode::fused_accept, V::Tile::kHeadDim == 128 ? DType::bf16 : DType::f32}};
  }
  return {{Mode::fused_accept, DType::f32}, {Mode::two_phase, DType::bf16}, {Mode::replay, DType::bf16}};
}

// Rounds a member runs: the first seeds every row from the pool, the second from what the first wrote (and,
// in replay, replays its prefix); a third with OS-thread lanes would take another minute for no new path.
int member_rounds() { return threads_lanes() ? 2 : 3; }

template <class V>
class ChainMember : public ::testing::Test {};
using ChainMembers = decltype(std::tuple_cat(ChainVariants128{}, ChainVariants64{}));
TYPED_TEST_SUITE(ChainMember, TypesOf<ChainMembers>::type, VariantNames);

TYPED_TEST(ChainMember, RunsRoundsOfEveryModeAsTheLibraryDoes) {
  using V = TypeParam;
  const int K = V::Tile::kHeadDim;
  const bool subset = threads_lanes();
  if (subset && !(runs_on_thread_lanes<V>() && V::kProbe == VerifyProbe::none))
    GTEST_SKIP() << "OS-thread lanes: this member runs in the fiber builds";
  const LayerVerify member = member_verify<V, false>();
  if constexpr (V::kProbe == VerifyProbe::none) {
    for (const auto& [mode, dtype] : member_runs<V>()) {
      SCOPED_TRACE(to_string(dtype));
      expect_rounds_agree(member_config(K, mode, dtype), ConvShape{}, fresh_seed(), member_rounds(), library_verify(),
                          member);
      if (::testing::Test::HasFatalFailure()) return;
    }
    // T = 9: two staging chunks, in the mode that replays a prefix first (up to 9 more tokens).
    if (!subset)
      expect_rounds_agree(member_config(K, Mode::replay, DType::f32, 9), ConvShape{}, fresh_seed(), 3, library_verify(),
                          member);
  } else {
    expect_probe_writes<V, false>();
  }
}

template <class V>
class ConvMember : public ::testing::Test {};
TYPED_TEST_SUITE(ConvMember, TypesOf<ConvVariants128>::type, VariantNames);

// With the short conv fused in: C = 2 H K + HV V = 512 at K = 128, W = 4.
TYPED_TEST(ConvMember, RunsRoundsOfEveryModeAsTheLibraryDoes) {
  using V = TypeParam;
  const bool subset = threads_lanes();
  constexpr bool kLibraryTile = std::is_same_v<typename V::Tile, typename LibraryTiles<128>::fused>;
  if (subset && !(kLibraryTile && V::kProbe == VerifyProbe::none))
    GTEST_SKIP() << "OS-thread lanes: this member runs in the fiber builds";
  if constexpr (V::kProbe != VerifyProbe::none) {
    expect_probe_writes<V, true>();
    return;
  }
  for (const auto& [mode, dtype] : member_runs<V>()) {
    SCOPED_TRACE(to_string(dtype));
    const VerifierConfig c = member_config(128, mode, dtype);
    expect_rounds_agree(c, ConvShape{conv_channels(c.model), 4, ConvActivation::silu}, fresh_seed(), member_rounds(),
                        library_verify(), member_verify<V, true>());
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// The library picks its tile by the batch (verify_tiling): wide on a stand-in device of one
// multiprocessor, narrow on one of many. Both give the same bits in every mode, so a bucket's graph
// and an eager call of fewer rows agree whichever tiles they take.
template <int K>
void expect_library_tiles_agree(Mode mode) {
  using Tiles = LibraryTiles<K>;
  static_assert(Tiles::narrow::kThreads != Tiles::wide::kThreads, "the launches tell the tiles apart by their blocks");
  SCOPED_TRACE("K=" + std::to_string(K));
  expect_rounds_agree(member_config(K, mode, DType::bf16), ConvShape{}, fresh_seed(), 3,
                      library_on(1 << 20, Tiles::narrow::kThreads), library_on(1, Tiles::wide::kThreads));
}

TEST(VerifyTiling, TheLibrarysTilesAgreeBitwise) {
  for (Mode mode : {Mode::fused_accept, Mode::two_phase, Mode::replay}) {
    if (threads_lanes() && mode != Mode::replay) continue;
    expect_library_tiles_agree<64>(mode);
    if (::testing::Test::HasFatalFailure()) return;
    if (threads_lanes()) continue;
    expect_library_tiles_agree<128>(mode);
    if (::testing::Test::HasFatalFailure()) return;
  }
  note_subset(threads_lanes() ? 1 : 6, 6);
}

}  // namespace
}  // namespace kdagraph::test
