// docs/ops.md on the program's runner (tests/common/runner.h [TAG_RUNNERS]): the operations over
// caller-owned buffers give what the Verifier gives, bitwise, in every layout engines use; every bad view
// is refused, naming its argument, with every buffer left as it was; what the host cannot check (a
// corrupt index, a bad entry of a device-resident layer table) is clamped by the kernels and recorded.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "graph/validate.h"
#include "kdagraph/ops.hpp"
#include "tests/common/caller_storage.h"
#include "tests/common/conv_rounds.h"
#include "tests/common/engines.h"
#include "tests/common/runner.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {
namespace {

VerifierConfig ops_config(Mode mode, DType state) {
  VerifierConfig c = small_verifier(runner().memory(), mode, /*layers=*/2, /*tokens=*/3);
  c.model = ModelShape{2, 1, 2, 64, 64};  // K = V = 64: a shape the kernels have
  c.pool = PoolShape{6, 4, state};
  c.max_rows = 4;
  return c;
}

class OpsLayouts : public ::testing::TestWithParam<CallerLayout> {};

TEST_P(OpsLayouts, MatchTheVerifierBitwise) {
  KDA_SKIP_WITHOUT_RUNNER();
  if (runner().matrix == Matrix::thread_lanes) GTEST_SKIP() << "OS-thread lanes: the kernel cases run these kernels";
  for (Mode mode : {Mode::fused_accept, Mode::two_phase, Mode::replay})
    for (DType state : {DType::f32, DType::bf16}) {
      VerifierConfig c = ops_config(mode, state);
      if (runner().memory() == Backend::cuda) c.io_dtype = DType::bf16;
      expect_ops_match_verifier(c, GetParam(), runner().stream, fresh_seed(), by_matrix(12, 6, 0));
      if (HasFatalFailure()) return;
    }
}

INSTANTIATE_TEST_SUITE_P(Layouts, OpsLayouts,
                         ::testing::Values(CallerLayout::compact, CallerLayout::layer_table,
                                           CallerLayout::padded_rows, CallerLayout::sglang),
                         [](const auto& param_info) { return std::string(to_string(param_info.param)); });

TEST(Ops, RoundIndicesTileTheirStorage) {
  if (runner().kind != RunnerKind::cpu) GTEST_SKIP() << "host arithmetic: the CPU runner checks it";
  std::vector<int32_t> storage(size_t(round_index_elems(5, 3)), 0);
  const RoundIndices idx = round_indices(storage.data(), 5, 3);
  EXPECT_EQ(idx.capacity, 5);
  EXPECT_EQ(idx.tokens, 3);
  std::vector<int> owners(storage.size(), 0);
  auto mark = [&](const int32_t* p, size_t n) {
    for (size_t i = 0; i < n; ++i) ++owners[size_t(p - storage.data()) + i];
  };
  for (const int32_t* p : {idx.row_slot, idx.seed_pool, idx.seed_scratch, idx.seed_accept, idx.row_accept,
                           idx.ring_pending, idx.ring_start, idx.ring_flush, idx.row_parity})
    mark(p, 5);
  mark(idx.write_row, 15);
  mark(idx.parent, 15);
  EXPECT_EQ(owners, std::vector<int>(storage.size(), 1)) << "every element belongs to exactly one array";
}

// A good fused-accept round on caller storage, and the bad variants of its arguments.
struct BadCall {
  std::string argument;  // what InvalidArgument must name
  std::function<void(RoundSpec&, SlotStorage&, RoundIndices&, LayerInputs&)> spoil;
};

std::vector<BadCall> bad_calls(CallerStorage& c) {
  auto misaligned = [](void* p) { return static_cast<void*>(static_cast<char*>(p) + 4); };
  void* table_base = c.pool.per_layer.empty() ? nullptr : c.pool.per_layer[0].data();
  return {
      {"storage.pool", [](auto&, SlotStorage& s, auto&, auto&) { s.pool.base = nullptr; }},
      {"storage.pool.base", [&](auto&, SlotStorage& s, auto&, auto&) { s.pool.base = misaligned(s.pool.base); }},
      {"storage.pool", [&](auto&, SlotStorage& s, auto&, auto&) { s.pool.layer_table = c.scratch.view.layer_table ? c.scratch.view.layer_table : reinterpret_cast<void* const*>(&table_base); }},
      {"storage.pool.row_stride", [](auto&, SlotStorage& s, auto&, auto&) { s.pool.row_stride -= 4; }},
      {"storage.pool.row_stride", [](auto&, SlotStorage& s, auto&, auto&) { s.pool.row_stride += 1; }},
      {"storage.pool.layers", [](auto&, SlotStorage& s, auto&, auto&) { s.pool.layers = 1; }},
      {"storage.pool.rows", [](auto&, SlotStorage& s, auto&, auto&) { s.pool.rows = s.slots - 1; }},
      {"storage.pool.layer_stride", [](auto&, SlotStorage& s, auto&, auto&) { s.pool.layer_stride = s.pool.row_stride; }},
      {"storage.scratch.layer_stride", [](auto&, SlotStorage& s, auto&, auto&) { s.scratch.layer_stride += 1; }},
      {"storage.pool.dtype", [](auto&, SlotStorage& s, auto&, auto&) { s.pool.dtype = DType(7); }},
      {"storage.scratch.rows", [](auto&, SlotStorage& s, auto&, auto&) { s.scratch.rows = int64_t(s.slots) * s.scratch_steps - 1; }},
      {"storage.scratch.dtype", [](auto&, SlotStorage& s, auto&, auto&) { s.scratch.dtype = DType::bf16; }},
      {"storage.scratch_steps", [](RoundSpec& sp, SlotStorage& s, auto&, auto&) { s.scratch_steps = sp.tokens - 1; }},
      {"storage.slots", [](auto&, SlotStorage& s, auto&, auto&) { s.slots = 0; }},
      {"storage.accept_len", [](auto&, SlotStorage& s, auto&, auto&) { s.accept_len = nullptr; }},
      {"storage.accept_len", [&](auto&, SlotStorage& s, auto&, auto&) { s.accept_len = static_cast<int32_t*>(static_cast<void*>(reinterpret_cast<char*>(s.accept_len) + 2)); }},
      {"idx.tokens", [](auto&, auto&, RoundIndices& i, auto&) { i.tokens += 1; }},
      {"rows", [](auto&, auto&, RoundIndices& i, auto&) { i.capacity = 2; }},
      {"idx.write_row", [](auto&, auto&, RoundIndices& i, auto&) { i.write_row = nullptr; }},
      {"idx.seed_scratch", [](auto&, auto&, RoundIndices& i, auto&) { i.seed_scratch = nullptr; }},
      {"model.value_heads", [](RoundSpec& sp, auto&, auto&, auto&) { sp.model.heads = 2; sp.model.value_heads = 3; }},
      {"mode", [](RoundSpec& sp, auto&, auto&, auto&) { sp.mode = Mode(9); }},
      {"rounding", [](RoundSpec& sp, auto&, auto&, auto&) { sp.rounding = Rounding(5); }},
      {"q", [](auto&, auto&, auto&, LayerInputs& in) { in.q = nullptr; }},
      {"g", [&](auto&, auto&, auto&, LayerInputs& in) { in.g = misaligned(const_cast<void*>(in.g)); }},
      {"A_log", [](auto&, auto&, auto&, LayerInputs& in) { in.A_log = reinterpret_cast<const float*>(reinterpret_cast<const char*>(in.A_log) + 2); }},
      {"gate_heads", [](auto&, auto&, auto&, LayerInputs& in) { in.gate_heads = 3; }},
      {"q_strides.token", [](auto&, auto&, auto&, LayerInputs& in) { in.q_strides.token = 3; }},
      {"v_strides.row", [](auto&, auto&, auto&, LayerInputs& in) { in.v_strides.row = -64; }},
  };
}

// Calls every operation with each bad variant of its arguments on caller storage of `mode`, expecting
// InvalidArgument naming the argument and every buffer unchanged; returns how many calls were refused.
int expect_refused_and_unchanged(Mode mode, const std::function<std::vector<BadCall>(CallerStorage&)>& bad_calls_of) {
  std::mt19937_64 rng(fresh_seed());
  const VerifierConfig cfg = ops_config(mode, DType::f32);
  CallerStorage c(cfg, CallerLayout::compact);
  BackendInputs in(cfg);
  in.randomize(rng);
  for (int32_t slot = 0; slot < cfg.pool.slots; ++slot) c.prefill(slot, random_states(cfg, rng));
  const std::vector<int32_t> packed = {2, 4, 1, -1, -1};
  c.batch.upload(packed.data(), packed.size() * sizeof(int32_t));
  const std::vector<int32_t> accepted = {2, 3, 0, 0};
  c.accepted.upload(accepted.data(), accepted.size() * sizeof(int32_t));
  const int32_t rows = cfg.max_rows;
  const std::vector<GateParams> gates(size_t(cfg.model.layers),
                                      GateParams{in.gate.as<float>(), in.gate.as<float>() + cfg.model.value_heads});

  // Every operation, with possibly spoiled arguments.
  using Op = std::function<void(const RoundSpec&, const SlotStorage&, const RoundIndices&, const LayerInputs&)>;
  const std::vector<std::pair<const char*, Op>> operations = {
      {"build_indices", [&](auto& sp, auto& st, auto& idx, auto&) { ops::build_indices(runner().stream, sp, st, c.batch_view(rows), idx); }},
      {"verify_layer", [&](auto& sp, auto& st, auto& idx, auto& li) { ops::verify_layer(runner().stream, sp, st, idx, rows, 1, li); }},
      {"accept", [&](auto& sp, auto& st, auto& idx, auto&) { ops::accept(runner().stream, sp, st, idx, rows, c.accepted.as<int32_t>()); }},
      {"materialize", [&](auto& sp, auto& st, auto&, auto&) { ops::materialize(runner().stream, sp, st, c.batch.as<int32_t>() + 1, 2, gates.data()); }},
  };
  auto snapshot = [&] {
    std::vector<std::vector<uint8_t>> all = {c.pool.bytes(),
                                             c.scratch.bytes(),
                                             c.ring_kg.bytes(),
                                             c.ring_u.bytes(),
                                             c.ring_cursor.download<uint8_t>(),
                                             c.accept_len.download<uint8_t>(),
                                             c.round_parity.download<uint8_t>(),
                                             c.index_storage.download<uint8_t>()};
    for (const auto& o : in.o[1]) all.push_back(o.download<uint8_t>());
    return all;
  };
  const auto before = snapshot();
  int refused = 0;
  for (const BadCall& bad : bad_calls_of(c)) {
    for (const auto& [name, op] : operations) {
      RoundSpec spec = c.spec;
      SlotStorage storage = c.storage;
      RoundIndices idx = c.idx;
      LayerInputs layer = in.view(1, 1);
      bad.spoil(spec, storage, idx, layer);
      const bool inputs_spoiled = bad.argument == "q" || bad.argument == "g" || bad.argument == "A_log" ||
                                  bad.argument == "gate_heads" || bad.argument.find("_strides.") != std::string::npos;
      const bool uses_indices = std::string(name) != "materialize";
      if ((inputs_spoiled && std::string(name) != "verify_layer") ||
          (!uses_indices && (bad.argument.rfind("idx.", 0) == 0 || bad.argument == "rows")))
        continue;  // an argument this operation does not take
      SCOPED_TRACE(std::string(to_string(mode)) + ": " + name + " with a bad " + bad.argument);
      try {
        op(spec, storage, idx, layer);
        ADD_FAILURE() << "was accepted";
      } catch (const InvalidArgument& e) {
        EXPECT_EQ(e.argument(), bad.argument) << e.what();
        EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << "names the operation: " << e.what();
        ++refused;
      }
      EXPECT_EQ(snapshot(), before) << "a refused call changed a buffer";
    }
  }
  return refused;
}

TEST(Ops, BadViewsAreRefusedNamingTheArgumentAndChangeNothing) {
  KDA_SKIP_WITHOUT_RUNNER();
  EXPECT_GT(expect_refused_and_unchanged(Mode::fused_accept, bad_calls), 60);
}

// Replay's own storage: the ring's views and cursor, and the indices only it reads; its spec's ring.
std::vector<BadCall> bad_replay_calls(CallerStorage&) {
  return {
      {"storage.ring_kg.dtype", [](auto&, SlotStorage& s, auto&, auto&) { s.ring_kg.dtype = DType::bf16; }},
      {"storage.ring_kg.rows", [](auto&, SlotStorage& s, auto&, auto&) { s.ring_kg.rows = int64_t(s.slots) - 1; }},
      {"storage.ring_kg.row_stride", [](auto&, SlotStorage& s, auto&, auto&) { s.ring_kg.row_stride -= 4; }},
      {"storage.ring_kg.layers", [](auto&, SlotStorage& s, auto&, auto&) { s.ring_kg.layers = 3; }},
      {"storage.ring_kg", [](auto&, SlotStorage& s, auto&, auto&) { s.ring_kg.base = nullptr; }},
      {"storage.ring_u.dtype", [](auto&, SlotStorage& s, auto&, auto&) { s.ring_u.dtype = DType::bf16; }},
      {"storage.ring_u.row_stride", [](auto&, SlotStorage& s, auto&, auto&) { s.ring_u.row_stride -= 4; }},
      {"storage.ring_pending", [](auto&, SlotStorage& s, auto&, auto&) { s.ring_pending = nullptr; }},
      {"storage.ring_start", [](auto&, SlotStorage& s, auto&, auto&) { s.ring_start = nullptr; }},
      {"idx.ring_pending", [](auto&, auto&, RoundIndices& i, auto&) { i.ring_pending = nullptr; }},
      {"idx.ring_flush", [](auto&, auto&, RoundIndices& i, auto&) { i.ring_flush = nullptr; }},
      {"ring.records", [](RoundSpec& sp, auto&, auto&, auto&) { sp.ring.records = 2 * sp.tokens - 1; }},
      {"ring.flush_min", [](RoundSpec& sp, auto&, auto&, auto&) { sp.ring.flush_min = sp.ring.records - sp.tokens + 1; }},
      {"ring.flush_min", [](RoundSpec& sp, auto&, auto&, auto&) { sp.ring.flush_min = -1; }},
      {"storage.pool.row_stride", [](auto&, SlotStorage& s, auto&, auto&) { s.pool.row_stride += 2; }},
  };
}

TEST(Ops, BadReplayViewsAreRefusedNamingTheArgumentAndChangeNothing) {
  KDA_SKIP_WITHOUT_RUNNER();
  EXPECT_GT(expect_refused_and_unchanged(Mode::replay, bad_replay_calls), 40);
}

// docs/low_precision.md: stochastic rounding into a 16-bit state keys its draws by seeds and counters the caller
// keeps; without them every operation of the round refuses, naming them.
TEST(Ops, StochasticRoundingNeedsTheSlotsSeedsAndCounters) {
  KDA_SKIP_WITHOUT_RUNNER();
  std::mt19937_64 rng(fresh_seed());
  const VerifierConfig cfg = ops_config(Mode::fused_accept, DType::bf16);
  CallerStorage c(cfg, CallerLayout::compact);
  BackendInputs in(cfg);
  in.randomize(rng);
  RoundSpec spec = c.spec;
  spec.rounding = Rounding::stochastic;
  const std::vector<int32_t> accepted(size_t(cfg.max_rows), 1);
  c.accepted.upload(accepted.data(), accepted.size() * sizeof(int32_t));
  for (const char* name : {"verify_layer", "accept"}) {
    SCOPED_TRACE(name);
    try {
      if (std::string(name) == "verify_layer") ops::verify_layer(runner().stream, spec, c.storage, c.idx, cfg.max_rows, 1, in.view(1, 1));
      else ops::accept(runner().stream, spec, c.storage, c.idx, cfg.max_rows, c.accepted.as<int32_t>());
      ADD_FAILURE() << "was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.argument(), "storage.rounding_seed") << e.what();
    }
  }
  spec.rounding = Rounding::nearest;  // the same storage rounds to nearest without them
  EXPECT_NO_THROW(ops::verify_layer(runner().stream, spec, c.storage, c.idx, cfg.max_rows, 1, in.view(1, 1)));
}

// g and beta in fp32 beside 16-bit io (vLLM's decode) in every mode but replay at a 16-bit io dtype,
// whose ring keeps g in that dtype: refused there by name.
TEST(Ops, Fp32GatesBesideSixteenBitIoAreRefusedOnlyWithTheRing) {
  alignas(16) static float buffer[64];
  LayerInputs in;
  in.q = in.k = in.v = in.g = in.beta = buffer;
  in.o = buffer;
  in.gate_f32 = true;
  for (Mode mode : {Mode::two_phase, Mode::fused_accept, Mode::replay})
    for (DType io : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(std::string(to_string(mode)) + " io " + to_string(io));
      RoundSpec spec = round_spec(ops_config(mode, DType::f32));
      spec.io_dtype = io;
      if (mode != Mode::replay || io == DType::f32) {
        EXPECT_NO_THROW(detail::validate_layer_inputs("verify_layer", in, spec));
        continue;
      }
      try {
        detail::validate_layer_inputs("verify_layer", in, spec);
        ADD_FAILURE() << "was accepted";
      } catch (const InvalidArgument& e) {
        EXPECT_EQ(e.argument(), "gate_f32") << e.what();
      }
    }
}

// The ring cursors live in memory the caller owns and the device writes. A slot's cursor outside the
// ring (ring_pending above R - T, ring_start outside [0, R)) is clamped by the index build, and so are the
// indices' copies if they are corrupted after the build, by the verify. Each is recorded, and the
// layer's results equal a round run on the clamped cursors, bitwise.
TEST(Ops, CorruptRingCursorsAreClampedAndRecorded) {
  KDA_SKIP_WITHOUT_RUNNER();
  const uint64_t seed = fresh_seed();
  const VerifierConfig cfg = ops_config(Mode::replay, DType::f32);
  const int32_t T = cfg.tokens, rows = cfg.max_rows, P = cfg.pool.slots;
  const int32_t R = round_spec(cfg).ring.records;
  // Runs the layer from slot cursors `pending` and `start`, on indices `edit` changed, recording into
  // `errors` (host-mapped where on a device).
  auto run = [&](std::vector<int32_t> pending, std::vector<int32_t> start,
                 const std::function<void(std::vector<int32_t>&, const RoundIndices&)>& edit,
                 const detail::MappedHostBuffer& errors) {
    *static_cast<DeviceErrorWord*>(errors.host()) = DeviceErrorWord{};
    std::mt19937_64 rng(seed);
    CallerStorage c(cfg, CallerLayout::compact);
    BackendInputs in(cfg);
    in.randomize(rng);
    c.storage.errors = static_cast<DeviceErrorWord*>(errors.device());
    for (int32_t slot = 0; slot < P; ++slot) {
      c.prefill(slot, random_states(cfg, rng));
      for (int32_t l = 0; l < cfg.model.layers; ++l) {  // records to fold: any values
        c.ring_kg.write_row(l, slot, random_io_bytes(size_t(c.ring_kg.row_elems), cfg.io_dtype, rng, -1, 1).data());
        c.ring_u.write_row(l, slot, random_io_bytes(size_t(c.ring_u.row_elems), DType::f32, rng, -0.1f, 0.1f).data());
      }
    }
    std::vector<int32_t> cursor = pending;
    cursor.insert(cursor.end(), start.begin(), start.end());
    c.ring_cursor.upload(cursor.data(), cursor.size() * sizeof(int32_t));
    const std::vector<int32_t> packed = {3, 2, 4, 1};  // n_real, then the slots
    c.batch.upload(packed.data(), packed.size() * sizeof(int32_t));
    ops::build_indices(runner().stream, c.spec, c.storage, c.batch_view(rows), c.idx);
    std::vector<int32_t> idx = c.index_storage.download<int32_t>();
    edit(idx, c.idx);
    c.index_storage.upload(idx.data(), idx.size() * sizeof(int32_t));
    ops::verify_layer(runner().stream, c.spec, c.storage, c.idx, rows, 1, in.view(1, 1));
    detail::wait_for_device(runner().memory());
    return std::vector<std::vector<uint8_t>>{in.o[1][1].download<uint8_t>(), c.pool.bytes(), c.ring_kg.bytes(),
                                             c.ring_u.bytes()};
  };
  auto at = [](const RoundIndices& i, const int32_t* array) { return size_t(array - i.row_slot); };
  const detail::MappedHostBuffer corrupt_errors(runner().memory(), sizeof(DeviceErrorWord)),
      clamped_errors(runner().memory(), sizeof(DeviceErrorWord));
  const auto count = [](const detail::MappedHostBuffer& e) {
    return read_device_errors(static_cast<const DeviceErrorWord*>(e.host())).count;
  };
  // Three real rows, slots 2, 4 and 1, and a padded one. Slot 4's pending count and slot 2's start are
  // out of range in the slots' cursor; rows 2 and 1 get an out-of-range count and start in the indices
  // after the build.
  std::vector<int32_t> pending(size_t(P), 2), start(size_t(P), 1);
  std::vector<int32_t> bad_pending = pending, bad_start = start;
  bad_pending[4] = R - T + 5;
  bad_start[2] = -4;
  const auto corrupt = run(bad_pending, bad_start,
                           [&](std::vector<int32_t>& v, const RoundIndices& i) {
                             v[at(i, i.ring_pending) + 2] = 100;
                             v[at(i, i.ring_start) + 1] = R;
                           },
                           corrupt_errors);
  std::vector<int32_t> fixed_pending = pending, fixed_start = start;
  fixed_pending[4] = R - T;
  fixed_start[2] = 0;
  const auto clamped = run(fixed_pending, fixed_start,
                           [&](std::vector<int32_t>& v, const RoundIndices& i) {
                             v[at(i, i.ring_pending) + 2] = R - T;
                             v[at(i, i.ring_start) + 1] = R - 1;
                           },
                           clamped_errors);
  EXPECT_EQ(count(clamped_errors), 0u);
  EXPECT_EQ(count(corrupt_errors), 4u) << "each corrupt cursor once";
  ASSERT_EQ(corrupt.size(), clamped.size());
  for (size_t b = 0; b < corrupt.size(); ++b) EXPECT_EQ(first_difference(corrupt[b], clamped[b]), -1) << "buffer " << b;
}

TEST(Ops, AReplayMaterializeWithTheGateInTheKernelNeedsEachLayersGate) {
  KDA_SKIP_WITHOUT_RUNNER();
  const VerifierConfig cfg = ops_config(Mode::replay, DType::f32);
  CallerStorage c(cfg, CallerLayout::compact);
  const std::vector<int32_t> slots = {1};
  c.materialize_list.upload(slots.data(), sizeof(int32_t));
  // Absent parameters are zeros (docs/python.md); a misaligned one is refused by name.
  const std::vector<float> weights(16, 0.5f);
  std::vector<GateParams> gates(size_t(cfg.model.layers));
  gates[0].A_log = reinterpret_cast<const float*>(reinterpret_cast<const char*>(weights.data()) + 2);
  for (const GateParams* g : {static_cast<const GateParams*>(nullptr), static_cast<const GateParams*>(gates.data())}) {
    try {
      ops::materialize(runner().stream, c.spec, c.storage, c.materialize_list.as<int32_t>(), 1, g);
      ADD_FAILURE() << "accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.argument(), g == nullptr ? "gates" : "gates[0].A_log") << e.what();
    }
  }
}

TEST(Ops, CommitIsTwoPhaseOnly) {
  KDA_SKIP_WITHOUT_RUNNER();
  const VerifierConfig cfg = ops_config(Mode::fused_accept, DType::f32);
  CallerStorage c(cfg, CallerLayout::compact);
  try {
    ops::commit(runner().stream, c.spec, c.storage, c.idx, cfg.max_rows);
    FAIL() << "a fused-accept commit was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "spec.mode");
  }
}

// Where the layer table is in host memory (the CPU backend, the executor) the host reads it and refuses a
// bad entry; in device memory the kernels record it (next test).
TEST(Ops, ABadEntryInAHostLayerTableIsRefusedByName) {
  if (runner().memory() != Backend::cpu) GTEST_SKIP() << "the table is in device memory: the next test";
  const VerifierConfig cfg = ops_config(Mode::fused_accept, DType::f32);
  CallerStorage c(cfg, CallerLayout::layer_table);
  std::vector<void*> table = {c.pool.per_layer[0].data(), nullptr};
  SlotStorage storage = c.storage;
  storage.pool.layer_table = table.data();
  for (void* bad : {static_cast<void*>(nullptr), static_cast<void*>(c.pool.per_layer[1].as<char>() + 8)}) {
    table[1] = bad;
    try {
      ops::build_indices(runner().stream, c.spec, storage, c.batch_view(1), c.idx);
      ADD_FAILURE() << "a bad table entry was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.argument(), "storage.pool.layer_table[1]") << e.what();
    }
  }
}

TEST(Ops, ANullEntryOfADeviceLayerTableIsRecordedAndItsRowsArePadding) {
  KDA_SKIP_WITHOUT_RUNNER();
  if (runner().memory() == Backend::cpu) GTEST_SKIP() << "the table is in host memory: the host refuses it";
  std::mt19937_64 rng(fresh_seed());
  const VerifierConfig cfg = ops_config(Mode::fused_accept, DType::f32);
  CallerStorage c(cfg, CallerLayout::layer_table);
  BackendInputs in(cfg);
  in.randomize(rng);
  for (int32_t slot = 0; slot < cfg.pool.slots; ++slot) c.prefill(slot, random_states(cfg, rng));
  const std::vector<void*> bad_table = {c.pool.per_layer[0].data(), nullptr};
  const auto table = detail::Buffer::copy_of(runner().memory(), bad_table);
  detail::MappedHostBuffer errors(runner().memory(), sizeof(DeviceErrorWord));
  *static_cast<DeviceErrorWord*>(errors.host()) = DeviceErrorWord{};
  SlotStorage storage = c.storage;
  storage.pool.layer_table = table.as<void*>();
  storage.errors = static_cast<DeviceErrorWord*>(errors.device());
  const std::vector<int32_t> packed = {2, 4, 1, -1, -1};
  c.batch.upload(packed.data(), packed.size() * sizeof(int32_t));
  const std::vector<uint8_t> scratch_before = c.scratch.bytes();
  ops::build_indices(runner().stream, c.spec, storage, c.batch_view(cfg.max_rows), c.idx);
  ops::verify_layer(runner().stream, c.spec, storage, c.idx, cfg.max_rows, 1, in.view(1, 1));
  detail::wait_for_device(runner().memory());
  const DeviceErrorWord word = read_device_errors(static_cast<const DeviceErrorWord*>(errors.host()));
  EXPECT_EQ(DeviceErrorCode(word.code), DeviceErrorCode::layer_base_invalid);
  EXPECT_EQ(word.value, 1) << "the layer";
  EXPECT_EQ(word.count, 2u) << "once per real row";
  const auto out = in.o[1][1].download<uint32_t>();
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], 0u) << "output element " << i << " is not zero";
  EXPECT_EQ(c.scratch.bytes(), scratch_before) << "no post-state is written for a layer with no valid base";
}

}  // namespace
}  // namespace kdagraph::test
