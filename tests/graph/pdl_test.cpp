// docs/graphs.md programmatic dependent launch on the program's runner (tests/common/runner.h [TAG_RUNNERS])
// [TAG_PDL]: whole rounds through the host engine with PDL on equal the same rounds with PDL off bitwise,
// in each mode, eager and in graphs, with the conv fused, unfused and absent. The engine's layer inputs
// come from a kernel each layer and share one set of buffers across layers, so a kernel of the round that
// read them above its wait would read the previous layer's. On the executor every kernel of a round is held
// at its wait until the next one has run up to its own (the most adversarial order a GPU allows). The CPU
// backend has no programmatic launch; with OS-thread lanes the executor runs them plainly.
//
// The GPU's own (a captured round keeps its programmatic edges) and the executor's own (the verify reads
// no input above its wait, every schedule) are tests/graph/pdl_cuda_test.cpp and tests/simt/pdl_simt_test.cpp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness/host_engine.h"
#include "tests/common/engines.h"
#include "tests/common/runner.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {
namespace {

void run_rounds(HostEngine& e, int rounds) {
  e.start(runner().stream);
  for (int r = 0; r < rounds; ++r) e.run_round(runner().stream);
  e.finish(runner().stream);
}

// Every round's outputs and every retired request's materialized state and conv window, bitwise.
void expect_same_history(const HostEngine& off, const HostEngine& on) {
  ASSERT_EQ(off.rounds().size(), on.rounds().size());
  for (size_t r = 0; r < off.rounds().size(); ++r) {
    ASSERT_EQ(off.rounds()[r].slots, on.rounds()[r].slots) << "round " << r;
    ASSERT_EQ(off.rounds()[r].outputs, on.rounds()[r].outputs) << "outputs differ in round " << r;
  }
  ASSERT_EQ(off.retired().size(), on.retired().size());
  EXPECT_GT(on.retired().size(), 0u) << "the run should retire requests along the way";
  for (size_t i = 0; i < off.retired().size(); ++i) {
    EXPECT_EQ(off.retired()[i].state, on.retired()[i].state) << "materialized state of request " << off.retired()[i].request;
    EXPECT_EQ(off.retired()[i].conv_window, on.retired()[i].conv_window) << "conv window of request " << off.retired()[i].request;
  }
}

TEST(Pdl, RoundsWithPdlOnAndOffAgreeBitwise) {
  KDA_SKIP_UNLESS_ROUNDS_RUN();
  if (runner().kind == RunnerKind::cpu) GTEST_SKIP() << "the CPU backend has no programmatic launch";
  const int rounds = by_matrix(60, 12, 0);
  struct Variant {
    Mode mode;
    Exec exec;
    bool conv;
    bool fuse_conv = true;  // the conv in the verify's kernel, or its own launch before it
  };
  for (const Variant v : {Variant{Mode::two_phase, Exec::eager, false}, Variant{Mode::fused_accept, Exec::graph, true},
                          Variant{Mode::replay, Exec::graph, false}, Variant{Mode::two_phase, Exec::graph, true, false},
                          Variant{Mode::two_phase, Exec::eager, true}, Variant{Mode::two_phase, Exec::graph, false}}) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(std::string(to_string(v.mode)) + " " + to_string(v.exec) +
                 (v.conv ? (v.fuse_conv ? " conv fused" : " conv unfused") : "") + " seed=" + std::to_string(seed));
    HostEngineConfig c = small_engine(runner().memory(), v.mode, v.exec, seed);
    c.verifier.model = runner().matrix == Matrix::full ? ModelShape{3, 2, 4, 64, 64} : ModelShape{2, 1, 2, 64, 64};
    c.verifier.io_dtype = runner().matrix == Matrix::full ? DType::bf16 : DType::f32;
    if (v.conv) c = with_conv(c);
    c.verifier.fuse_conv = v.fuse_conv;
    c.retire_rate = 0.15;
    c.verifier.pdl = false;
    HostEngine off(c);
    const uint64_t held_before = runner_held_launches();
    run_rounds(off, rounds);
    EXPECT_EQ(runner_held_launches(), held_before) << "PDL off holds nothing";
    c.verifier.pdl = true;
    HostEngine on(c);
    run_rounds(on, rounds);
    if (runner().on_executor()) {
      // Each round: the inputs and the verify of each layer (and the conv's own launch when unfused), the
      // index build, sampler and accept.
      const int per_layer = v.conv && !v.fuse_conv ? 3 : 2;
      EXPECT_GE(runner_held_launches() - held_before, uint64_t(rounds * (3 + c.verifier.model.layers * per_layer)))
          << "the rounds' kernels were held at their wait";
    }
    expect_same_history(off, on);
    EXPECT_EQ(on.verifier().device_errors().count, 0u);
  }
}

}  // namespace
}  // namespace kdagraph::test
