#include "tools/device.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "kdagraph/error.hpp"
#include "kernels/cuda_check.h"
#include "kernels/memory.h"
#include "kernels/stream.h"

namespace kdagraph::cli {

namespace {

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double cpu_copy_ceiling_gbs() {
  constexpr size_t kBytes = size_t(64) << 20;
  constexpr int64_t kChunks = 64;
  std::vector<char> src(kBytes, 1), dst(kBytes, 0);
  std::vector<double> seconds;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < kChunks; ++c) {
      const size_t off = size_t(c) * (kBytes / kChunks);
      std::memcpy(dst.data() + off, src.data() + off, kBytes / kChunks);
    }
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * double(kBytes) / median_of(seconds) / 1e9;
}

}  // namespace

double copy_ceiling_gbs(Backend backend) {
  if (backend == Backend::cpu) return cpu_copy_ceiling_gbs();
#if defined(KDAGRAPH_WITH_CUDA)
  constexpr size_t kBytes = size_t(1) << 30;
  detail::Buffer src(Backend::cuda, kBytes), dst(Backend::cuda, kBytes);
  const auto stream = detail::StreamHandle::create(Backend::cuda);
  detail::Event start(Backend::cuda), stop(Backend::cuda);
  std::vector<double> ms;
  for (int rep = 0; rep < 6; ++rep) {
    start.record(stream.get());
    KDA_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), kBytes, cudaMemcpyDeviceToDevice, stream.cuda()));
    stop.record(stream.get());
    if (rep > 0) ms.push_back(stop.elapsed_ms_since(start));  // the first copy warms up
  }
  return 2.0 * double(kBytes) / (median_of(ms) * 1e-3) / 1e9;
#else
  return 0.0;
#endif
}

}  // namespace kdagraph::cli
