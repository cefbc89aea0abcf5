// Bandwidth of the CUDA verify (docs/shapes.md) against the device's own copy bandwidth, measured in the same
// run. Kimi-Linear shapes: K = V = 128, HV = 16 (TP 2) and 32, T = 2, 4, 8, batch 1 to 128, fp32 state,
// bf16 inputs, fused-accept indices with half the rows seeding from scratch, gate in kernel.
//
// A plain program (CUDA events, medians), not Google Benchmark, so it builds wherever nvcc does.
//   bench_verify_cuda [--csv FILE] [--runs N] [--help]
// Cold samples flush L2 (a write larger than it) before each launch; warm samples do not. Every sample is
// `start; launch; stop` behind a LaunchGate (profiling/launch_gate.h): the stream is held until the host
// has enqueued all three, so the time is the device's alone, without the host's launch latency (which an
// idle stream adds to a batch-1 launch). Inputs and states hold hashed values, never zeros.
// Aim (the kernels issue): batch >= 32 moves >= 80% of copy bandwidth; at batch 1 one layer's verify
// takes <= 2 * (bytes / copy bandwidth) + 3 us. Both judged on the cold median.
//
// Beside each verify, its traffic-only twin: the same grid (the library's tile for the batch) and the
// same state loads and stores, with no inputs and no arithmetic. Its time is the floor that launch, memory latency and bandwidth set for this
// access pattern at this parallelism; verify over twin says how much the arithmetic, the input staging
// and the block's barriers add on top.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "harness/synthetic.h"
#include "kdagraph/error.hpp"
#include "kdagraph/ops.hpp"
#include "kernels/cuda_check.h"
#include "kernels/indices.h"
#include "kernels/memory.h"
#include "kernels/stream.h"
#include "kernels/verify.h"
#include "kernels/verify_shapes.cuh"
#include "profiling/cuda_timing.cuh"

namespace kdagraph {
namespace {

using profiling::copy_bandwidth_gbps;
using profiling::device_hashed;
using profiling::device_zeros;
using profiling::median_us;

struct Config {
  int32_t value_heads, tokens, batch;
};

struct Result {
  Config cfg;
  double bytes, cold_us, warm_us, twin_cold_us;
};

constexpr int32_t kHeadDim = 128;

// The traffic-only twin of a verify launch at K = V = 128: the grid of the library's tile for the batch
// (kernels/verify_shapes.cuh, verify_tiling), a block per (row, head, tile of kTileV rows), each thread
// moving 16-byte chunks of the tile coalesced, evict-first like the verify's post-states.
// [TAG_VERIFY_SHAPES]
template <class Tile>
__global__ void __launch_bounds__(Tile::kThreads)
    traffic_only_kernel(const float* pool, float* scratch, const int32_t* seed_pool, const int32_t* seed_scratch,
                        const int32_t* write_row, int32_t tokens, int32_t value_heads) {
  constexpr int K = kHeadDim, kChunksPerThread = Tile::kTileV * K / 4 / Tile::kThreads;
  const int32_t tile = int32_t(blockIdx.x) % Tile::kTilesPerHead, unit = int32_t(blockIdx.x) / Tile::kTilesPerHead;
  const int32_t h = unit % value_heads, n = unit / value_heads;
  const int32_t sp = seed_pool[n], ss = seed_scratch[n];
  if (sp < 0 && ss < 0) return;
  const int64_t head_elems = int64_t(K) * K, row_elems = value_heads * head_elems;
  const int64_t offset = h * head_elems + int64_t(tile) * Tile::kTileV * K;
  const float* seed = sp >= 0 ? pool + sp * row_elems : scratch + ss * row_elems;
  float4 s[kChunksPerThread];
#pragma unroll
  for (int c = 0; c < kChunksPerThread; ++c)
    s[c] = __ldcg(reinterpret_cast<const float4*>(seed + offset) + threadIdx.x + c * Tile::kThreads);
  for (int32_t t = 0; t < tokens; ++t) {
    float* post = scratch + write_row[int64_t(n) * tokens + t] * row_elems + offset;
#pragma unroll
    for (int c = 0; c < kChunksPerThread; ++c)
      __stcs(reinterpret_cast<float4*>(post) + threadIdx.x + c * Tile::kThreads, s[c]);
  }
}

template <class Tile>
void launch_twin(const VerifyParams& p, const detail::Buffer& pool, const detail::Buffer& scratch, cudaStream_t stream) {
  const unsigned blocks = unsigned(p.rows) * unsigned(p.value_heads) * unsigned(Tile::kTilesPerHead);
  traffic_only_kernel<Tile><<<blocks, Tile::kThreads, 0, stream>>>(pool.as<float>(), scratch.as<float>(), p.seed_pool,
                                                                   p.seed_scratch, p.write_row, p.tokens, p.value_heads);
  KDA_CUDA_CHECK(cudaGetLastError());
}

// One layer's verify at `cfg`: every row real, odd rows seeding from scratch row a - 1.
Result run_config(const Config& cfg, cudaStream_t stream, int runs, const detail::Buffer& flush) {
  const int32_t B = cfg.batch, T = cfg.tokens, HV = cfg.value_heads, H = HV, K = kHeadDim, V = kHeadDim;
  const int32_t S = T;
  const size_t head_bytes = size_t(V) * K * sizeof(float);
  const size_t io = dtype_size(DType::bf16);

  std::vector<int32_t> slots(static_cast<size_t>(B)), accept_len(static_cast<size_t>(B)), n_real{B};
  for (int32_t s = 0; s < B; ++s) {
    slots[size_t(s)] = s;
    accept_len[size_t(s)] = s % 2 == 1 ? 1 + s / 2 % T : 0;
  }
  std::vector<int32_t> index(size_t(round_index_elems(B, T)));
  IndexBuildParams ip;
  ip.slots = slots.data();
  ip.n_real = n_real.data();
  ip.accept_len = accept_len.data();
  ip.pool_slots = B;
  ip.scratch_steps = S;
  ip.tokens = T;
  ip.rows = B;
  ip.out = round_indices(index.data(), B, T);
  build_indices_cpu(ip);

  const int64_t state_elems = int64_t(HV) * V * K, qk = int64_t(B) * T * H * K, vo = int64_t(B) * T * HV * V;
  const detail::Buffer pool = device_hashed(B * state_elems, DType::f32, SyntheticField::state, -0.5f, 0.5f),
                       scratch = device_hashed(int64_t(B) * S * state_elems, DType::f32, SyntheticField::state, -0.5f, 0.5f);
  const detail::Buffer q = device_hashed(qk, DType::bf16, SyntheticField::q, -1.0f, 1.0f),
                       k = device_hashed(qk, DType::bf16, SyntheticField::k, -1.0f, 1.0f),
                       v = device_hashed(vo, DType::bf16, SyntheticField::v, -1.0f, 1.0f),
                       g = device_hashed(int64_t(B) * T * HV * K, DType::bf16, SyntheticField::g, -4.0f, 2.0f),
                       beta = device_hashed(int64_t(B) * T * HV, DType::bf16, SyntheticField::beta, -3.0f, 3.0f),
                       o = device_zeros(size_t(vo) * io);
  const detail::Buffer A_log = device_hashed(HV, DType::f32, SyntheticField::gate_a_log, -1.5f, 0.5f),
                       dt_bias = device_hashed(int64_t(HV) * K, DType::f32, SyntheticField::gate_dt_bias, -0.5f, 0.5f);
  const detail::Buffer d_index = detail::Buffer::copy_of(Backend::cuda, index);

  VerifyParams p;
  p.rows = B;
  p.tokens = T;
  p.heads = H;
  p.value_heads = HV;
  p.head_k = K;
  p.head_v = V;
  p.io_dtype = DType::bf16;
  p.options.l2norm_qk = true;
  p.options.gate = GateMode::softplus;
  p.options.beta_is_logit = true;
  p.q = q.as();
  p.k = k.as();
  p.v = v.as();
  p.g = g.as();
  p.beta = beta.as();
  p.o = o.as();
  p.A_log = A_log.as<float>();
  p.dt_bias = dt_bias.as<float>();
  const StateGeometry geo{1, B, S, HV, V, K};
  p.pool = pool_view(geo, pool.as(), DType::f32);
  p.scratch = scratch_view(geo, scratch.as(), DType::f32);
  const RoundIndices d_idx = round_indices(d_index.as<int32_t>(), B, T);
  p.seed_pool = d_idx.seed_pool;
  p.seed_scratch = d_idx.seed_scratch;
  p.write_row = d_idx.write_row;

  const auto verify = [&] { KDA_CUDA_CHECK(launch_verify(p, stream)); };
  for (int i = 0; i < 3; ++i) verify();
  const auto twin = [&] {
    using Tiles = verify_detail::LibraryTiles<kHeadDim>;
    if (verify_tiling(int64_t(B) * HV, detail::device_multiprocessors()) == VerifyTiling::wide)
      launch_twin<Tiles::wide>(p, pool, scratch, stream);
    else
      launch_twin<Tiles::narrow>(p, pool, scratch, stream);
  };
  const double cold_us = median_us(stream, runs, &flush, verify);
  const double twin_cold_us = median_us(stream, runs, &flush, twin);
  const double warm_us = median_us(stream, runs, nullptr, verify);

  // docs/shapes.md: 1 + T state transfers per (row, head), plus the inputs read, the outputs written and the
  // indices.
  const double state = double(B) * HV * (1 + T) * double(head_bytes);
  const double inputs = double(q.bytes() + k.bytes() + v.bytes() + g.bytes() + beta.bytes() + o.bytes()) +
                        double(A_log.bytes() + dt_bias.bytes()) + double(B) * (2 + T) * sizeof(int32_t);
  return Result{cfg, state + inputs, cold_us, warm_us, twin_cold_us};
}

struct Verdict {
  std::string target, result;
};

Verdict judge(const Result& r, double copy_gbps) {
  const double gbps = r.bytes / (r.cold_us * 1e3);
  if (r.cfg.batch >= 32) {
    return {">= 80% copy bw", gbps >= 0.8 * copy_gbps ? "pass" : "miss"};
  }
  if (r.cfg.batch == 1) {
    const double limit_us = 2.0 * r.bytes / (copy_gbps * 1e3) + 3.0;
    char target[64];
    std::snprintf(target, sizeof target, "<= %.1f us", limit_us);
    return {target, r.cold_us <= limit_us ? "pass" : "miss"};
  }
  return {"-", "-"};
}

int run(int argc, char** argv) {
  std::string csv_path;
  int runs = 100;
  const auto usage = [&](FILE* to) {
    std::fprintf(to, "usage: %s [--csv FILE] [--runs N (default 100)] [--help]\n", argv[0]);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--csv" && i + 1 < argc) {
      csv_path = argv[++i];
    } else if (arg == "--runs" && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--help") {  // after the arguments before it parsed: gpu_check.sh's dry run uses it
      usage(stdout);
      return 0;
    } else {
      usage(stderr);
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "bench_verify_cuda: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  KDA_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const detail::StreamHandle stream = detail::StreamHandle::create(Backend::cuda);
  const double copy_gbps = copy_bandwidth_gbps(stream.cuda(), runs);
  std::printf("device: %s, %d SMs, L2 %d MiB; cudaMemcpy D2D bandwidth (read + write): %.0f GB/s\n",
              prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, copy_gbps);
  std::printf(
      "verify: K = V = %d, bf16 io, fp32 state, fused-accept (half the rows seed from scratch), "
      "l2norm + softplus gate + beta logit; median of %d runs\n",
      kHeadDim, runs);
  const detail::Buffer flush = device_zeros(std::max<size_t>(size_t(prop.l2CacheSize) * 4, size_t(256) << 20));

  std::vector<Result> results;
  for (int32_t HV : {16, 32})
    for (int32_t T : {2, 4, 8})
      for (int32_t B : {1, 8, 32, 128}) {
        results.push_back(run_config(Config{HV, T, B}, stream.cuda(), runs, flush));
        const Result& r = results.back();
        std::printf(
            "HV=%2d T=%d batch=%3d: %10.0f bytes, cold %8.1f us (%6.0f GB/s), warm %8.1f us (%6.0f GB/s), "
            "traffic-only twin cold %8.1f us\n",
            HV, T, B, r.bytes, r.cold_us, r.bytes / (r.cold_us * 1e3), r.warm_us, r.bytes / (r.warm_us * 1e3),
            r.twin_cold_us);
        std::fflush(stdout);
      }

  if (!csv_path.empty()) {
    FILE* csv = std::fopen(csv_path.c_str(), "w");
    if (csv == nullptr) {
      std::fprintf(stderr, "bench_verify_cuda: cannot write %s\n", csv_path.c_str());
      return 1;
    }
    std::fprintf(csv,
                 "value_heads,tokens,batch,bytes,cold_us,warm_us,cold_gbps,warm_gbps,copy_gbps,"
                 "cold_fraction_of_copy,traffic_only_cold_us,target,result\n");
    for (const Result& r : results) {
      const double cold = r.bytes / (r.cold_us * 1e3), warm = r.bytes / (r.warm_us * 1e3);
      const Verdict v = judge(r, copy_gbps);
      std::fprintf(csv, "%d,%d,%d,%.0f,%.3f,%.3f,%.1f,%.1f,%.1f,%.3f,%.3f,%s,%s\n", r.cfg.value_heads,
                   r.cfg.tokens, r.cfg.batch, r.bytes, r.cold_us, r.warm_us, cold, warm, copy_gbps,
                   cold / copy_gbps, r.twin_cold_us, v.target.c_str(), v.result.c_str());
    }
    std::fclose(csv);
  }

  int misses = 0;
  std::printf(
      "\n| HV | T | batch | MB moved | cold us | warm us | cold GB/s | warm GB/s | %% of copy | twin cold us | "
      "verify / twin | aim | result |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n");
  for (const Result& r : results) {
    const double cold = r.bytes / (r.cold_us * 1e3), warm = r.bytes / (r.warm_us * 1e3);
    const Verdict v = judge(r, copy_gbps);
    misses += v.result == "miss";
    std::printf("| %d | %d | %d | %.2f | %.1f | %.1f | %.0f | %.0f | %.0f%% | %.1f | %.2f | %s | %s |\n",
                r.cfg.value_heads, r.cfg.tokens, r.cfg.batch, r.bytes / 1e6, r.cold_us, r.warm_us, cold, warm,
                100.0 * cold / copy_gbps, r.twin_cold_us, r.cold_us / r.twin_cold_us, v.target.c_str(),
                v.result.c_str());
  }
  std::printf("\ncopy bandwidth %.0f GB/s; %d aim(s) missed\n", copy_gbps, misses);
  return 0;
}

}  // namespace
}  // namespace kdagraph

int main(int argc, char** argv) {
  try {
    return kdagraph::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_verify_cuda: %s\n", e.what());
    return 1;
  }
}
