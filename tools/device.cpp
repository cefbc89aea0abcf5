#include "tools/device.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "kdagraph/error.hpp"
#include "kernels/cuda_check.h"
#include "kernels/memory.h"

namespace kdagraph::cli {

RunStream::RunStream(Backend backend) {
  stream_.backend = backend;
#if defined(KDAGRAPH_WITH_CUDA)
  if (backend == Backend::cuda) KDA_CUDA_CHECK(cudaStreamCreate(&stream_.stream));
#endif
}

RunStream::~RunStream() {
#if defined(KDAGRAPH_WITH_CUDA)
  if (stream_.stream) KDA_CUDA_CHECK_NOTHROW(cudaStreamDestroy(stream_.stream));
#endif
}

void RunStream::synchronize() const {
#if defined(KDAGRAPH_WITH_CUDA)
  if (stream_.backend == Backend::cuda) KDA_CUDA_CHECK(cudaStreamSynchronize(stream_.stream));
#endif
}

DeviceTimer::DeviceTimer(Backend backend) {
#if defined(KDAGRAPH_WITH_CUDA)
  if (backend != Backend::cuda) return;
  KDA_CUDA_CHECK(cudaEventCreate(&start_));
  KDA_CUDA_CHECK(cudaEventCreate(&stop_));
  available_ = true;
#else
  (void)backend;
#endif
}

DeviceTimer::~DeviceTimer() {
#if defined(KDAGRAPH_WITH_CUDA)
  if (start_) KDA_CUDA_CHECK_NOTHROW(cudaEventDestroy(start_));
  if (stop_) KDA_CUDA_CHECK_NOTHROW(cudaEventDestroy(stop_));
#endif
}

void DeviceTimer::start(const Stream& s) {
#if defined(KDAGRAPH_WITH_CUDA)
  if (available_) KDA_CUDA_CHECK(cudaEventRecord(start_, s.stream));
#else
  (void)s;
#endif
}

void DeviceTimer::stop(const Stream& s) {
#if defined(KDAGRAPH_WITH_CUDA)
  if (available_) KDA_CUDA_CHECK(cudaEventRecord(stop_, s.stream));
#else
  (void)s;
#endif
}

double DeviceTimer::elapsed_ms() const {
  if (!available_) throw Error("DeviceTimer::elapsed_ms: no device timer on the CPU backend");
  float ms = 0;
#if defined(KDAGRAPH_WITH_CUDA)
  KDA_CUDA_CHECK(cudaEventSynchronize(stop_));
  KDA_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
#endif
  return double(ms);
}

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
  RunStream stream(Backend::cuda);
  DeviceTimer timer(Backend::cuda);
  std::vector<double> ms;
  for (int rep = 0; rep < 6; ++rep) {
    timer.start(stream.get());
    KDA_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), kBytes, cudaMemcpyDeviceToDevice, stream.get().stream));
    timer.stop(stream.get());
    if (rep > 0) ms.push_back(timer.elapsed_ms());  // the first copy warms up
  }
  return 2.0 * double(kBytes) / (median_of(ms) * 1e-3) / 1e9;
#else
  return 0.0;
#endif
}

}  // namespace kdagraph::cli
