// The pieces of the command line that are not the engine: --check's comparison, the JSON writer and the
// option parsers. The command line itself is tested end to end by cli_test.py.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "tools/check.h"
#include "tools/cli_args.h"
#include "tools/engine_options.h"
#include "tools/json_writer.h"

namespace kdagraph::cli {
namespace {

const Stream kCpu{Backend::cpu, nullptr};

EngineSetup small_setup() {
  EngineSetup e;
  e.model = ModelShape{2, 2, 4, 32, 32};
  e.tokens = 4;
  e.batch = 8;
  e.mode = Mode::fused_accept;
  e.exec = Exec::graph;
  e.seed = 11;
  e.keep_outputs = true;
  return e;
}

TEST(ReferenceCheck, FusedAcceptGraphRunMatchesTheReferenceBitwise) {
  EngineSetup e = small_setup();
  e.vary_batch = true;
  e.retire_rate = 0.2;
  const HostEngineConfig cfg = engine_config(e);
  HostEngine run(cfg);
  ReferenceCheck check(cfg);
  run.start(kCpu);
  for (int r = 0; r < 20; ++r) {
    run.run_round(kCpu);
    check.compare_round(run);
  }
  run.finish(kCpu);
  check.compare_finish(run);
  EXPECT_TRUE(check.result().bitwise);
  EXPECT_EQ(check.result().rounds_compared, 20);
  EXPECT_EQ(size_t(check.result().requests_compared), run.retired().size());
  EXPECT_GT(check.result().requests_compared, 8) << "requests should retire along the way";
}

// Both runs see the same inputs in round 0; a different accept rate changes the seeds of round 1.
TEST(ReferenceCheck, NamesTheFirstDifferingRound) {
  EngineSetup e = small_setup();
  e.accept_rate = 0.9;
  ReferenceCheck check(engine_config(e));
  e.accept_rate = 0.2;
  HostEngine run(engine_config(e));
  run.start(kCpu);
  run.run_round(kCpu);
  check.compare_round(run);
  run.run_round(kCpu);
  try {
    check.compare_round(run);
    FAIL() << "round 1 should differ";
  } catch (const CheckFailure& f) {
    const std::string what = f.what();
    EXPECT_EQ(what.rfind("round 1: outputs differ", 0), 0u) << what;
    EXPECT_NE(what.find("slot"), std::string::npos) << what;
  }
}

TEST(ReferenceCheck, ToleranceFollowsTheDtypes) {
  EngineSetup e = small_setup();
  EXPECT_EQ(ReferenceCheck(engine_config(e)).comparison(), "bitwise");
  EXPECT_EQ(ReferenceCheck(engine_config(e)).result().tolerance, 1e-5);
  e.io = DType::bf16;
  EXPECT_EQ(ReferenceCheck(engine_config(e)).result().tolerance, 1e-2);
  // docs/low_precision.md: a bf16 state rounds at every post-state in fused accept, as in the reference, but at
  // replay's flushes only.
  e.state = DType::bf16;
  EXPECT_EQ(ReferenceCheck(engine_config(e)).comparison(), "bitwise");
  e.mode = Mode::replay;
  EXPECT_EQ(ReferenceCheck(engine_config(e)).comparison(), "relative error <= 0.01");
}

// docs/conv.md on the command line: Kimi-Linear's conv (W = 4, SiLU, no bias) over C = 2 H K + HV V unless
// --no-conv; its state is two halves of W - 1 + S columns in the offset-window modes, W - 1 and a scratch
// in two-phase.
TEST(EngineOptions, TheConvIsOnByDefaultWithKimiLinearsShape) {
  EngineSetup e = small_setup();
  const VerifierConfig v = engine_config(e).verifier;
  EXPECT_EQ(v.conv.width, 4);
  EXPECT_EQ(v.conv.channels, 2 * 2 * 32 + 4 * 32);
  EXPECT_EQ(v.conv.activation, ConvActivation::silu);
  const int64_t C = v.conv.channels, L = 2, S = e.tokens;
  EXPECT_EQ(mode_footprint(v).conv_state_bytes_per_slot, L * 2 * (4 - 1 + S) * C * 4);
  EXPECT_EQ(mode_footprint(v).conv_scratch_bytes_per_slot, 0);
  e.mode = Mode::two_phase;
  const VerifierConfig two = engine_config(e).verifier;
  EXPECT_EQ(mode_footprint(two).conv_state_bytes_per_slot, L * 3 * C * 4);
  EXPECT_EQ(mode_footprint(two).conv_scratch_bytes_per_slot, L * S * 3 * C * 4);
  e.conv_width = 0;
  EXPECT_EQ(engine_config(e).verifier.conv.width, 0);
  EXPECT_EQ(mode_footprint(engine_config(e).verifier).conv_state_bytes_per_slot, 0);
  EXPECT_EQ(describe(engine_config(e).verifier.conv), "off (--no-conv): the recurrent part alone");
}

// docs/modes.md's memory per slot at Kimi-K3, fp32 state, bf16 inputs, T = 8, R = 24 (the default 3 T): one
// checkpoint of 64 KiB and 24 records of about 4K + 4V bytes, 88 KiB a head, against fused accept's
// 1 + S = 9 states, 576 KiB a head.
TEST(EngineOptions, ReplayKeepsACheckpointAndARingPerHead) {
  EngineSetup e;
  e.model = find_preset("kimi-k3-tp8").model;
  e.tokens = 8;
  e.io = DType::bf16;
  e.conv_width = 0;
  e.mode = Mode::replay;
  const int64_t heads = 69 * 12;
  const ModeFootprint replay = mode_footprint(engine_config(e).verifier);
  EXPECT_EQ(replay.pool_bytes_per_slot + replay.scratch_bytes_per_slot + replay.ring_bytes_per_slot, heads * 88 * 1024);
  e.mode = Mode::fused_accept;
  const ModeFootprint fused = mode_footprint(engine_config(e).verifier);
  EXPECT_EQ(fused.pool_bytes_per_slot + fused.scratch_bytes_per_slot + fused.ring_bytes_per_slot, heads * 576 * 1024);
  EXPECT_EQ(fused.ring_bytes_per_slot, 0);
  // R = 2 T = 16 records: 16 KiB a head.
  e.mode = Mode::replay;
  e.ring.records = 16;
  EXPECT_EQ(mode_footprint(engine_config(e).verifier).ring_bytes_per_slot, heads * 16 * 1024);
}

TEST(EngineOptions, TheRingAndTheByteCountReachTheVerifier) {
  EngineSetup e = small_setup();
  e.ring = ReplayRing{12, 0};
  e.count_bytes = true;
  const VerifierConfig v = engine_config(e).verifier;
  EXPECT_EQ(v.ring.records, 12);
  EXPECT_EQ(v.ring.flush_min, 0);
  EXPECT_TRUE(v.count_bytes);
  EXPECT_EQ(describe_ring(v.ring, v.tokens), "R=12, flush every round");
  EXPECT_EQ(describe_ring(ReplayRing{}, 4), "R=12, flush at 5 pending records");
}

TEST(JsonWriter, NestsAndEscapes) {
  JsonWriter j;
  j.begin_object().field("s", "a\"b\\c\n").key("list").begin_array();
  j.value(int64_t(1)).value(2.5).value(true).null();
  j.end_array().key("empty").begin_object().end_object().field("nan", std::numeric_limits<double>::quiet_NaN());
  j.end_object();
  EXPECT_EQ(j.str(),
            "{\n  \"s\": \"a\\\"b\\\\c\\n\",\n  \"list\": [\n    1,\n    2.5,\n    true,\n    null\n  ],\n"
            "  \"empty\": {},\n  \"nan\": null\n}\n");
}

TEST(CliArgs, ParsersNameTheOptionAndTheAllowedValues) {
  EXPECT_EQ(parse_int("--batch", "12", 1, 16), 12);
  for (const char* bad : {"", "12x", "0x10", "99999999999999999999", "1.5"})
    EXPECT_THROW(parse_int("--batch", bad, 1, 16), UsageError) << bad;
  try {
    parse_int("--batch", "0", 1, 16);
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "--batch: 0 is outside the allowed range [1, 16]");
  }
  EXPECT_DOUBLE_EQ(parse_real("--accept-rate", "0.25", 0, 1), 0.25);
  for (const char* bad : {"nan", "inf", "1.5", "-0.1", "x"})
    EXPECT_THROW(parse_real("--accept-rate", bad, 0, 1), UsageError) << bad;
  EXPECT_EQ(parse_choice("--mode", "graph", {"eager", "graph"}), 1u);
  EXPECT_THROW(parse_choice("--mode", "Graph", {"eager", "graph"}), UsageError);
  EXPECT_EQ(parse_int_list("--batches", "1,4,16", 1, 64), (std::vector<int64_t>{1, 4, 16}));
  EXPECT_THROW(parse_int_list("--batches", "1,,4", 1, 64), UsageError);
  EXPECT_THROW(parse_choice_list("--modes", "eager,eager", {"eager", "graph"}), UsageError);
}

TEST(Presets, MatchSpecSection7) {
  ModelOptions m;
  m.preset = "kimi-linear-48b";
  const ModelShape kimi = m.shape();
  EXPECT_EQ(describe(kimi), "L=20 H=32 HV=32 K=128 V=128");
  m.preset = "kimi-linear-48b-tp2";
  EXPECT_EQ(describe(m.shape()), "L=20 H=16 HV=16 K=128 V=128");
  // Kimi-K3 at tensor parallel 8, one rank, 7 draft tokens, its conv over C = 4,608.
  m.preset = "kimi-k3-tp8";
  EXPECT_EQ(describe(m.shape()), "L=69 H=12 HV=12 K=128 V=128");
  const Preset& k3 = find_preset("kimi-k3-tp8");
  EXPECT_EQ(k3.draft + 1, 8);
  EXPECT_EQ(k3.conv_width, 4);
  EXPECT_EQ(conv_channels(k3.model), 4608);
  // The others leave T to the command.
  EXPECT_EQ(find_preset("tiny").draft, -1);
  EXPECT_EQ(find_preset("kimi-linear-48b").draft, -1);
  EXPECT_EQ(find_preset("kimi-linear-48b-tp2").draft, -1);
  EXPECT_THROW(find_preset("kimi-k4"), UsageError);
  m.preset = "tiny";
  m.heads = 3;  // keeps tiny's grouping HV = 2H
  EXPECT_EQ(describe(m.shape()), "L=2 H=3 HV=6 K=64 V=64");
  m.value_heads = 4;
  EXPECT_THROW(m.shape(), UsageError);
}

}  // namespace
}  // namespace kdagraph::cli
