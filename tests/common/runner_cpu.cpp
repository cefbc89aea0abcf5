// [TAG_RUNNERS] The CPU runner: the cases of tests/common/runner.h on the library's CPU implementations.
#include "tests/common/runner.h"

namespace kdagraph::test {

const Runner& runner() {
  static const Runner r{RunnerKind::cpu, Matrix::full, Stream{Backend::cpu, nullptr}, "cpu"};
  return r;
}

bool runner_available() { return true; }

uint64_t runner_launches() { return 0; }
uint64_t runner_held_launches() { return 0; }

}  // namespace kdagraph::test
