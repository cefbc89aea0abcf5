// SPEC §5 programmatic dependent launch with the kernels' own source on the SIMT executor [TAG_PDL]. The
// shipped verify, launched right after the kernel that writes its inputs (poisoned until then, every
// schedule), matches fp64 and the CPU backend: it reads none of them above its grid-dependency wait
// (verify_mutants_simt_test shows a verify that does is caught). And whole rounds through the host
// engine, where every kernel of a round is a programmatic launch held at its wait until the next has run
// up to its own, equal the same rounds with PDL off bitwise, in each mode, with and without the conv.
// With OS-thread lanes (ThreadSanitizer) programmatic launches run plainly: these report skipped there.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kdagraph/host_engine.hpp"
#include "tests/common/engines.h"
#include "tests/simt/pdl_case.h"
#include "tests/simt/simt_case.h"

namespace kdagraph::test {
namespace {

const Stream kCpu{Backend::cpu, nullptr};

#define KDA_SKIP_ON_THREAD_LANES()                                                               \
  do {                                                                                           \
    if (threads_lanes()) GTEST_SKIP() << "OS-thread lanes run programmatic launches plainly";    \
  } while (0)

TEST(VerifyPdlSimt, ReadsNoInputAboveItsWait) {
  KDA_SKIP_ON_THREAD_LANES();
  for (int K : {64, 128})
    for (simt::Schedule sched : {simt::Schedule::ascending, simt::Schedule::descending, simt::Schedule::round_robin,
                                 simt::Schedule::random}) {
      simt::ScopedOptions opt({simt::Lanes::fibers, sched});
      CaseShape s = sweep_shape(K, 5, 2, K == 64 ? 25 : 42, 4);
      s.io = K == 64 ? DType::f32 : DType::bf16;
      const uint64_t seed = fresh_seed();
      SCOPED_TRACE(s.str() + " " + to_string(sched) + " seed=" + std::to_string(seed));
      const std::vector<int32_t> slots = {1, 3, 4, -1}, accept = {0, 0, 0, 1, 5};
      VerifyCase cpu(s, seed, slots, accept), simt(s, seed, slots, accept);
      verify_cpu(cpu.params());
      cpu.o.sync_values();
      cpu.scratch.sync_values();
      const uint64_t held = simt::held_launches();
      expect_verify_matches_reference(simt, tolerance(s), [](VerifyCase& c) { run_after_staging(c, launch_verify); });
      EXPECT_EQ(simt::held_launches(), held + 2) << "the staging kernel and the verify were held at their wait";
      EXPECT_LE(rel_error(simt.o.values, cpu.o.values), tolerance(s)) << "outputs against the CPU backend";
      EXPECT_LE(rel_error(simt.scratch.values, cpu.scratch.values), tolerance(s)) << "scratch against the CPU backend";
      if (HasFatalFailure()) return;
    }
}

void run_rounds(HostEngine& e, int rounds) {
  e.start(kCpu);
  for (int r = 0; r < rounds; ++r) e.run_round(kCpu);
  e.finish(kCpu);
}

// Every round's outputs and every retired request's materialized state, bitwise.
void expect_same_history(const HostEngine& off, const HostEngine& on) {
  ASSERT_EQ(off.rounds().size(), on.rounds().size());
  for (size_t r = 0; r < off.rounds().size(); ++r) {
    ASSERT_EQ(off.rounds()[r].slots, on.rounds()[r].slots) << "round " << r;
    ASSERT_EQ(off.rounds()[r].outputs, on.rounds()[r].outputs) << "outputs differ in round " << r;
  }
  ASSERT_EQ(off.retired().size(), on.retired().size());
  for (size_t i = 0; i < off.retired().size(); ++i) {
    EXPECT_EQ(off.retired()[i].state, on.retired()[i].state) << "materialized state of request " << off.retired()[i].request;
    EXPECT_EQ(off.retired()[i].conv_window, on.retired()[i].conv_window) << "conv window of request " << off.retired()[i].request;
  }
}

// The engine's layer inputs come from a kernel each layer and share one set of buffers across layers, so
// a kernel of the round reading them above its wait would read the previous layer's: the rounds would
// differ from the same rounds with PDL off.
TEST(EnginePdlSimt, RoundsEqualThoseWithPdlOffBitwise) {
  KDA_SKIP_ON_THREAD_LANES();
  constexpr int kRounds = 12;
  struct Variant {
    Mode mode;
    Exec exec;
    bool conv;
    bool fuse_conv = true;  // the conv in the verify's kernel, or its own launch before it
  };
  for (const Variant v : {Variant{Mode::two_phase, Exec::eager, false}, Variant{Mode::fused_accept, Exec::graph, true},
                          Variant{Mode::replay, Exec::graph, false}, Variant{Mode::two_phase, Exec::graph, true, false}}) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(std::string(to_string(v.mode)) + " " + to_string(v.exec) +
                 (v.conv ? (v.fuse_conv ? " conv fused" : " conv unfused") : "") +
                 " seed=" + std::to_string(seed));
    HostEngineConfig c = small_engine(Backend::cpu, v.mode, v.exec, seed);
    c.verifier.model = ModelShape{2, 1, 2, 64, 64};
    if (v.conv) c = with_conv(c);
    c.verifier.fuse_conv = v.fuse_conv;
    c.verifier.pdl = false;
    HostEngine off(c);
    const uint64_t held_before = simt::held_launches();
    run_rounds(off, kRounds);
    EXPECT_EQ(simt::held_launches(), held_before) << "PDL off holds nothing";
    c.verifier.pdl = true;
    HostEngine on(c);
    run_rounds(on, kRounds);
    // Each round: the inputs and the verify of each layer (and the conv's own launch when unfused), the
    // index build, sampler and accept.
    const int per_layer = v.conv && !v.fuse_conv ? 3 : 2;
    EXPECT_GE(simt::held_launches() - held_before, uint64_t(kRounds * (3 + 2 * per_layer)))
        << "the rounds' kernels were held at their wait";
    EXPECT_GT(off.retired().size(), 0u) << "the run should retire requests along the way";
    expect_same_history(off, on);
  }
}

}  // namespace
}  // namespace kdagraph::test
