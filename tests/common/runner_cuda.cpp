// [TAG_RUNNERS] The CUDA runner: the cases of tests/common/runner.h on the GPU, on a non-blocking stream
// of their own; every case reports SKIPPED where no device is visible.
#include "kernels/stream.h"
#include "tests/common/gpu.h"
#include "tests/common/runner.h"

namespace kdagraph::test {

bool runner_available() { return gpu_present(); }

uint64_t runner_launches() { return 0; }
uint64_t runner_held_launches() { return 0; }

const Runner& runner() {
  static const detail::StreamHandle stream =
      gpu_present() ? detail::StreamHandle::create(Backend::cuda) : detail::StreamHandle::view(Stream{Backend::cuda, nullptr});
  static const Runner r{RunnerKind::cuda, Matrix::full, stream.get(), "cuda"};
  return r;
}

}  // namespace kdagraph::test
