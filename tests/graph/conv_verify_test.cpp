// SPEC §9 "fused with the verify" on the CPU backend: ops::conv_verify_layer (one kernel per layer)
// against conv_layer followed by verify_layer, bitwise, through the host engine's graph runner in every
// mode, conv width and io dtype (the operations on caller storage are compared round by round in
// tests/graph/conv_ops_test.cpp); and every bad argument refused by name with nothing changed.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "kdagraph/ops.hpp"
#include "tests/common/caller_storage.h"
#include "tests/common/conv_engines.h"
#include "tests/common/conv_rounds.h"
#include "tests/common/engines.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {
namespace {

const Stream kCpu{Backend::cpu, nullptr};

// 200 rounds of joins, retirements and batches crossing buckets, per mode, width and io dtype (GVA:
// H = 2, HV = 4).
TEST(ConvVerify, FusedMatchesUnfusedThroughTheEngine) {
  for (Mode mode : {Mode::two_phase, Mode::fused_accept, Mode::replay})
    for (int32_t width : {2, 3, 4})
      for (DType io : {DType::f32, DType::bf16}) {
        HostEngineConfig c = small_engine(Backend::cpu, mode, Exec::graph, fresh_seed());
        c.verifier.io_dtype = io;
        expect_fused_engine_matches_unfused(with_conv(c, width), kCpu, 200);
        if (::testing::Test::HasFatalFailure()) return;
      }
}

// A good fused call on caller storage, and the bad variants of its arguments.
struct BadFusedCall {
  std::string argument;
  std::function<void(RoundSpec&, SlotStorage&, ConvLayerInputs&, LayerInputs&, BatchView&)> spoil;
};

TEST(ConvVerify, BadArgumentsAreRefusedByNameAndChangeNothing) {
  for (Mode mode : {Mode::two_phase, Mode::fused_accept, Mode::replay}) {
    SCOPED_TRACE(to_string(mode));
    std::mt19937_64 rng(fresh_seed());
    VerifierConfig cfg = small_verifier(Backend::cpu, mode, /*layers=*/2, /*tokens=*/3);
    cfg.max_rows = 4;
    const ConvShape conv{conv_channels(cfg.model), 4, ConvActivation::silu};
    ConvModeRun run(cfg, CallerLayout::compact, conv, true);
    CallerStorage& c = run.st;
    const size_t N = size_t(cfg.max_rows), T = size_t(cfg.tokens), C = size_t(conv.channels);
    const size_t HV = size_t(cfg.model.value_heads), K = size_t(cfg.model.head_k);
    const detail::Buffer x = detail::Buffer::copy_of(Backend::cpu, random_io_bytes(N * T * C, DType::f32, rng, -1, 1));
    const detail::Buffer w = detail::Buffer::copy_of(Backend::cpu, random_io_bytes(C * 4, DType::f32, rng, -1, 1));
    const detail::Buffer g = detail::Buffer::copy_of(Backend::cpu, random_io_bytes(N * T * HV * K, DType::f32, rng, -1, 1));
    const detail::Buffer beta = detail::Buffer::copy_of(Backend::cpu, random_io_bytes(N * T * HV, DType::f32, rng, -1, 1));
    const detail::Buffer gate = detail::Buffer::copy_of(Backend::cpu, random_io_bytes(HV + HV * K, DType::f32, rng, -1, 1));
    for (int32_t slot = 0; slot < cfg.pool.slots; ++slot) c.prefill(slot, random_states(cfg, rng));
    const std::vector<int32_t> packed = {2, 4, 1, -1, -1};
    c.batch.upload(packed.data(), packed.size() * sizeof(int32_t));
    ops::build_indices(kCpu, c.spec, c.storage, c.batch_view(cfg.max_rows), c.idx);
    ConvLayerInputs good_conv;
    good_conv.x = x.data();
    good_conv.weight = w.as<float>();
    LayerInputs good_in;
    good_in.g = g.data();
    good_in.beta = beta.data();
    good_in.o = run.o[1].data();
    good_in.A_log = gate.as<float>();
    good_in.dt_bias = gate.as<float>() + HV;
    auto misaligned = [](const void* p, int bytes) { return static_cast<const char*>(p) + bytes; };
    const std::vector<BadFusedCall> bad = {
        {"spec.conv.width", [](RoundSpec& sp, SlotStorage& s, auto&, auto&, auto&) {  // layers with no conv
           sp.conv = ConvShape{};
           s.conv_state = s.conv_scratch = StateView{};
         }},
        {"storage.conv_state", [](RoundSpec& sp, auto&, auto&, auto&, auto&) { sp.conv = ConvShape{}; }},
        {"conv.channels", [](RoundSpec& sp, auto&, auto&, auto&, auto&) { sp.conv.channels += 1; }},
        {"storage.conv_state", [](auto&, SlotStorage& s, auto&, auto&, auto&) { s.conv_state.base = nullptr; }},
        {"x", [](auto&, auto&, ConvLayerInputs& in, auto&, auto&) { in.x = nullptr; }},
        {"x", [=](auto&, auto&, ConvLayerInputs& in, auto&, auto&) { in.x = misaligned(in.x, 4); }},  // 16-byte copies
        {"weight", [](auto&, auto&, ConvLayerInputs& in, auto&, auto&) { in.weight = nullptr; }},
        {"g", [](auto&, auto&, auto&, LayerInputs& in, auto&) { in.g = nullptr; }},
        {"o", [](auto&, auto&, auto&, LayerInputs& in, auto&) { in.o = nullptr; }},
        {"dt_bias", [](auto&, auto&, auto&, LayerInputs& in, auto&) { in.dt_bias = nullptr; }},
        {"batch.n_real", [](auto&, auto&, auto&, auto&, BatchView& b) { b.n_real = nullptr; }},
    };
    auto snapshot = [&] {
      std::vector<std::vector<uint8_t>> all = run.storage();
      for (const auto& o : run.outputs()) all.push_back(o);
      return all;
    };
    const auto before = snapshot();
    for (const BadFusedCall& b : bad) {
      RoundSpec spec = c.spec;
      SlotStorage storage = c.storage;
      ConvLayerInputs conv_in = good_conv;
      LayerInputs in = good_in;
      BatchView batch = c.batch_view(cfg.max_rows);
      b.spoil(spec, storage, conv_in, in, batch);
      SCOPED_TRACE("a bad " + b.argument);
      try {
        ops::conv_verify_layer(kCpu, spec, storage, c.idx, cfg.max_rows, 1, conv_in, in, &batch);
        ADD_FAILURE() << "was accepted";
      } catch (const InvalidArgument& e) {
        EXPECT_EQ(e.argument(), b.argument) << e.what();
        EXPECT_NE(std::string(e.what()).find("ops::conv_verify_layer"), std::string::npos) << e.what();
      }
      EXPECT_TRUE(snapshot() == before) << "a refused call changed a buffer";
    }
    // The good call runs, and needs neither q, k, v nor output segments.
    const BatchView batch = c.batch_view(cfg.max_rows);
    ops::conv_verify_layer(kCpu, c.spec, c.storage, c.idx, cfg.max_rows, 1, good_conv, good_in, &batch);
    EXPECT_FALSE(snapshot() == before);
  }
}

}  // namespace
}  // namespace kdagraph::test
