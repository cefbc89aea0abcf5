// What the benchmarks over the operations share (bench_conv, bench_conv_verify): random inputs in
// backend memory, medians of timed calls on a stream, and list arguments.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kdagraph/types.hpp"
#include "kernels/kda_math.h"
#include "kernels/memory.h"
#include "kernels/stream.h"

namespace kdagraph::profiling {

// `elems` values of dtype t, uniform in [lo, hi), written to backend memory at `dst`.
inline void fill_random(Backend b, void* dst, size_t elems, DType t, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<uint8_t> host(elems * dtype_size(t));
  for (size_t i = 0; i < elems; ++i) {
    const float x = d(rng);
    if (t == DType::f32) {
      std::memcpy(host.data() + 4 * i, &x, 4);
    } else {
      const math::bf16 h = math::f32_to_bf16(x);
      std::memcpy(host.data() + 2 * i, &h, 2);
    }
  }
  detail::copy_to_backend(b, dst, host.data(), host.size());
}

// Backend memory of `elems` such values.
inline detail::Buffer random_buffer(Backend b, size_t elems, DType t, std::mt19937& rng, float lo, float hi) {
  detail::Buffer out(b, elems * dtype_size(t));
  fill_random(b, out.data(), elems, t, rng, lo, hi);
  return out;
}

// Median milliseconds of `runs` calls of `op` on `s`, after one untimed call.
inline double median_ms(const Stream& s, int runs, const std::function<void()>& op) {
  const auto handle = detail::StreamHandle::view(s);
  detail::Event start(s.backend), end(s.backend);
  op();
  handle.synchronize();
  std::vector<double> ms;
  for (int r = 0; r < runs; ++r) {
    start.record(s);
    op();
    end.record(s);
    ms.push_back(end.elapsed_ms_since(start));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Median milliseconds of each of `ops` over `runs` calls, the ops taking turns (after one untimed call
// each), so a machine whose load changes during the run weighs on all of them alike.
inline std::vector<double> interleaved_medians_ms(const Stream& s, int runs,
                                                  const std::vector<std::function<void()>>& ops) {
  const auto handle = detail::StreamHandle::view(s);
  detail::Event start(s.backend), end(s.backend);
  for (const auto& op : ops) op();
  handle.synchronize();
  std::vector<std::vector<double>> ms(ops.size());
  for (int r = 0; r < runs; ++r)
    for (size_t i = 0; i < ops.size(); ++i) {
      start.record(s);
      ops[i]();
      end.record(s);
      ms[i].push_back(end.elapsed_ms_since(start));
    }
  std::vector<double> medians;
  for (auto& m : ms) {
    std::sort(m.begin(), m.end());
    medians.push_back(m[m.size() / 2]);
  }
  return medians;
}

// "1,2,4": positive integers up to 4096; `option` names the argument in the error.
inline std::vector<int32_t> parse_list(const std::string& option, const char* text) {
  std::vector<int32_t> out;
  for (const char* p = text; *p != '\0';) {
    char* end = nullptr;
    const long v = std::strtol(p, &end, 10);
    if (end == p || v < 1 || v > 4096) throw std::invalid_argument(option + ": bad list '" + text + "'");
    out.push_back(int32_t(v));
    p = *end == ',' ? end + 1 : end;
  }
  return out;
}

}  // namespace kdagraph::profiling
