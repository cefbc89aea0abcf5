// docs/conv.md, docs/ops.md on the program's runner (tests/common/runner.h [TAG_RUNNERS]): the short convolution
// through the operations on caller-owned storage. Two-phase, fused-accept and replay, each unfused and
// with the conv fused into the verify, agree bitwise over many rounds with joins and retirements in every
// engine layout; short_conv has docs/python.md's semantics; every bad argument is refused by name with every
// buffer unchanged.
//
// Sized by runner (Matrix): the layouts' rounds run 200 rounds in both io dtypes on the CPU and the GPU,
// 12 in one dtype a layout on the executor, and 2 of one layout where its lanes are OS threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "kdagraph/ops.hpp"
#include "tests/common/caller_storage.h"
#include "tests/common/conv_case.h"
#include "tests/common/conv_rounds.h"
#include "tests/common/engines.h"
#include "tests/common/runner.h"

namespace kdagraph::test {
namespace {

// L = 2, H = 1, HV = 3, K = V = 16 on the CPU, 64 on the kernels: C = 80 or 320 channels, neither a
// multiple of the conv kernel's block.
VerifierConfig conv_config(DType io) {
  VerifierConfig c = small_verifier(runner().memory(), Mode::fused_accept, /*layers=*/2, /*tokens=*/3);
  const int32_t K = case_head_dim(16);
  c.model = ModelShape{2, 1, 3, K, K};
  c.pool = PoolShape{8, 4, DType::f32};
  c.max_rows = 4;
  c.io_dtype = io;
  return c;
}

ConvShape kimi_conv(const VerifierConfig& c, int32_t width = 4) {
  return ConvShape{conv_channels(c.model), width, ConvActivation::silu};
}

class ConvOpsLayouts : public ::testing::TestWithParam<CallerLayout> {};

TEST_P(ConvOpsLayouts, ModesAgreeBitwiseWithJoinsAndRetirements) {
  KDA_SKIP_WITHOUT_RUNNER();
  const CallerLayout layout = GetParam();
  if (runner().matrix == Matrix::thread_lanes && layout != CallerLayout::layer_table)
    GTEST_SKIP() << "OS-thread lanes: the layer-table layout runs";
  for (DType io : {DType::f32, DType::bf16}) {
    // The executor runs each layout in one dtype: bf16 where rows are compact or tabled, f32 in the others.
    const bool bf16_layout = layout == CallerLayout::compact || layout == CallerLayout::layer_table;
    if (runner().matrix != Matrix::full && (io == DType::bf16) != bf16_layout) continue;
    SCOPED_TRACE(to_string(io));
    const VerifierConfig c = conv_config(io);
    expect_conv_modes_agree(c, kimi_conv(c), layout, runner().stream, fresh_seed(), by_matrix(200, 12, 2));
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, ConvOpsLayouts,
                         ::testing::Values(CallerLayout::compact, CallerLayout::layer_table,
                                           CallerLayout::padded_rows, CallerLayout::sglang),
                         [](const auto& param_info) { return std::string(to_string(param_info.param)); });

TEST(ConvOps, ModesAgreeAtEveryWidthAndWithoutActivation) {
  KDA_SKIP_WITHOUT_RUNNER();
  if (runner().matrix == Matrix::thread_lanes) GTEST_SKIP() << "OS-thread lanes: W = 4 runs in the layouts' rounds";
  for (int32_t width : {2, 3}) {
    SCOPED_TRACE("W=" + std::to_string(width));
    const VerifierConfig c = conv_config(DType::f32);
    expect_conv_modes_agree(c, kimi_conv(c, width), CallerLayout::compact, runner().stream, fresh_seed(),
                            by_matrix(60, 8, 0));
    if (HasFatalFailure()) return;
  }
  const VerifierConfig c = conv_config(DType::bf16);
  ConvShape linear = kimi_conv(c);
  linear.activation = ConvActivation::none;
  expect_conv_modes_agree(c, linear, CallerLayout::compact, runner().stream, fresh_seed(), by_matrix(60, 8, 0));
}

TEST(ConvOps, RowElemsFollowTheMode) {
  if (runner().kind != RunnerKind::cpu) GTEST_SKIP() << "host arithmetic: the CPU runner checks it";
  RoundSpec spec;
  spec.model = ModelShape{2, 1, 3, 16, 16};
  spec.conv = ConvShape{80, 4, ConvActivation::silu};
  for (Mode m : {Mode::fused_accept, Mode::replay}) {
    spec.mode = m;
    EXPECT_EQ(conv_state_row_elems(spec, 5), 2 * (4 - 1 + 5) * 80);  // two halves
  }
  spec.mode = Mode::two_phase;
  EXPECT_EQ(conv_state_row_elems(spec, 5), 3 * 80);
  EXPECT_EQ(conv_scratch_row_elems(spec), 3 * 80);
  spec.conv = ConvShape{};
  EXPECT_EQ(conv_state_row_elems(spec, 5), 0);
}

// short_conv of docs/python.md over a ConvCase's buffers: x and y [B, T, C], the window at
// max(num_accepted - 1, 0), rows named by state_indices (negative: padded), against fp64.
TEST(ConvOps, ShortConvIsTheOffsetWindowConvOnOneSegment) {
  KDA_SKIP_WITHOUT_RUNNER();
  for (DType io : {DType::f32, DType::bf16}) {
    ConvCaseShape sh;
    sh.layout = ConvLayout::in_place;
    sh.io = io;
    sh.channels = 131;
    sh.tokens = 3;
    sh.scratch_steps = 4;
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(sh.str() + " seed=" + std::to_string(seed));
    ConvCase c(sh, seed, {4, -1, 0, 2}, {3, 0, 0, 1});
    const ConvExpectation want = expect_of(c);
    Placement at(runner().memory());
    const ConvPointers ptr = c.pointers(at);
    const ShortConvCall call = short_conv_call(c, ptr, state_view(ptr.state, io, 1, 0, sh.slots, c.state_stride));
    ops::short_conv(runner().stream, call);
    at.fetch();
    expect_conv_results(c, want, conv_tolerance(io));
  }
}

TEST(ConvOps, ShortConvRefusesBadArgumentsByName) {
  KDA_SKIP_WITHOUT_RUNNER();
  ConvCaseShape sh;
  sh.layout = ConvLayout::in_place;
  sh.channels = 10;
  ConvCase c(sh, fresh_seed(), {0, 1, 2, 3}, {0, 0, 0, 0});
  Placement at(runner().memory());
  const ConvPointers ptr = c.pointers(at);
  const ShortConvCall good = short_conv_call(c, ptr, state_view(ptr.state, sh.io, 1, 0, sh.slots, c.state_stride));
  const std::vector<std::pair<std::string, std::function<void(ShortConvCall&)>>> bad = {
      {"conv.width", [](ShortConvCall& k) { k.conv.width = 1; }},
      {"conv.width", [](ShortConvCall& k) { k.conv.width = 0; }},
      {"conv.channels", [](ShortConvCall& k) { k.conv.channels = 0; }},
      {"scratch_steps", [](ShortConvCall& k) { k.tokens = k.scratch_steps + 1; }},
      {"batch", [](ShortConvCall& k) { k.batch = 0; }},
      {"y", [](ShortConvCall& k) { k.y = nullptr; }},
      {"x", [](ShortConvCall& k) { k.x = static_cast<const char*>(k.x) + 1; }},
      {"weight", [](ShortConvCall& k) { k.weight = nullptr; }},
      {"conv_state.row_stride", [](ShortConvCall& k) { k.conv_state.row_stride = 4; }},
      {"conv_state.dtype", [](ShortConvCall& k) { k.conv_state.dtype = DType::bf16; }},
      {"conv_state.rows", [](ShortConvCall& k) { k.conv_state.rows = 0; }},
      {"state_indices", [](ShortConvCall& k) { k.state_indices = nullptr; }},
      {"num_accepted", [](ShortConvCall& k) { k.num_accepted = nullptr; }},
  };
  const auto state = c.state.bytes, y = c.y[0].bytes;
  for (const auto& [argument, spoil] : bad) {
    ShortConvCall call = good;
    spoil(call);
    try {
      ops::short_conv(runner().stream, call);
      ADD_FAILURE() << "a bad " << argument << " was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.argument(), argument) << e.what();
      EXPECT_NE(std::string(e.what()).find("ops::short_conv"), std::string::npos) << e.what();
    }
    at.fetch();
    EXPECT_TRUE(c.state.bytes == state) << "a refused call changed the state";
    EXPECT_TRUE(c.y[0].bytes == y) << "a refused call changed y";
  }
}

// A round's arguments with a conv, and the bad variants of them.
struct BadConvCall {
  std::string argument;
  std::function<void(RoundSpec&, SlotStorage&, ConvLayerInputs&, int32_t& layer)> spoil;
};

std::vector<BadConvCall> bad_conv_calls() {
  auto misaligned = [](const void* p, int bytes) { return static_cast<const char*>(p) + bytes; };
  return {
      {"conv.channels", [](RoundSpec& sp, auto&, auto&, auto&) { sp.conv.channels += 1; }},
      {"conv.width", [](RoundSpec& sp, auto&, auto&, auto&) { sp.conv.width = 1; }},
      {"conv.width", [](RoundSpec& sp, auto&, auto&, auto&) { sp.conv.width = 5; }},
      {"conv.activation", [](RoundSpec& sp, auto&, auto&, auto&) { sp.conv.activation = ConvActivation(7); }},
      {"storage.scratch_steps", [](RoundSpec& sp, SlotStorage& s, auto&, auto&) { s.scratch_steps = sp.tokens - 1; }},
      {"storage.conv_state", [](RoundSpec& sp, auto&, auto&, auto&) { sp.conv = ConvShape{}; }},
      {"storage.conv_state", [](auto&, SlotStorage& s, auto&, auto&) { s.conv_state.base = nullptr; }},
      {"storage.conv_state.base", [=](auto&, SlotStorage& s, auto&, auto&) { s.conv_state.base = const_cast<char*>(misaligned(s.conv_state.base, 4)); }},
      {"storage.conv_state.row_stride", [](auto&, SlotStorage& s, auto&, auto&) { s.conv_state.row_stride -= 4; }},
      {"storage.conv_state.row_stride", [](auto&, SlotStorage& s, auto&, auto&) { s.conv_state.row_stride += 1; }},
      {"storage.conv_state.rows", [](auto&, SlotStorage& s, auto&, auto&) { s.conv_state.rows = s.slots - 1; }},
      {"storage.conv_state.layers", [](auto&, SlotStorage& s, auto&, auto&) { s.conv_state.layers = 1; }},
      {"storage.conv_state.dtype", [](auto&, SlotStorage& s, auto&, auto&) { s.conv_state.dtype = DType::bf16; }},
      {"x", [](auto&, auto&, ConvLayerInputs& in, auto&) { in.x = nullptr; }},
      {"x", [=](auto&, auto&, ConvLayerInputs& in, auto&) { in.x = misaligned(in.x, 2); }},
      {"weight", [](auto&, auto&, ConvLayerInputs& in, auto&) { in.weight = nullptr; }},
      {"bias", [=](auto&, auto&, ConvLayerInputs& in, auto&) { in.bias = reinterpret_cast<const float*>(misaligned(in.weight, 2)); }},
      {"out[1].y", [](auto&, auto&, ConvLayerInputs& in, auto&) { in.out[1].y = nullptr; }},
      {"out[0].channels", [](auto&, auto&, ConvLayerInputs& in, auto&) { in.out[0].channels = 0; }},
      {"out[2].channels", [](auto&, auto&, ConvLayerInputs& in, auto&) { in.out[2].channels += 1; }},
      {"out", [](auto&, auto&, ConvLayerInputs& in, auto&) { in.out[2].channels -= 1; }},
      {"layer", [](RoundSpec& sp, auto&, auto&, int32_t& layer) { layer = sp.model.layers; }},
  };
}

std::vector<BadConvCall> bad_two_phase_calls() {
  return {
      {"storage.conv_scratch", [](auto&, SlotStorage& s, auto&, auto&) { s.conv_scratch.base = nullptr; }},
      {"storage.conv_scratch.rows", [](auto&, SlotStorage& s, auto&, auto&) { s.conv_scratch.rows = int64_t(s.slots) * s.scratch_steps - 1; }},
      {"storage.conv_scratch.row_stride", [](auto&, SlotStorage& s, auto&, auto&) { s.conv_scratch.row_stride -= 4; }},
      {"storage.conv_scratch.dtype", [](auto&, SlotStorage& s, auto&, auto&) { s.conv_scratch.dtype = DType::bf16; }},
  };
}

// Every operation with each bad variant: InvalidArgument naming the argument and the operation, and
// every buffer as it was. Returns how many calls were refused.
int expect_conv_refusals(Mode mode, const std::vector<BadConvCall>& calls) {
  std::mt19937_64 rng(fresh_seed());
  VerifierConfig cfg = conv_config(DType::f32);
  cfg.mode = mode;
  CallerStorage c(cfg, CallerLayout::compact, kimi_conv(cfg));
  ConvModeRun out(cfg, CallerLayout::compact, kimi_conv(cfg));
  const size_t N = size_t(cfg.max_rows), T = size_t(cfg.tokens), C = size_t(conv_channels(cfg.model));
  const detail::Buffer x = detail::Buffer::copy_of(runner().memory(), random_io_bytes(N * T * C, DType::f32, rng, -1, 1));
  const detail::Buffer w = detail::Buffer::copy_of(runner().memory(), random_io_bytes(C * 4 + C, DType::f32, rng, -1, 1));
  for (int32_t slot = 0; slot < cfg.pool.slots; ++slot) {
    c.prefill(slot, random_states(cfg, rng));
    for (int32_t l = 0; l < cfg.model.layers; ++l)
      c.conv_state.write_row(l, slot, random_io_bytes(size_t(c.conv_state.row_elems), DType::f32, rng, -1, 1).data());
  }
  const std::vector<int32_t> packed = {2, 4, 1, -1, -1}, accepted = {2, 3, 0, 0}, accept_len(8, 2);
  c.batch.upload(packed.data(), packed.size() * sizeof(int32_t));
  c.accepted.upload(accepted.data(), accepted.size() * sizeof(int32_t));
  c.accept_len.upload(accept_len.data(), accept_len.size() * sizeof(int32_t));
  const int32_t rows = cfg.max_rows;
  ops::build_indices(runner().stream, c.spec, c.storage, c.batch_view(rows), c.idx);
  if (mode_policy(mode).commit) ops::accept(runner().stream, c.spec, c.storage, c.idx, rows, c.accepted.as<int32_t>());
  const ConvLayerInputs good = conv_into_verify_inputs(c.spec, x.data(), w.as<float>(), w.as<float>() + 4 * C,
                                                       out.q[1].data(), out.k[1].data(), out.v[1].data());
  const std::vector<int32_t> retiring = {4, 1};
  c.materialize_list.upload(retiring.data(), retiring.size() * sizeof(int32_t));

  using Op = std::function<void(const RoundSpec&, const SlotStorage&, const ConvLayerInputs&, int32_t)>;
  std::vector<std::pair<const char*, Op>> operations = {
      {"conv_layer", [&](auto& sp, auto& st, auto& in, int32_t layer) { ops::conv_layer(runner().stream, sp, st, c.idx, rows, layer, in); }},
      {"build_indices", [&](auto& sp, auto& st, auto&, int32_t) { ops::build_indices(runner().stream, sp, st, c.batch_view(rows), c.idx); }},
      {"materialize", [&](auto& sp, auto& st, auto&, int32_t) { ops::materialize(runner().stream, sp, st, c.materialize_list.as<int32_t>(), 2); }},
  };
  if (mode_policy(mode).commit)
    operations.push_back({"commit", [&](auto& sp, auto& st, auto&, int32_t) { ops::commit(runner().stream, sp, st, c.idx, rows); }});
  auto snapshot = [&] {
    std::vector<std::vector<uint8_t>> all = {c.pool.bytes(), c.scratch.bytes(), c.conv_state.bytes(), c.conv_scratch.bytes(),
                                             c.accept_len.download<uint8_t>(), c.index_storage.download<uint8_t>()};
    for (const auto& o : out.outputs()) all.push_back(o);
    return all;
  };
  const auto before = snapshot();
  int refused = 0;
  for (const BadConvCall& bad : calls) {
    for (const auto& [name, op] : operations) {
      const bool conv_only = bad.argument == "layer" || bad.argument == "x" || bad.argument == "weight" ||
                             bad.argument == "bias" || bad.argument.rfind("out", 0) == 0;
      if (conv_only && std::string(name) != "conv_layer") continue;  // an argument this operation does not take
      RoundSpec spec = c.spec;
      SlotStorage storage = c.storage;
      ConvLayerInputs in = good;
      int32_t layer = 1;
      bad.spoil(spec, storage, in, layer);
      SCOPED_TRACE(std::string(to_string(mode)) + ": " + name + " with a bad " + bad.argument);
      try {
        op(spec, storage, in, layer);
        ADD_FAILURE() << "was accepted";
      } catch (const InvalidArgument& e) {
        EXPECT_EQ(e.argument(), bad.argument) << e.what();
        EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << "names the operation: " << e.what();
        ++refused;
      }
      EXPECT_TRUE(snapshot() == before) << "a refused call changed a buffer";
    }
  }
  return refused;
}

TEST(ConvOps, BadConvArgumentsAreRefusedByNameAndChangeNothing) {
  KDA_SKIP_WITHOUT_RUNNER();
  EXPECT_EQ(expect_conv_refusals(Mode::fused_accept, bad_conv_calls()), 13 * 3 + 9);
  EXPECT_EQ(expect_conv_refusals(Mode::replay, bad_conv_calls()), 13 * 3 + 9);
  std::vector<BadConvCall> two_phase = bad_conv_calls();
  for (BadConvCall& b : bad_two_phase_calls()) two_phase.push_back(std::move(b));
  EXPECT_EQ(expect_conv_refusals(Mode::two_phase, two_phase), (13 + 4) * 4 + 9);
}

// A materialize list that names a slot twice works on it once: folding pending records twice, or
// moving a conv window twice, would corrupt the state. The repeat is padding, and recorded.
TEST(ConvOps, MaterializeWorksOnARepeatedSlotOnce) {
  KDA_SKIP_WITHOUT_RUNNER();
  for (Mode mode : {Mode::two_phase, Mode::fused_accept, Mode::replay}) {
    SCOPED_TRACE(to_string(mode));
    VerifierConfig cfg = conv_config(DType::f32);
    cfg.mode = mode;
    const uint64_t seed = fresh_seed();
    std::mt19937_64 gate_rng(seed + 1);
    // A_log [HV] then dt_bias [HV * K]: the replay's gate in the kernel reads both.
    const size_t HV = size_t(cfg.model.value_heads), K = size_t(cfg.model.head_k);
    const detail::Buffer gate =
        detail::Buffer::copy_of(runner().memory(), random_io_bytes(HV + HV * K, DType::f32, gate_rng, -1, 1));
    const std::vector<GateParams> gates(size_t(cfg.model.layers),
                                        GateParams{gate.as<float>(), gate.as<float>() + cfg.model.value_heads});
    auto materialized = [&](const std::vector<int32_t>& list, const detail::MappedHostBuffer& errors) {
      std::mt19937_64 rng(seed);  // both storages hold the same random states, windows and caches
      CallerStorage c(cfg, CallerLayout::compact, kimi_conv(cfg));
      *static_cast<DeviceErrorWord*>(errors.host()) = DeviceErrorWord{};
      c.storage.errors = static_cast<DeviceErrorWord*>(errors.device());
      std::vector<int32_t> accept_len(size_t(cfg.pool.slots)), parity(size_t(cfg.pool.slots));
      for (int32_t slot = 0; slot < cfg.pool.slots; ++slot) {
        c.prefill(slot, random_states(cfg, rng));
        accept_len[size_t(slot)] = 2 + int32_t(rng() % uint64_t(cfg.tokens - 1));  // 2..T: every mode moves something
        parity[size_t(slot)] = int32_t(rng() % 2);
        for (int32_t l = 0; l < cfg.model.layers; ++l) {
          c.conv_state.write_row(l, slot, random_io_bytes(size_t(c.conv_state.row_elems), DType::f32, rng, -1, 1).data());
          for (int64_t r = 0; r < int64_t(cfg.pool.scratch_steps); ++r)
            c.scratch.write_row(l, int64_t(slot) * cfg.pool.scratch_steps + r, random_states(cfg, rng).data());
          c.ring_kg.write_row(l, slot, random_io_bytes(size_t(c.ring_kg.row_elems), cfg.io_dtype, rng, -1, 1).data());
          c.ring_u.write_row(l, slot, random_io_bytes(size_t(c.ring_u.row_elems), DType::f32, rng, -0.1f, 0.1f).data());
        }
      }
      // Replay: every slot has pending records to fold, from anywhere in its ring.
      const int32_t R = c.spec.ring.records;
      std::vector<int32_t> cursor(2 * size_t(cfg.pool.slots));
      for (int32_t slot = 0; slot < cfg.pool.slots; ++slot) {
        cursor[size_t(slot)] = 1 + int32_t(rng() % uint64_t(R - cfg.tokens));
        cursor[size_t(cfg.pool.slots + slot)] = int32_t(rng() % uint64_t(R));
      }
      c.ring_cursor.upload(cursor.data(), cursor.size() * sizeof(int32_t));
      c.accept_len.upload(accept_len.data(), accept_len.size() * sizeof(int32_t));
      c.round_parity.upload(parity.data(), parity.size() * sizeof(int32_t));
      c.materialize_list.upload(list.data(), list.size() * sizeof(int32_t));
      ops::materialize(runner().stream, c.spec, c.storage, c.materialize_list.as<int32_t>(), int32_t(list.size()), gates.data());
      return std::vector<std::vector<uint8_t>>{c.pool.bytes(), c.conv_state.bytes(), c.accept_len.download<uint8_t>(),
                                               c.ring_cursor.download<uint8_t>()};
    };
    const detail::MappedHostBuffer once_word(runner().memory(), sizeof(DeviceErrorWord)),
        twice_word(runner().memory(), sizeof(DeviceErrorWord));
    const auto once = materialized({3, 5}, once_word);
    const auto twice = materialized({3, 3, 5, 5}, twice_word);
    const DeviceErrorWord once_errors = read_device_errors(static_cast<const DeviceErrorWord*>(once_word.host()));
    const DeviceErrorWord twice_errors = read_device_errors(static_cast<const DeviceErrorWord*>(twice_word.host()));
    EXPECT_TRUE(once == twice) << "a repeated slot was worked on twice";
    EXPECT_EQ(once_errors.count, 0u);
    EXPECT_EQ(twice_errors.code, uint32_t(DeviceErrorCode::slot_repeated));
    // The first recorded is either repeat (rows may run in any order), each seen at least once.
    EXPECT_TRUE((twice_errors.row == 1 && twice_errors.value == 3) || (twice_errors.row == 3 && twice_errors.value == 5))
        << "row " << twice_errors.row << ", value " << twice_errors.value;
    EXPECT_GE(twice_errors.count, 2u);
  }
}

// The halves layout [TAG_CONV_LAYOUT] through the operations, in fused-accept and replay: a round
// whose conv runs and is never accepted (twice, with other inputs) leaves the conv state as it was, so
// the same round run again gives bitwise the same outputs; once accepted, materialize leaves the
// column-0 form (the last W - 1 accepted inputs at columns [0, W - 1), accept_len 0, parity 0), from
// which the next round reads its window. Run on the in-place layout, the second round would read a
// window the first overwrote.
TEST(ConvOps, ARoundNeverAcceptedLeavesTheConvStateAndMaterializeGivesColumnZeroForm) {
  KDA_SKIP_WITHOUT_RUNNER();
  for (Mode mode : {Mode::fused_accept, Mode::replay}) {
    for (DType io : {DType::f32, DType::bf16}) {
      const uint64_t seed = fresh_seed();
      SCOPED_TRACE(std::string(to_string(mode)) + " " + to_string(io) + " seed=" + std::to_string(seed));
      std::mt19937_64 rng(seed);
      VerifierConfig cfg = conv_config(io);
      cfg.mode = mode;
      const ConvShape conv = kimi_conv(cfg);
      ConvModeRun run(cfg, CallerLayout::compact, conv);
      CallerStorage& c = run.st;
      const int32_t L = cfg.model.layers, N = cfg.max_rows, T = cfg.tokens, C = conv.channels, W = conv.width;
      // Slots 1, 3, 4, 6 in the batch; every conv state byte random, the window at columns [0, W - 1).
      const std::vector<int32_t> batch_slots = {3, 6, 1, 4};
      std::vector<std::vector<std::vector<std::vector<double>>>> history(static_cast<size_t>(N));  // [row][layer][W - 1][C]
      for (int32_t slot = 0; slot < cfg.pool.slots; ++slot) {
        c.prefill(slot, random_states(cfg, rng));
        for (int32_t l = 0; l < L; ++l) {
          const std::vector<uint8_t> row = random_io_bytes(size_t(c.conv_state.row_elems), io, rng, -2.0f, 2.0f);
          c.conv_state.write_row(l, slot, row.data());
          const auto at = std::find(batch_slots.begin(), batch_slots.end(), slot);
          if (at == batch_slots.end()) continue;
          auto& h = history[size_t(at - batch_slots.begin())];
          h.emplace_back(size_t(W - 1), std::vector<double>(size_t(C)));
          for (int32_t j = 0; j < W - 1; ++j)
            for (int32_t ch = 0; ch < C; ++ch) h.back()[size_t(j)][size_t(ch)] = math::load_as_f32(row.data(), io, int64_t(j) * C + ch);
        }
      }
      std::vector<detail::Buffer> weight;
      std::vector<RefConv> ref;
      for (int32_t l = 0; l < L; ++l) {
        std::uniform_real_distribution<float> d(-0.8f, 0.8f);
        std::vector<float> w(size_t(C) * W);
        for (auto& e : w) e = d(rng);
        weight.push_back(detail::Buffer::copy_of(runner().memory(), w));
        ref.push_back(RefConv{C, W, std::vector<double>(w.begin(), w.end()), {}, true});
      }
      std::vector<int32_t> packed = {N};
      packed.insert(packed.end(), batch_slots.begin(), batch_slots.end());
      c.batch.upload(packed.data(), packed.size() * sizeof(int32_t));
      // One conv round of every layer with inputs `x` [layer]; returns the outputs q, k, v per layer.
      auto conv_round = [&](const std::vector<std::vector<uint8_t>>& x) {
        ops::build_indices(runner().stream, c.spec, c.storage, c.batch_view(N), c.idx);
        std::vector<detail::Buffer> x_buffers;
        for (int32_t l = 0; l < L; ++l) {
          x_buffers.push_back(detail::Buffer::copy_of(runner().memory(), x[size_t(l)]));
          for (auto* set : {&run.q, &run.k, &run.v}) (*set)[size_t(l)].fill(0xff);
          ops::conv_layer(runner().stream, c.spec, c.storage, c.idx, N, l,
                          conv_into_verify_inputs(c.spec, x_buffers.back().data(), weight[size_t(l)].as<float>(), nullptr,
                                                  run.q[size_t(l)].data(), run.k[size_t(l)].data(), run.v[size_t(l)].data()));
        }
        return run.outputs();
      };
      auto fresh_x = [&] {
        std::vector<std::vector<uint8_t>> x;
        for (int32_t l = 0; l < L; ++l) x.push_back(random_io_bytes(size_t(N) * T * C, io, rng, -2.0f, 2.0f));
        return x;
      };
      // Row n's inputs of layer l, [T][C].
      auto inputs_of = [&](const std::vector<std::vector<uint8_t>>& x, int32_t l, int32_t n) {
        std::vector<std::vector<double>> xs(static_cast<size_t>(T), std::vector<double>(static_cast<size_t>(C)));
        for (int32_t t = 0; t < T; ++t)
          for (int32_t ch = 0; ch < C; ++ch)
            xs[size_t(t)][size_t(ch)] = math::load_as_f32(x[size_t(l)].data(), io, (int64_t(n) * T + t) * C + ch);
        return xs;
      };
      auto accept = [&](const std::vector<std::vector<uint8_t>>& x, const std::vector<int32_t>& accepted) {
        c.accepted.upload(accepted.data(), accepted.size() * sizeof(int32_t));
        ops::accept(runner().stream, c.spec, c.storage, c.idx, N, c.accepted.as<int32_t>());
        for (int32_t n = 0; n < N; ++n)
          for (int32_t l = 0; l < L; ++l)
            history[size_t(n)][size_t(l)] = ref_after_accept(history[size_t(n)][size_t(l)], inputs_of(x, l, n), accepted[size_t(n)]);
      };
      // The outputs of a round against fp64 from each row's history.
      auto expect_outputs = [&](const std::vector<std::vector<uint8_t>>& x, const std::vector<std::vector<uint8_t>>& y) {
        const int32_t HK = cfg.model.heads * cfg.model.head_k;
        for (int32_t l = 0; l < L; ++l) {
          std::vector<double> got, want;
          for (int32_t n = 0; n < N; ++n) {
            const auto yr = ref_conv(ref[size_t(l)], history[size_t(n)][size_t(l)], inputs_of(x, l, n));
            for (int32_t t = 0; t < T; ++t)
              for (int32_t ch = 0; ch < C; ++ch) {
                const int seg = ch < HK ? 0 : ch < 2 * HK ? 1 : 2;
                const int32_t first = seg * HK, width = seg < 2 ? HK : C - 2 * HK;
                got.push_back(math::load_as_f32(y[size_t(seg * L + l)].data(), io, (int64_t(n) * T + t) * width + ch - first));
                want.push_back(yr[size_t(t)][size_t(ch)]);
              }
          }
          EXPECT_LE(rel_error(got, want), conv_tolerance(io)) << "layer " << l;
        }
      };

      const auto x0 = fresh_x();
      expect_outputs(x0, conv_round(x0));
      accept(x0, {2, T, 1, 3});  // the parity flips: the next round reads half 1
      const auto x1 = fresh_x();
      const auto first = conv_round(x1);
      expect_outputs(x1, first);
      conv_round(fresh_x());  // dropped rounds: never accepted
      conv_round(fresh_x());
      ASSERT_TRUE(conv_round(x1) == first) << "the same round after dropped ones differs: the state changed";
      accept(x1, {T, 1, 2, 1});

      const std::vector<int32_t> parity_before = c.round_parity.download<int32_t>();
      for (int32_t slot : batch_slots) EXPECT_EQ(parity_before[size_t(slot)], 0) << "two accepted rounds flip it back";
      const std::vector<int32_t> all = {1, 3, 4, 6};
      c.materialize_list.upload(all.data(), all.size() * sizeof(int32_t));
      // Replay's materialize replays the (never written) cached tokens with these gate parameters: only the
      // conv state is checked here.
      const GateParams gate{weight[0].as<float>(), weight[0].as<float>()};
      const std::vector<GateParams> gates(size_t(L), gate);
      ops::materialize(runner().stream, c.spec, c.storage, c.materialize_list.as<int32_t>(), 4, gates.data());
      const std::vector<uint8_t> state = c.conv_state.bytes();
      const std::vector<int32_t> accept_len = c.accept_len.download<int32_t>(), parity = c.round_parity.download<int32_t>();
      for (int32_t n = 0; n < N; ++n) {
        const int32_t slot = batch_slots[size_t(n)];
        EXPECT_EQ(accept_len[size_t(slot)], 0) << "slot " << slot;
        EXPECT_EQ(parity[size_t(slot)], 0) << "slot " << slot;
        for (int32_t l = 0; l < L; ++l) {
          const std::vector<uint8_t> row = c.conv_state.row(state, l, slot);
          for (int32_t j = 0; j < W - 1; ++j)
            for (int32_t ch = 0; ch < C; ++ch)
              ASSERT_EQ(math::load_as_f32(row.data(), io, int64_t(j) * C + ch), float(history[size_t(n)][size_t(l)][size_t(j)][size_t(ch)]))
                  << "slot " << slot << " layer " << l << " column " << j << " channel " << ch << ": not the column-0 form";
        }
      }
      const auto x2 = fresh_x();
      expect_outputs(x2, conv_round(x2));  // the round after a materialize reads the column-0 form
    }
  }
}

TEST(ConvOps, ConvLayerNeedsAConv) {
  KDA_SKIP_WITHOUT_RUNNER();
  const VerifierConfig cfg = conv_config(DType::f32);
  CallerStorage c(cfg, CallerLayout::compact);
  try {
    ops::conv_layer(runner().stream, c.spec, c.storage, c.idx, cfg.max_rows, 0, ConvLayerInputs{});
    FAIL() << "a conv without a conv shape was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "spec.conv.width") << e.what();
  }
}

}  // namespace
}  // namespace kdagraph::test
