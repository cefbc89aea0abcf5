// CPU verify bandwidth beside memcpy's, measured in the same run (issue: the CPU path must be a real
// fallback). Bytes per verify = (1 + T) state transfers per (row, head) (docs/shapes.md), plus the inputs.
// The context names the instruction set the kernels ran (kernels/cpu_isa.h) and their threads.
//   ./bench_verify_cpu --benchmark_counters_tabular=true [--threads=N] [--streaming=auto|always|never]
// KDAGRAPH_CPU_ISA=avx2 (or baseline) runs a lower instruction set than the CPU's best.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "harness/synthetic.h"
#include "kernels/cpu_isa.h"
#include "kernels/indices.h"
#include "kernels/memory.h"
#include "kernels/verify.h"

namespace kdagraph {
namespace {

void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = size_t(state.range(0)) << 20;
  detail::Buffer src(Backend::cpu, bytes), dst(Backend::cpu, bytes);
  std::memset(src.data(), 1, bytes);
  std::memset(dst.data(), 2, bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(2 * bytes));  // read + write
}
// With --benchmark_repetitions, the fastest repetition beside the median: on a shared machine the
// fastest is the run the other processes left alone.
double fastest(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

BENCHMARK(BM_Memcpy)->Arg(256)->UseRealTime()->Unit(benchmark::kMillisecond)->ComputeStatistics("min", fastest);

// One verify of N rows x HV value heads x T tokens, K = V = 128, fp32 state and inputs, every row seeded
// from scratch; with `top_k` > 0 the rows' tokens form hashed top-K trees (docs/trees.md, synthetic_tree; 1 is
// a chain given as a tree).
struct VerifyBench {
  detail::Buffer q, k, v, g, beta, o, pool, scratch;
  std::vector<int32_t> seed_pool, seed_scratch, write_row, parent;
  VerifyParams p;
  int64_t state_bytes = 0;

  VerifyBench(int32_t N, int32_t HV, int32_t T, int32_t top_k) {
    const int32_t K = 128, V = 128, S = T, P = N;
    const size_t head = size_t(K) * V;
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> d(-0.1f, 0.1f);
    auto buffer = [&](size_t n) {
      detail::Buffer b(Backend::cpu, n * 4);
      for (size_t i = 0; i < n; ++i) b.as<float>()[i] = d(rng);
      return b;
    };
    q = buffer(size_t(N) * T * HV * K);
    k = buffer(size_t(N) * T * HV * K);
    v = buffer(size_t(N) * T * HV * V);
    g = buffer(size_t(N) * T * HV * K);
    beta = buffer(size_t(N) * T * HV);
    o = buffer(size_t(N) * T * HV * V);
    pool = buffer(size_t(P) * HV * head);
    scratch = buffer(size_t(P) * S * HV * head);
    seed_pool.assign(size_t(N), -1);
    seed_scratch.resize(size_t(N));
    write_row.resize(size_t(N) * T);
    for (int32_t n = 0; n < N; ++n) {
      seed_scratch[size_t(n)] = n * S + (n % T);
      for (int32_t t = 0; t < T; ++t) write_row[size_t(n) * T + t] = n * S + t;
    }
    p.rows = N;
    p.tokens = T;
    p.heads = HV;
    p.value_heads = HV;
    p.head_k = K;
    p.head_v = V;
    p.options.l2norm_qk = true;
    p.q = q.data();
    p.k = k.data();
    p.v = v.data();
    p.g = g.data();
    p.beta = beta.data();
    p.o = o.data();
    const StateGeometry geo{1, P, S, HV, V, K};
    p.pool = pool_view(geo, pool.data(), DType::f32);
    p.scratch = scratch_view(geo, scratch.data(), DType::f32);
    p.seed_pool = seed_pool.data();
    p.seed_scratch = seed_scratch.data();
    p.write_row = write_row.data();
    if (top_k > 0) {
      parent.resize(size_t(N) * T);
      for (int32_t n = 0; n < N; ++n) synthetic_tree(7, 0, n, T, top_k, parent.data() + size_t(n) * T);
      p.parent = parent.data();
    }
    state_bytes = int64_t(1 + T) * N * HV * int64_t(head) * 4;
  }

  void run(benchmark::State& state) {
    for (auto _ : state) {
      verify_cpu(p);
      benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(int64_t(state.iterations()) * state_bytes);
    state.counters["state_MiB"] = double(state_bytes) / (1 << 20);
  }
};

// Args: rows, value heads, T.
void BM_VerifyCpu(benchmark::State& state) {
  VerifyBench(int32_t(state.range(0)), int32_t(state.range(1)), int32_t(state.range(2)), 0).run(state);
}
BENCHMARK(BM_VerifyCpu)
    ->ArgNames({"rows", "HV", "T"})
    ->Args({1, 16, 2})
    ->Args({1, 16, 4})
    ->Args({1, 32, 4})
    ->Args({4, 16, 4})
    ->Args({8, 16, 2})
    ->Args({8, 16, 4})
    ->Args({8, 16, 8})
    ->Args({8, 32, 4})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->ComputeStatistics("min", fastest);

// docs/trees.md: the same verify over token trees. Args: rows, value heads, T, K of the top-K trees (0: no
// tree, the chain kernel; 1: a chain given as a tree, which keeps nothing aside). The bytes counted are
// the chain's (1 + T state transfers): what a tree adds is the states it keeps aside, in cache.
void BM_VerifyCpuTree(benchmark::State& state) {
  VerifyBench b(int32_t(state.range(0)), int32_t(state.range(1)), int32_t(state.range(2)), int32_t(state.range(3)));
  int32_t branches = 0;
  for (size_t e = 0; e < b.parent.size(); ++e) branches += b.parent[e] != int32_t(e % size_t(b.p.tokens)) - 1;
  state.counters["branches_per_row"] = b.parent.empty() ? 0.0 : double(branches) / b.p.rows;
  b.run(state);
}
BENCHMARK(BM_VerifyCpuTree)
    ->ArgNames({"rows", "HV", "T", "top_k"})
    ->ArgsProduct({{1, 8}, {32}, {8, 16}, {0, 1, 2, 4}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->ComputeStatistics("min", fastest);

// The options this program adds to Google Benchmark's: --threads=N (default: OpenMP's) and
// --streaming=auto|always|never (post-state stores past the cache: past the kernels' threshold, on
// every call, or never). Returns false, naming it, on an option it does not know.
bool apply_options(int& argc, char** argv) {
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--threads=", 0) == 0) {
      set_cpu_threads(std::atoi(arg.c_str() + 10));
    } else if (arg == "--streaming=always") {
      set_cpu_streaming_store_bytes(0);
    } else if (arg == "--streaming=never") {
      set_cpu_streaming_store_bytes(std::numeric_limits<int64_t>::max());
    } else if (arg != "--streaming=auto") {
      if (arg.rfind("--streaming", 0) == 0) {
        std::fprintf(stderr, "bench_verify_cpu: %s: --streaming takes auto, always or never\n", arg.c_str());
        return false;
      }
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  return true;
}

}  // namespace
}  // namespace kdagraph

int main(int argc, char** argv) {
  if (!kdagraph::apply_options(argc, argv)) return 2;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::AddCustomContext("cpu_isa", kdagraph::to_string(kdagraph::cpu_isa()));
  benchmark::AddCustomContext("cpu_threads", std::to_string(kdagraph::cpu_threads()));
  benchmark::AddCustomContext("streaming_store_bytes", std::to_string(kdagraph::cpu_streaming_store_bytes()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
