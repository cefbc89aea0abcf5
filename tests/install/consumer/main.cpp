// Runs two CPU rounds through the installed library's public API and checks fused-accept against
// two-phase, so the install test fails if the package links but does not work.
#include <kdagraph/host_engine.hpp>

#include <cstdio>

int main() {
  const kdagraph::Stream cpu{kdagraph::Backend::cpu, nullptr};
  kdagraph::HostEngineConfig c;
  c.verifier.model = {2, 1, 2, 16, 16};
  c.verifier.pool = {4, 3, kdagraph::DType::f32};
  c.verifier.max_rows = 2;
  c.verifier.tokens = 3;
  c.batch = 2;
  c.keep_outputs = true;
  kdagraph::HostEngineConfig two = c;
  two.verifier.mode = kdagraph::Mode::two_phase;
  kdagraph::HostEngine a(c), b(two);
  a.start(cpu);
  b.start(cpu);
  for (int r = 0; r < 3; ++r) {
    a.run_round(cpu);
    b.run_round(cpu);
  }
  a.finish(cpu);
  b.finish(cpu);
  const bool same = a.rounds().back().outputs == b.rounds().back().outputs && a.retired()[0].state == b.retired()[0].state;
  std::printf("consumer: %s\n", same ? "fused-accept == two-phase" : "MISMATCH");
  return same ? 0 : 1;
}
