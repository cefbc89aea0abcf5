// [TAG_RUNNERS] The SIMT runner: the cases of tests/common/runner.h on the CUDA kernels' own source, on
// the executor (in this build the CPU backend runs the kernels: graph/dispatch.h). Sweeps run their
// executor subset (whole rounds halved under AddressSanitizer), and a smaller one where lanes are OS
// threads (ThreadSanitizer).
#include "simt/executor.h"
#include "tests/common/runner.h"

namespace kdagraph::test {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

const Runner& runner() {
  static const Runner r{RunnerKind::simt,
                        simt::options().lanes == simt::Lanes::threads ? Matrix::thread_lanes : Matrix::executor,
                        Stream{Backend::cpu, nullptr}, "simt", kAddressSanitizer};
  return r;
}

bool runner_available() { return true; }

uint64_t runner_launches() { return simt::launches(); }
uint64_t runner_held_launches() { return simt::held_launches(); }

}  // namespace kdagraph::test
