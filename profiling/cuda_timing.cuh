// What the CUDA benchmarks of the verify share (bench_verify_cuda, bench_verify_sweep): device memory
// that is zero or hashed (timings never run on zeros), medians of samples timed by CUDA events behind a
// LaunchGate (profiling/launch_gate.h: the device's time alone), cold (L2 flushed before each sample)
// or warm, and the device's own copy bandwidth, counting bytes read plus bytes written.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "harness/synthetic.h"
#include "kdagraph/error.hpp"
#include "kernels/cuda_check.h"
#include "kernels/memory.h"
#include "kernels/stream.h"
#include "profiling/launch_gate.h"

namespace kdagraph::profiling {

// Zeroed device memory of the benchmark (the library's buffer; zeroed before any stream uses it).
inline detail::Buffer device_zeros(size_t bytes) {
  detail::Buffer b(Backend::cuda, bytes);
  b.fill(0);
  return b;
}

namespace {
__global__ void fill_hashed_kernel(void* out, DType dtype, int64_t elems, SyntheticField field, float lo, float hi,
                                   uint32_t salt) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < elems; i += int64_t(gridDim.x) * blockDim.x)
    math::store_from_f32(out, dtype, i, synthetic_uniform(synthetic_bits(1, salt, 0, 0, 0, field, uint32_t(i)), lo, hi));
}
}  // namespace

// `elems` values of `dtype` in [lo, hi) at device memory `out`, hashed per element and `salt`
// (harness/synthetic.h). Finished before it returns.
inline void fill_hashed(void* out, int64_t elems, DType dtype, SyntheticField field, float lo, float hi,
                        uint32_t salt = 0) {
  fill_hashed_kernel<<<1024, 256>>>(out, dtype, elems, field, lo, hi, salt);
  KDA_CUDA_CHECK(cudaGetLastError());
  KDA_CUDA_CHECK(cudaDeviceSynchronize());
}

// The same in memory of its own.
inline detail::Buffer device_hashed(int64_t elems, DType dtype, SyntheticField field, float lo, float hi) {
  detail::Buffer b(Backend::cuda, size_t(elems) * dtype_size(dtype));
  fill_hashed(b.as(), elems, dtype, field, lo, hi);
  return b;
}

// Start/stop events for `count` samples, and their median.
struct EventPairs {
  std::vector<detail::Event> start, stop;
  explicit EventPairs(int count) {
    for (int i = 0; i < count; ++i) {
      start.emplace_back(Backend::cuda);
      stop.emplace_back(Backend::cuda);
    }
  }
  // Median over the samples, in microseconds.
  double median_us() const {
    std::vector<double> us(start.size());
    for (size_t i = 0; i < us.size(); ++i) us[i] = 1e3 * stop[i].elapsed_ms_since(start[i]);
    std::nth_element(us.begin(), us.begin() + ptrdiff_t(us.size() / 2), us.end());
    return us[us.size() / 2];
  }
};

// Median time of `launch` over `runs` samples: cold when `flush` is given (a write larger than L2 before
// each launch), warm otherwise. Each sample is timed behind a LaunchGate (the device's time alone).
template <class Launch>
double median_us(cudaStream_t stream, int runs, const detail::Buffer* flush, Launch launch) {
  EventPairs events(runs);
  const Stream s{Backend::cuda, stream};
  bool waited = false;
  for (int i = 0; i < runs; ++i) {
    if (flush != nullptr) KDA_CUDA_CHECK(cudaMemsetAsync(flush->as(), i & 0xff, flush->bytes(), stream));
    profiling::LaunchGate gate(s);
    events.start[size_t(i)].record(s);
    launch();
    events.stop[size_t(i)].record(s);
    gate.open();
    KDA_CUDA_CHECK(cudaStreamSynchronize(stream));
    waited = waited || gate.timed_out();
  }
  if (waited) throw Error("a timed sample waited on its own stream behind the launch gate; its time is not valid");
  return events.median_us();
}

// Device-to-device cudaMemcpy bandwidth, counting bytes read plus bytes written (after one untimed copy).
inline double copy_bandwidth_gbps(cudaStream_t stream, int runs) {
  const size_t bytes = size_t(1) << 30;
  const detail::Buffer src = device_hashed(int64_t(bytes / 4), DType::f32, SyntheticField::state, -1.0f, 1.0f),
                       dst = device_zeros(bytes);
  const auto copy = [&] {
    KDA_CUDA_CHECK(cudaMemcpyAsync(dst.as(), src.as(), bytes, cudaMemcpyDeviceToDevice, stream));
  };
  copy();
  return 2.0 * double(bytes) / (median_us(stream, runs, nullptr, copy) * 1e3);
}

}  // namespace kdagraph::profiling
