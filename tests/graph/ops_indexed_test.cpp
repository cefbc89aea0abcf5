// docs/python.md on the CPU backend: the two operations the Python drop-ins are built on. verify_indexed
// (FlashInfer's rows named by the caller) runs the very verify of the slot-indexed ops, so it must agree
// with it bitwise wherever both can express a round, frozen (no state written) or not; build_slot_indices
// is SGLang's index pair.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kdagraph/ops.hpp"
#include "tests/common/verify_case.h"

namespace kdagraph::test {
namespace {

const Stream kCpu{Backend::cpu, nullptr};

CaseShape indexed_shape(DType io, DType state, int options) {
  CaseShape s = sweep_shape(16, 3, 2, options, 4);
  s.io = io;
  s.state = state;
  s.slots = 5;
  s.scratch_steps = 4;
  return s;
}

RoundSpec spec_of(const CaseShape& s) {
  RoundSpec spec;
  spec.model = ModelShape{1, s.heads, s.value_heads, s.head_k, s.head_v};
  spec.tokens = s.tokens;
  spec.io_dtype = s.io;
  spec.options = s.options;
  return spec;
}

LayerInputs inputs_of(VerifyCase& c) {
  const VerifyParams p = c.params();
  LayerInputs in;
  in.q = p.q;
  in.k = p.k;
  in.v = p.v;
  in.g = p.g;
  in.beta = p.beta;
  in.o = p.o;
  in.A_log = c.A_log.data();
  in.dt_bias = c.dt_bias.data();
  return in;
}

// Rows 0 to 2 real (slots 3, 0, 4), row 3 padded; accept lengths per slot.
VerifyCase make_case(const CaseShape& s, uint64_t seed, std::vector<int32_t> accept_len) {
  return VerifyCase(s, seed, {3, 0, 4, -1}, std::move(accept_len));
}

// Every mode seeds either from the pool (accept_len 0) or from the scratch row a - 1; the indexed op
// names the same seeds its own way. Outputs and every state byte must agree bitwise.
// A frozen verify (write_states false) gives the same outputs and leaves every state byte as it was.
void expect_indexed_matches_slot_verify(bool from_scratch, DType io, DType state, int options, bool write_states = true) {
  SCOPED_TRACE(std::string(from_scratch ? "seed_token" : "seed_row") + " io=" + to_string(io) +
               " state=" + to_string(state) + " options=" + std::to_string(options) +
               (write_states ? "" : " frozen"));
  const CaseShape shape = indexed_shape(io, state, options);
  const uint64_t seed = fresh_seed();
  std::mt19937 rng{uint32_t(seed)};
  std::vector<int32_t> accept_len(size_t(shape.slots));
  for (int32_t& a : accept_len) a = from_scratch ? 1 + int32_t(rng() % uint32_t(shape.tokens)) : 0;
  VerifyCase ref = make_case(shape, seed, accept_len);
  VerifyCase got = make_case(shape, seed, accept_len);
  const std::vector<uint8_t> scratch_before = got.scratch.bytes;
  ASSERT_EQ(ref.row_slot, (std::vector<int32_t>{3, 0, 4, -1}));
  verify_cpu(ref.params());

  IndexedRows idx;
  std::vector<int32_t> seed_token(size_t(shape.rows), 0);  // padded rows: a length nobody reads
  for (int n = 0; n < shape.rows; ++n)
    if (got.row_slot[size_t(n)] >= 0) seed_token[size_t(n)] = got.seed_accept[size_t(n)];
  if (from_scratch) idx.seed_token = seed_token.data();
  else idx.seed_row = got.row_slot.data();
  idx.write_row = got.write_row.data();
  idx.write_states = write_states;
  DeviceErrorWord errors;
  const VerifyParams p = got.params();
  ops::verify_indexed(kCpu, spec_of(shape), p.pool, p.scratch, idx, shape.rows, 0, inputs_of(got), &errors);

  EXPECT_EQ(first_difference(got.o.bytes, ref.o.bytes), -1) << "outputs differ from the slot-indexed verify";
  if (write_states) EXPECT_EQ(first_difference(got.scratch.bytes, ref.scratch.bytes), -1) << "post-states differ";
  else EXPECT_EQ(first_difference(got.scratch.bytes, scratch_before), -1) << "a frozen verify wrote a state row";
  EXPECT_EQ(first_difference(got.pool.bytes, ref.pool.bytes), -1) << "the pool changed";
  EXPECT_EQ(errors.count, 0u) << "a padded row's length was checked, or a valid row was refused";
}

TEST(OpsIndexed, SeedTokenIsTheFusedAcceptSeedBitwise) {
  for (int options : {0, 1 + 8, 3 + 16, 1 + 2 + 32})
    for (DType io : {DType::f32, DType::bf16})
      for (DType state : {DType::f32, DType::bf16}) expect_indexed_matches_slot_verify(true, io, state, options);
}

TEST(OpsIndexed, SeedRowIsThePoolSeedBitwise) {
  for (int options : {0, 1 + 8, 3 + 16, 1 + 2 + 32})
    for (DType io : {DType::f32, DType::bf16})
      for (DType state : {DType::f32, DType::bf16}) expect_indexed_matches_slot_verify(false, io, state, options);
}

TEST(OpsIndexed, AFrozenVerifyHasTheOutputsAndWritesNoState) {
  for (bool from_scratch : {true, false})
    for (DType io : {DType::f32, DType::bf16})
      expect_indexed_matches_slot_verify(from_scratch, io, DType::f32, 1 + 8, /*write_states=*/false);
}

// One row, T = 3, states [R rows]: token t's post-state to row writes[t], seeds as given.
struct OneRow {
  CaseShape shape = indexed_shape(DType::f32, DType::f32, 1);
  VerifyCase c;
  std::vector<int32_t> writes, token, seed_row;
  DeviceErrorWord errors;
  explicit OneRow(std::vector<int32_t> w)
      : c(VerifyCase([] {
          CaseShape s = indexed_shape(DType::f32, DType::f32, 1);
          s.rows = 1;
          return s;
        }(), fresh_seed(), {1}, std::vector<int32_t>(5, 0))),
        writes(std::move(w)) {}
  void run(const int32_t* seed_token, const int32_t* seed_rows) {
    CaseShape s = shape;
    s.rows = 1;
    IndexedRows idx;
    idx.seed_token = seed_token;
    idx.seed_row = seed_rows;
    idx.write_row = writes.data();
    const VerifyParams p = c.params();
    ops::verify_indexed(kCpu, spec_of(s), p.pool, p.scratch, idx, 1, 0, inputs_of(c), &errors);
  }
};

TEST(OpsIndexed, ASeedLengthOutsideOneToTIsClampedAndRecorded) {
  for (const auto& [bad, good] : std::vector<std::pair<int32_t, int32_t>>{{0, 1}, {-4, 1}, {4, 3}, {99, 3}}) {
    SCOPED_TRACE("seed length " + std::to_string(bad));
    OneRow clamped({7, 2, 11}), exact({7, 2, 11});
    exact.c = clamped.c;  // the same inputs and states
    clamped.run(&bad, nullptr);
    exact.run(&good, nullptr);
    EXPECT_EQ(first_difference(clamped.c.o.bytes, exact.c.o.bytes), -1);
    EXPECT_EQ(first_difference(clamped.c.scratch.bytes, exact.c.scratch.bytes), -1);
    EXPECT_EQ(clamped.errors.code, uint32_t(DeviceErrorCode::accept_out_of_range));
    EXPECT_EQ(clamped.errors.value, bad);
    EXPECT_EQ(exact.errors.count, 0u);
  }
}

TEST(OpsIndexed, ARowOutsideTheStatesIsNotTouchedAndRecorded) {
  OneRow r({7, 20, 11});  // scratch view: P * S = 20 rows, so row 20 is one past the end
  const std::vector<uint8_t> before = r.c.scratch.bytes;
  const int32_t token = 1;
  r.run(&token, nullptr);
  EXPECT_EQ(r.errors.code, uint32_t(DeviceErrorCode::slot_out_of_range));
  EXPECT_EQ(r.errors.value, 20);
  const size_t row = size_t(r.c.geo.row_stride()) * 4;  // bytes of one f32 row
  for (int32_t other = 0; other < 20; ++other) {
    const bool written = other == 7 || other == 11;
    const bool same = std::equal(before.begin() + ptrdiff_t(row * size_t(other)), before.begin() + ptrdiff_t(row * size_t(other + 1)),
                                 r.c.scratch.bytes.begin() + ptrdiff_t(row * size_t(other)));
    EXPECT_EQ(same, !written) << "state row " << other;
  }

  OneRow s({7, 2, 11});
  const std::vector<uint8_t> states_before = s.c.scratch.bytes;
  const std::vector<int32_t> seed = {5};  // the seeds view (the pool) has 5 rows
  s.run(nullptr, seed.data());
  EXPECT_EQ(s.errors.code, uint32_t(DeviceErrorCode::slot_out_of_range));
  EXPECT_EQ(s.errors.value, 5);
  EXPECT_EQ(first_difference(s.c.scratch.bytes, states_before), -1) << "a padded row writes no state";
  for (size_t i = 0; i < s.c.o.size(); ++i) ASSERT_EQ(s.c.o.at(i), 0.0f) << "a padded row outputs zeros";
}

TEST(OpsIndexed, BadArgumentsAreRefusedNamingThemAndChangeNothing) {
  const CaseShape shape = indexed_shape(DType::f32, DType::f32, 1 + 16);
  VerifyCase c = make_case(shape, fresh_seed(), std::vector<int32_t>(5, 1));
  std::vector<int32_t> tokens(size_t(shape.rows), 1);
  struct Bad {
    const char* argument;
    std::function<void(RoundSpec&, StateView&, StateView&, IndexedRows&, LayerInputs&, int32_t&)> spoil;
  };
  const std::vector<Bad> bad = {
      {"idx", [](auto&, auto&, auto&, IndexedRows& i, auto&, auto&) { i.seed_row = i.write_row; }},
      {"idx", [](auto&, auto&, auto&, IndexedRows& i, auto&, auto&) { i.seed_token = nullptr; }},
      {"idx.write_row", [](auto&, auto&, auto&, IndexedRows& i, auto&, auto&) { i.write_row = nullptr; }},
      {"seeds.dtype", [](auto&, StateView& seeds, auto&, IndexedRows& i, auto&, auto&) {
         i.seed_row = i.seed_token;
         i.seed_token = nullptr;
         seeds.dtype = DType::bf16;
       }},
      {"states.row_stride", [](auto&, auto&, StateView& st, auto&, auto&, auto&) { st.row_stride += 1; }},
      {"states.layers", [](auto&, auto&, StateView& st, auto&, auto&, auto&) { st.layers = 2; }},
      {"states", [](auto&, auto&, StateView& st, auto&, auto&, auto&) { st.base = nullptr; }},
      {"rows", [](auto&, auto&, auto&, auto&, auto&, int32_t& rows) { rows = 0; }},
      {"layer", [](RoundSpec& sp, auto&, auto&, auto&, auto&, auto&) { sp.model.layers = 1; }},
      {"model.value_heads", [](RoundSpec& sp, auto&, auto&, auto&, auto&, auto&) { sp.model.heads = 2; sp.model.value_heads = 3; }},
      {"q", [](auto&, auto&, auto&, auto&, LayerInputs& in, auto&) { in.q = nullptr; }},
      {"dt_bias", [](auto&, auto&, auto&, auto&, LayerInputs& in, auto&) { in.dt_bias = reinterpret_cast<const float*>(reinterpret_cast<const char*>(in.dt_bias) + 2); }},
      {"k_strides.head", [](auto&, auto&, auto&, auto&, LayerInputs& in, auto&) { in.k_strides.head = 2; }},
  };
  const std::vector<uint8_t> o_before = c.o.bytes, scratch_before = c.scratch.bytes;
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.argument);
    RoundSpec spec = spec_of(shape);
    const VerifyParams p = c.params();
    StateView seeds = p.pool, states = p.scratch;
    IndexedRows idx;
    idx.seed_token = tokens.data();
    idx.write_row = c.write_row.data();
    LayerInputs in = inputs_of(c);
    int32_t rows = shape.rows;
    int32_t layer = 0;
    b.spoil(spec, seeds, states, idx, in, rows);
    if (std::string(b.argument) == "layer") layer = 1;
    try {
      ops::verify_indexed(kCpu, spec, seeds, states, idx, rows, layer, in);
      ADD_FAILURE() << "was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.argument(), b.argument) << e.what();
      EXPECT_NE(std::string(e.what()).find("ops::verify_indexed"), std::string::npos) << e.what();
    }
    EXPECT_EQ(c.o.bytes, o_before);
    EXPECT_EQ(c.scratch.bytes, scratch_before);
  }
}

// ---- build_slot_indices ----------------------------------------------------------------------------

struct SlotCase {
  int32_t P, S, T;
  std::vector<int32_t> slots;
};

TEST(OpsSlotIndices, RowsAreSlotTimesSPlusTAndPaddedRowsAreNegative) {
  std::mt19937 rng{uint32_t(fresh_seed())};
  for (const SlotCase& c : std::vector<SlotCase>{{6, 4, 4, {0, 5, -1, 2, -1}}, {9, 6, 2, {-1, 8, 0}}, {3, 1, 1, {2, 1, 0}}}) {
    SCOPED_TRACE("P=" + std::to_string(c.P) + " S=" + std::to_string(c.S) + " T=" + std::to_string(c.T));
    const int32_t N = int32_t(c.slots.size());
    std::vector<int32_t> accept_len(size_t(c.P));
    for (int32_t& a : accept_len) a = 1 + int32_t(rng() % uint32_t(c.S));
    std::vector<int32_t> write_row(size_t(N) * c.T, 77), accepted(size_t(N), 77);
    DeviceErrorWord errors;
    ops::build_slot_indices(kCpu, c.slots.data(), N, accept_len.data(), c.P, c.S, c.T, write_row.data(),
                            accepted.data(), &errors);
    EXPECT_EQ(errors.count, 0u);
    for (int32_t n = 0; n < N; ++n) {
      const int32_t slot = c.slots[size_t(n)];
      EXPECT_EQ(accepted[size_t(n)], accept_len[size_t(std::max(slot, 0))]) << "row " << n;
      for (int32_t t = 0; t < c.T; ++t)
        EXPECT_EQ(write_row[size_t(n) * c.T + t], slot >= 0 ? slot * c.S + t : -1) << "row " << n << " t " << t;
    }
  }
}

TEST(OpsSlotIndices, BadSlotsOnTheDeviceBecomePaddingAndAreRecorded) {
  const std::vector<int32_t> accept_len = {3, 1, 2, 4};
  for (const auto& [slots, code] : std::vector<std::pair<std::vector<int32_t>, DeviceErrorCode>>{
           {{1, 4, 2}, DeviceErrorCode::slot_out_of_range},
           {{1, -2, 2}, DeviceErrorCode::slot_out_of_range},
           {{1, 2, 1}, DeviceErrorCode::slot_repeated}}) {
    std::vector<int32_t> write_row(slots.size() * 2, 77), accepted(slots.size(), 77);
    DeviceErrorWord errors;
    ops::build_slot_indices(kCpu, slots.data(), int32_t(slots.size()), accept_len.data(), 4, 4, 2, write_row.data(),
                            accepted.data(), &errors);
    EXPECT_EQ(errors.code, uint32_t(code));
    const size_t bad = slots[1] == 4 || slots[1] == -2 ? 1 : 2;
    EXPECT_EQ(write_row[bad * 2], -1);
    EXPECT_EQ(write_row[bad * 2 + 1], -1);
    EXPECT_EQ(accepted[bad], accept_len[0]) << "a padded row gathers from slot 0";
    EXPECT_EQ(write_row[0], slots[0] * 4);
  }
}

TEST(OpsSlotIndices, BadArgumentsAreRefusedNamingThem) {
  std::vector<int32_t> slots = {0, 1}, accept_len = {1, 1}, write_row(4, 77), accepted(2, 77);
  struct Bad {
    const char* argument;
    std::function<void()> call;
  };
  const std::vector<Bad> bad = {
      {"rows", [&] { ops::build_slot_indices(kCpu, slots.data(), 0, accept_len.data(), 2, 2, 2, write_row.data(), accepted.data()); }},
      {"tokens", [&] { ops::build_slot_indices(kCpu, slots.data(), 2, accept_len.data(), 2, 2, 3, write_row.data(), accepted.data()); }},
      {"pool_slots", [&] { ops::build_slot_indices(kCpu, slots.data(), 2, accept_len.data(), 0, 2, 2, write_row.data(), accepted.data()); }},
      {"slots", [&] { ops::build_slot_indices(kCpu, nullptr, 2, accept_len.data(), 2, 2, 2, write_row.data(), accepted.data()); }},
      {"accepted", [&] { ops::build_slot_indices(kCpu, slots.data(), 2, accept_len.data(), 2, 2, 2, write_row.data(), nullptr); }},
      {"scratch_steps", [&] { ops::build_slot_indices(kCpu, slots.data(), 2, accept_len.data(), 1 << 30, 64, 2, write_row.data(), accepted.data()); }},
  };
  for (const Bad& b : bad) {
    try {
      b.call();
      ADD_FAILURE() << b.argument << " was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(e.argument(), b.argument) << e.what();
    }
    EXPECT_EQ(write_row, std::vector<int32_t>(4, 77));
  }
}

}  // namespace
}  // namespace kdagraph::test
