// Issue 31's sweep: every member of the verify kernel family (profiling/verify_variants.cuh, each run on
// the SIMT executor by tests/simt/verify_family_simt_test.cpp first) beside the library's own verify, on
// one Kimi-Linear layer (H = HV, K = V = 128, bf16 inputs, L2 norm, softplus gate and beta logit in the
// kernel), in one run, so a tile is chosen by the numbers of one GPU:
//   chain      HV 16 and 32 x T 2, 4, 8 x batch 1, 8, 32, 128 x fp32 and bf16 state, fused accept (half
//              the rows mid-stream, seeding from scratch);
//   modes      two-phase, fused accept and replay (1..R - T ring records folded first) at batch 1 and 64,
//              T 4, HV 16 and 32, fp32 state;
//   conv       the short conv fused in (C = 6144, W 4) at batch 1 and 8, T 2 and 4, HV 16: the conv
//              members and the library's fused kernel against the conv and the verify as two launches;
//   tree       top-4 token trees against chains of the same T = 8, batch 1 and 16, HV 16;
//   round      L = 20 layers of one Verifier at batch 1, HV 16, T 2 and 4, the conv fused in and not: each
//              member's launches captured in one CUDA graph with programmatic dependent launch, as a
//              round has them, a sample one replay (cold): the verify's part of the L = 20 round whose
//              aim is 0.12 / 0.15 ms at batch 1 (issue 31), where one launch alone would time its own launch
//              latency, which the graph's edges hide. The conv's "unfused": its conv and verify as two
//              launches a layer, through the Verifier as an engine without fusion runs them. The layers
//              share one set of inputs (at batch 1 under 2% of a layer's bytes), which stay in L2. The
//              probes run rounds too, and "floor" is the library's launches of a kernel that only waits
//              and triggers: a layer's time is split into that floor, the prologue and the rest.
// Each layer's parameters are the ones a round's verify gets in a graph (graph/ops_params.h: indices
// built on the device, pre-round data for the early seed loads). Before a member is timed it runs once on
// the library's starting storage, and every member must give the library's bits: every output and every
// byte of pool, scratch, ring records and conv state (the run fails otherwise). The probes
// (no_state_stores, prologue_only) split the time of the tile they are cut from: prologue, the state
// stores, and the rest (the token loop's arithmetic).
// Cold medians (L2 flushed before each sample) of CUDA events behind a LaunchGate (profiling/
// cuda_timing.cuh); bytes are the state transfers of docs/shapes.md plus inputs and outputs, against the copy
// bandwidth measured in the same run.
// --check runs each member once on a few shapes (profiling::check_grid) and checks it as above, untimed:
// what gpu_check.sh's compute-sanitizer stages run, so the members' own memory accesses and shared-memory
// hazards are checked on the device, the persistent members' prefetch among them. --shapes picks the
// grid: sweep (the default when timed), check (the default with --check) or aims (a shape an aim, for a
// profiler: gpu_check.sh's opt-in profile stage; untimed, each line of output is one verify launch).
// --only NAME (again for more) keeps the members whose names hold NAME; the library's verify always
// runs, as the reference.
//   bench_verify_sweep [--runs N (20)] [--csv FILE] [--check] [--shapes sweep|check|aims]
//                      [--only NAME]... [--list] [--help]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graph/capture.h"
#include "graph/ops_params.h"
#include "harness/synthetic.h"
#include "kdagraph/error.hpp"
#include "kdagraph/verifier.hpp"
#include "kernels/cuda_check.h"
#include "kernels/kda_math.h"
#include "kernels/launch.cuh"
#include "kernels/memory.h"
#include "kernels/stream.h"
#include "kernels/verify.h"
#include "profiling/cuda_timing.cuh"
#include "profiling/verify_sweep.h"

namespace kdagraph {
namespace {

using detail::Buffer;
using profiling::SweepMember;
using profiling::SweepRow;
using profiling::SweepShape;

constexpr int32_t kHeadDim = 128, kConvWidth = 4;

__global__ void count_differences_kernel(const uint32_t* a, const uint32_t* b, int64_t words,
                                         unsigned long long* count) {
  unsigned long long mine = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < words; i += int64_t(gridDim.x) * blockDim.x)
    mine += a[i] != b[i];
  if (mine > 0) atomicAdd(count, mine);
}

// A round's floor (Sweep::run_round): a block that does nothing but what every kernel of a round does,
// wait for the kernel before it and let the one after it start. A graph of these on the library's grid
// times the launches and drains a round's layers cost before any work.
__global__ void round_floor_kernel() {
  grid_dependency_wait();
  trigger_dependent_launch();
}

struct LaunchShape {
  dim3 grid, block;
  size_t shared_bytes = 0;
};

// The grid, blocks and dynamic shared memory of the library's verify launch for `p`, read from the kernel
// node of a one-launch capture (nothing runs), so the floor follows the library's choice of tile.
LaunchShape library_launch_shape(cudaStream_t stream, const VerifyParams& p) {
  cudaGraph_t g = nullptr;
  KDA_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  cudaError_t launched;
  try {
    launched = launch_verify(p, Launch{stream, false});
  } catch (...) {  // the stream leaves capture whatever the launcher threw
    if (cudaStreamEndCapture(stream, &g) == cudaSuccess) cudaGraphDestroy(g);
    throw;
  }
  KDA_CUDA_CHECK(cudaStreamEndCapture(stream, &g));
  size_t nodes = 0;
  cudaGraphNode_t node = nullptr;
  cudaKernelNodeParams kp{};
  cudaError_t e = launched;
  if (e == cudaSuccess) e = cudaGraphGetNodes(g, nullptr, &nodes);
  if (e == cudaSuccess && nodes == 1) e = cudaGraphGetNodes(g, &node, &nodes);
  if (e == cudaSuccess && nodes == 1) e = cudaGraphKernelNodeGetParams(node, &kp);
  cudaGraphDestroy(g);
  KDA_CUDA_CHECK(e);
  if (nodes != 1)
    throw Error("bench_verify_sweep: the library's verify captured " + std::to_string(nodes) + " nodes, not 1");
  return LaunchShape{kp.gridDim, kp.blockDim, kp.sharedMemBytes};
}

// 32-bit words in which two device buffers of `bytes` differ (every buffer here is a multiple of 4).
uint64_t count_differences(const void* a, const void* b, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return 0;
  const Buffer count = profiling::device_zeros(sizeof(unsigned long long));
  count_differences_kernel<<<1024, 256, 0, stream>>>(static_cast<const uint32_t*>(a), static_cast<const uint32_t*>(b),
                                                     int64_t(bytes / 4), count.as<unsigned long long>());
  KDA_CUDA_CHECK(cudaGetLastError());
  KDA_CUDA_CHECK(cudaStreamSynchronize(stream));
  return count.download<unsigned long long>()[0];
}

// `layers` layers of a shape (one, but for a round) on a Verifier whose slots are all mid-stream, their
// inputs (one set for every layer), and copies of its storage: as it starts (every run that is checked
// starts there) and as the library's verify leaves it.
struct Case {
  VerifierConfig config;
  std::unique_ptr<Verifier> verifier;
  Buffer q, k, v, g, beta, o, gate, x, weight, conv_q, conv_k, conv_v;
  LayerInputs in;
  ConvLayerInputs conv_in;
  std::vector<VerifyParams> layer_params;  // a layer's each, as a round's graph has them
  VerifyParams params;                     // layer 0's
  struct Region {
    void* at;
    size_t bytes;
    Buffer start, library;
  };
  std::vector<Region> storage;  // pool, scratch, token cache, conv state: what a verify may write
  Buffer library_o;
  double bytes = 0;  // moved by one layer's verify

  Case(const SweepShape& s, cudaStream_t stream, int32_t layers = 1) {
    const int32_t B = s.batch, T = s.tokens, HV = s.value_heads, K = kHeadDim;
    config.backend = Backend::cuda;
    config.model = ModelShape{layers, HV, HV, K, K};
    config.pool = PoolShape{B, T, s.state};
    config.max_rows = B;
    config.tokens = T;
    config.io_dtype = DType::bf16;
    config.mode = s.mode;
    config.ring = ReplayRing{3 * s.tokens, s.flush_min};
    config.options.l2norm_qk = true;
    config.options.gate = GateMode::softplus;
    config.options.beta_is_logit = true;
    config.trees = s.tree;
    if (s.conv) config.conv = ConvShape{conv_channels(config.model), kConvWidth, ConvActivation::silu};
    verifier = std::make_unique<Verifier>(config);
    Verifier& ver = *verifier;
    const Stream st{Backend::cuda, stream};

    // Mid-stream slots: hashed states, conv windows and ring records; fused accept seeds every other slot
    // from scratch row a - 1, replay folds 1..R - T pending records first (flushing where the ring says),
    // two-phase seeds from the pool.
    const size_t es = dtype_size(s.state);
    profiling::fill_hashed(ver.pool(), int64_t(ver.pool_bytes() / es), s.state, SyntheticField::state, -0.5f, 0.5f, 1);
    if (ver.scratch_bytes() > 0)
      profiling::fill_hashed(ver.scratch(), int64_t(ver.scratch_bytes() / es), s.state, SyntheticField::state, -0.5f,
                             0.5f, 2);
    const SlotStorage& ring = ver.storage();
    const size_t ring_kg_bytes = ring.ring_kg.base ? size_t(ring.ring_kg.layers * ring.ring_kg.layer_stride) * 2 : 0;
    const size_t ring_u_bytes = ring.ring_u.base ? size_t(ring.ring_u.layers * ring.ring_u.layer_stride) * 4 : 0;
    if (ring_kg_bytes > 0) {
      profiling::fill_hashed(ring.ring_kg.base, int64_t(ring_kg_bytes / 2), DType::bf16, SyntheticField::k, -1.0f, 1.0f, 3);
      profiling::fill_hashed(ring.ring_u.base, int64_t(ring_u_bytes / 4), DType::f32, SyntheticField::v, -0.1f, 0.1f, 5);
    }
    if (s.conv)
      profiling::fill_hashed(ver.conv_state(), int64_t(ver.conv_state_bytes() / 2), DType::bf16,
                             SyntheticField::conv_window, -1.0f, 1.0f, 4);
    const ReplayRing rs = ver.spec().ring;
    std::vector<int32_t> slots(static_cast<size_t>(B)), accept(static_cast<size_t>(B)), parity(static_cast<size_t>(B));
    std::vector<int32_t> cursor(2 * static_cast<size_t>(B), 0), flushes(static_cast<size_t>(B), 0);
    for (int32_t i = 0; i < B; ++i) {
      slots[size_t(i)] = i;
      accept[size_t(i)] = s.mode == Mode::two_phase ? 0 : s.mode == Mode::replay ? 1 + i % T : i % 2 ? 1 + i / 2 % T : 0;
      parity[size_t(i)] = i % 2;
      if (s.mode != Mode::replay) continue;
      cursor[size_t(i)] = 1 + i % (rs.flush_min == 0 ? T : rs.records - T);  // pending records, as the ring keeps them
      cursor[size_t(B + i)] = (7 * i) % rs.records;   // their first
      flushes[size_t(i)] = ring_flushes(cursor[size_t(i)], T, rs.records, rs.flush_min);
    }
    detail::copy_to_backend(Backend::cuda, ver.accept_len(), accept.data(), accept.size() * sizeof(int32_t));
    if (s.mode == Mode::replay) {  // the pool's P is B: the cursor's two halves are [B] each
      detail::copy_to_backend(Backend::cuda, ring.ring_pending, cursor.data(), size_t(B) * sizeof(int32_t));
      detail::copy_to_backend(Backend::cuda, ring.ring_start, cursor.data() + B, size_t(B) * sizeof(int32_t));
    }
    if (ver.storage().round_parity != nullptr)
      detail::copy_to_backend(Backend::cuda, ver.storage().round_parity, parity.data(), parity.size() * sizeof(int32_t));
    ver.set_batch(st, slots.data(), B);
    if (s.tree) {
      std::vector<int32_t> parent(size_t(B) * T);
      for (int32_t i = 0; i < B; ++i) synthetic_tree(7, 0, i, T, profiling::kSweepTreeTopK, parent.data() + size_t(i) * T);
      ver.set_tree(st, parent.data(), B);
    }
    ver.enqueue_indices(st, B);

    const size_t qk = size_t(B) * T * HV * K, vo = qk;
    q = profiling::device_hashed(int64_t(qk), DType::bf16, SyntheticField::q, -1.0f, 1.0f);
    k = profiling::device_hashed(int64_t(qk), DType::bf16, SyntheticField::k, -1.0f, 1.0f);
    v = profiling::device_hashed(int64_t(vo), DType::bf16, SyntheticField::v, -1.0f, 1.0f);
    g = profiling::device_hashed(int64_t(qk), DType::bf16, SyntheticField::g, -4.0f, 2.0f);
    beta = profiling::device_hashed(int64_t(B) * T * HV, DType::bf16, SyntheticField::beta, -3.0f, 3.0f);
    o = profiling::device_zeros(vo * 2);
    library_o = profiling::device_zeros(vo * 2);
    gate = profiling::device_hashed(int64_t(HV) * (1 + K), DType::f32, SyntheticField::gate_dt_bias, -0.5f, 0.5f);
    in = LayerInputs{};
    in.q = q.as();
    in.k = k.as();
    in.v = v.as();
    in.g = g.as();
    in.beta = beta.as();
    in.o = o.as();
    in.A_log = gate.as<float>();
    in.dt_bias = gate.as<float>() + HV;
    const BatchView batch = ver.batch_view(B);
    if (s.conv) {
      const int64_t C = config.conv.channels;
      x = profiling::device_hashed(int64_t(B) * T * C, DType::bf16, SyntheticField::conv_x, -1.0f, 1.0f);
      weight = profiling::device_hashed(C * kConvWidth, DType::f32, SyntheticField::conv_weight, -0.6f, 0.6f);
      conv_q = Buffer(Backend::cuda, qk * 2);
      conv_k = Buffer(Backend::cuda, qk * 2);
      conv_v = Buffer(Backend::cuda, vo * 2);
      conv_in = conv_into_verify_inputs(ver.spec(), x.as(), weight.as<float>(), nullptr, conv_q.as(), conv_k.as(),
                                        conv_v.as());
    }
    for (int32_t l = 0; l < layers; ++l)
      layer_params.push_back(
          s.conv ? detail::conv_verify_params(ver.spec(), ver.storage(), ver.indices(), B, l, conv_in, in, &batch)
                 : detail::round_verify_params(ver.spec(), ver.storage(), ver.indices(), B, l, in, &batch));
    params = layer_params.front();
    KDA_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (auto [at, n] : {std::pair<void*, size_t>{ver.pool(), ver.pool_bytes()}, {ver.scratch(), ver.scratch_bytes()},
                         {ring.ring_kg.base, ring_kg_bytes}, {ring.ring_u.base, ring_u_bytes},
                         {ver.conv_state(), ver.conv_state_bytes()}}) {
      if (n == 0) continue;
      storage.push_back(Region{at, n, Buffer(Backend::cuda, n), Buffer(Backend::cuda, n)});
      KDA_CUDA_CHECK(cudaMemcpyAsync(storage.back().start.as(), at, n, cudaMemcpyDeviceToDevice, stream));
    }

    // docs/shapes.md's state transfers (replay: the checkpoint, and its write on a flush; no post-states) and
    // replay's records (the pending ones read, T written: k and g in bf16, u in fp32), then the inputs
    // read and the outputs written.
    const double state = double(HV) * K * K * double(es), io = 2.0, record = double(HV) * (2.0 * K * io + 4.0 * K);
    double transfers = 0, records = 0;
    for (int32_t i = 0; i < B; ++i) {
      transfers += s.mode == Mode::replay ? 1 + flushes[size_t(i)] : 1 + T;
      records += s.mode == Mode::replay ? cursor[size_t(i)] + T : 0;
    }
    const double per_token = double(HV) * (4.0 * K + 1.0) * io;  // q, k, v, g, beta of a head, and o
    const double conv_io = s.conv ? double(B) * T * config.conv.channels * io : 0.0;
    bytes = transfers * state + records * record + double(B) * T * per_token + conv_io;
  }

  // The starting storage back, and the outputs poisoned (NaN bytes), so a run that leaves one unwritten
  // cannot pass for the library's.
  void restore(cudaStream_t stream) {
    KDA_CUDA_CHECK(cudaMemsetAsync(o.as(), 0xff, o.bytes(), stream));
    for (const Region& r : storage)
      KDA_CUDA_CHECK(cudaMemcpyAsync(r.at, r.start.as(), r.bytes, cudaMemcpyDeviceToDevice, stream));
  }
  // The library's verify from the starting storage (or `library`, the library's round), its outputs and
  // storage kept for the members'.
  void run_library(cudaStream_t stream, const std::function<void()>& library = nullptr) {
    restore(stream);
    if (library) library();
    else KDA_CUDA_CHECK(launch_verify(params, Launch{stream, false}));
    KDA_CUDA_CHECK(cudaMemcpyAsync(library_o.as(), o.as(), o.bytes(), cudaMemcpyDeviceToDevice, stream));
    for (Region& r : storage)
      KDA_CUDA_CHECK(cudaMemcpyAsync(r.library.as(), r.at, r.bytes, cudaMemcpyDeviceToDevice, stream));
    KDA_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  // Words of outputs and storage in which a run from the starting storage differs from the library's.
  uint64_t differences(cudaStream_t stream) {
    uint64_t n = count_differences(o.as(), library_o.as(), o.bytes(), stream);
    for (const Region& r : storage) n += count_differences(r.at, r.library.as(), r.bytes, stream);
    return n;
  }
  // ||o - o_library|| / ||o_library|| over the outputs.
  double output_distance() const {
    const std::vector<uint16_t> a = o.download<uint16_t>(), b = library_o.download<uint16_t>();
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      const double x = math::to_f32(math::bf16{a[i]}), y = math::to_f32(math::bf16{b[i]});
      num += (x - y) * (x - y);
      den += y * y;
    }
    return std::isnan(num) ? INFINITY : std::sqrt(num / std::max(den, 1e-30));
  }
};

struct Sweep {
  cudaStream_t stream;
  const Buffer* flush;  // null: --check, nothing is timed
  profiling::SweepResults r;
  profiling::SweepCsv* csv = nullptr;

  bool timed() const { return flush != nullptr; }
  double time(const std::function<void()>& launch) {
    return timed() ? profiling::median_us(stream, r.runs, flush, launch) : NAN;
  }

  void add(const SweepShape& s, const std::string& member, int tile_rows, double us, double bytes, double library_us,
           std::string check, bool exact, bool probe) {
    r.rows.push_back(SweepRow{s, member, tile_rows, us, bytes / (us * 1e3), library_us, std::move(check), exact, probe});
    const SweepRow& row = r.rows.back();
    if (csv != nullptr) csv->add(row, r.copy_gbps);
    std::printf("%-9s %-12s HV=%2d T=%d batch=%3d state=%-4s %-34s ", s.section.c_str(), to_string(s.mode),
                s.value_heads, s.tokens, s.batch, to_string(s.state), member.c_str());
    if (timed())
      std::printf("%9.1f us %6.0f GB/s (%3.0f%% of copy) x%.2f ", us, row.gbps, 100.0 * row.gbps / r.copy_gbps,
                  library_us / us);
    std::printf("%s\n", row.check.c_str());
    std::fflush(stdout);
  }

  // The library's verify at `s`, then every member of its list (chains or conv) for the shape.
  Case& run_shape(const SweepShape& s, std::unique_ptr<Case>& held) {
    held = std::make_unique<Case>(s, stream);
    Case& c = *held;
    c.run_library(stream);
    const double library_us = time([&] { KDA_CUDA_CHECK(launch_verify(c.params, Launch{stream, false})); });
    add(s, "library", 0, library_us, c.bytes, library_us, "library", true, false);
    if (s.tree) return c;
    for (const SweepMember& m : r.members) {
      if (m.conv != s.conv) continue;
      const profiling::SweepLauncher launch = s.state == DType::f32 ? m.f32_state : m.bf16_state;
      c.restore(stream);
      KDA_CUDA_CHECK(launch(c.params, Launch{stream, false}));
      KDA_CUDA_CHECK(cudaStreamSynchronize(stream));
      const std::string check = checked(c, m.exact, m.probe);
      const double us = time([&] { KDA_CUDA_CHECK(launch(c.params, Launch{stream, false})); });
      add(s, m.name, m.tile_rows, us, c.bytes, library_us, check, m.exact, m.probe);
    }
    return c;
  }

  // What a run from the starting storage, just finished, gave against the library's: "bitwise" or
  // "DIFFERS" where it must be the library's bits (a mismatch fails the run), the outputs' distance for
  // another formula, "probe" for a probe.
  std::string checked(Case& c, bool exact, bool probe) {
    if (exact) {
      const uint64_t d = c.differences(stream);
      r.mismatches += d != 0;
      return d == 0 ? "bitwise" : "DIFFERS (" + std::to_string(d) + " words)";
    }
    if (probe) return "probe";
    char text[32];
    std::snprintf(text, sizeof text, "err %.1e", c.output_distance());
    return text;
  }

  // A round of `s` (profiling::kSweepRoundLayers layers): the library's verify and every member of the
  // shape's list, probes included, each a CUDA graph of its launches, one a layer with PDL, as a round's
  // graph has them; with the conv, also the conv and the verify as two launches a layer. Each is checked
  // against the library's round first (the storage of every layer, the last layer's outputs; a probe is
  // only run), then timed by replays. Last the round's floor ("floor"): the library's launches, their
  // grid, blocks and shared memory, of a kernel that only waits and triggers. At batch 1 a layer's time
  // is that floor, the prologue (the 16-row tile's -prologue probe, less the floor) and the token loop with
  // its stores (the rest), so a missed round aim says which of the three to cut.
  void run_round(const SweepShape& s, std::unique_ptr<Case>& held) {
    held = std::make_unique<Case>(s, stream, profiling::kSweepRoundLayers);
    Case& c = *held;
    const Stream st{Backend::cuda, stream};
    const auto capture = [&](const std::function<void(int32_t layer)>& enqueue) {
      detail::CaptureGuard guard(st, "bench_verify_sweep");
      for (int32_t l = 0; l < int32_t(c.layer_params.size()); ++l) enqueue(l);
      detail::Graph g = guard.end();
      g.upload(st);
      return g;
    };
    const double bytes = c.bytes * double(c.layer_params.size());
    const detail::Graph library =
        capture([&](int32_t l) { KDA_CUDA_CHECK(launch_verify(c.layer_params[size_t(l)], Launch{stream, true})); });
    c.run_library(stream, [&] { library.launch(st); });
    const double library_us = time([&] { library.launch(st); });
    add(s, "library", 0, library_us, bytes, library_us, "library", true, false);
    const auto timed_round = [&](const std::string& name, int tile_rows, const detail::Graph& g, bool exact,
                                 bool probe) {
      c.restore(stream);
      g.launch(st);
      KDA_CUDA_CHECK(cudaStreamSynchronize(stream));
      const std::string check = checked(c, exact, probe);
      add(s, name, tile_rows, time([&] { g.launch(st); }), bytes, library_us, check, exact, probe);
    };
    for (const SweepMember& m : r.members) {
      if (m.conv != s.conv) continue;
      const profiling::SweepLauncher launch = s.state == DType::f32 ? m.f32_state : m.bf16_state;
      timed_round(m.name, m.tile_rows,
                  capture([&](int32_t l) { KDA_CUDA_CHECK(launch(c.layer_params[size_t(l)], Launch{stream, true})); }),
                  m.exact, m.probe);
    }
    // The floor: the library's launches with blocks that only wait and trigger (round_floor_kernel).
    const LaunchShape shape = library_launch_shape(stream, c.params);
    const detail::Graph floor_graph = capture([&](int32_t) {
      KDA_CUDA_CHECK(
          launch_kernel_shared(round_floor_kernel, shape.grid, shape.block, shape.shared_bytes, Launch{stream, true}));
    });
    add(s, "floor", 0, time([&] { floor_graph.launch(st); }), bytes, library_us, "floor", false, true);
    if (s.conv) {  // the Verifier's two launches give the fused kernel's bits (VerifierConfig::fuse_conv)
      Verifier& v = *c.verifier;
      LayerInputs unfused_in = c.in;
      unfused_in.q = c.conv_q.as();
      unfused_in.k = c.conv_k.as();
      unfused_in.v = c.conv_v.as();
      timed_round("unfused", 0, capture([&](int32_t l) {
                    v.enqueue_conv(st, l, c.conv_in, s.batch);
                    v.enqueue_verify(st, l, unfused_in, s.batch);
                  }),
                  true, false);
    }
  }
};

// The members whose names hold one of `only` (every member when it is empty).
std::vector<SweepMember> selected_members(const std::vector<std::string>& only) {
  std::vector<SweepMember> out;
  for (const SweepMember& m : profiling::sweep_members())
    if (only.empty() || std::any_of(only.begin(), only.end(), [&](const std::string& o) {
          return m.name.find(o) != std::string::npos;
        }))
      out.push_back(m);
  return out;
}

int run(int argc, char** argv) {
  std::string csv_path;
  std::vector<std::string> only;
  std::string shapes;
  int runs = 20;
  bool list = false, check = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--csv" && i + 1 < argc) csv_path = argv[++i];
    else if (a == "--runs" && i + 1 < argc) runs = std::max(1, std::atoi(argv[++i]));
    else if (a == "--list") list = true;
    else if (a == "--check") check = true;
    else if (a == "--shapes" && i + 1 < argc && (std::string(argv[i + 1]) == "sweep" ||
                                                  std::string(argv[i + 1]) == "check" ||
                                                  std::string(argv[i + 1]) == "aims"))
      shapes = argv[++i];
    else if (a == "--only" && i + 1 < argc) {
      // Checked as it is parsed, so gpu_check.sh's dry run (these arguments, then --help) sees a name that
      // no longer matches: a renamed member would otherwise drop out of a sanitizer's subset unseen.
      only.push_back(argv[++i]);
      if (selected_members({only.back()}).empty()) {
        std::fprintf(stderr, "%s: --only %s: no member's name holds it (--list names them)\n", argv[0], argv[i]);
        return 2;
      }
    } else {
      const bool help = a == "--help";  // after the arguments before it parsed: gpu_check.sh's dry run uses it
      std::fprintf(help ? stdout : stderr,
                   "usage: %s [--runs N] [--csv FILE] [--check] [--shapes sweep|check|aims] "
                   "[--only NAME]... [--list] [--help]\n",
                   argv[0]);
      return help ? 0 : 2;
    }
  }
  if (check && !csv_path.empty()) {
    std::fprintf(stderr, "%s: --check times nothing, so it writes no --csv\n", argv[0]);
    return 2;
  }
  if (shapes.empty()) shapes = check ? "check" : "sweep";
  const profiling::SweepGrid grid = shapes == "check"  ? profiling::check_grid()
                                    : shapes == "aims" ? profiling::aims_grid()
                                                       : profiling::sweep_grid();
  const std::vector<SweepMember> members = selected_members(only);
  if (list) {
    for (const SweepMember& m : members)
      std::printf("%s %s (%d rows a block, %d threads)%s\n", m.conv ? "conv " : "chain", m.name.c_str(), m.tile_rows,
                  m.threads, m.exact ? ", the library's formula" : m.probe ? ", a probe" : "");
    return 0;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "bench_verify_sweep: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  KDA_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const detail::StreamHandle stream = detail::StreamHandle::create(Backend::cuda);
  char device[320];
  std::snprintf(device, sizeof device, "%s, %d SMs, L2 %d MiB", prop.name, prop.multiProcessorCount,
                prop.l2CacheSize >> 20);
  if (check) {
    Sweep sw{stream.cuda(), nullptr, profiling::SweepResults{1, NAN, members, {}, 0}};
    std::printf("device: %s; --check: %zu members, once a shape (--shapes %s), untimed\n", device, members.size(),
                shapes.c_str());
    const auto& [chains, modes, convs, trees, rounds] = grid;
    std::unique_ptr<Case> held;
    for (const auto* section : {&chains, &modes, &convs, &trees})
      for (const SweepShape& s : *section) sw.run_shape(s, held);
    for (const SweepShape& s : rounds) sw.run_round(s, held);
    held.reset();
    std::printf("%d of %zu member runs with the library's formula gave other bits than the library\n", sw.r.mismatches,
                size_t(std::count_if(sw.r.rows.begin(), sw.r.rows.end(), [](const SweepRow& row) {
                  return row.exact && row.member != "library";
                })));
    return sw.r.mismatches > 0 ? 1 : 0;
  }
  const Buffer flush = profiling::device_zeros(std::max<size_t>(size_t(prop.l2CacheSize) * 4, size_t(256) << 20));
  Sweep sw{stream.cuda(), &flush,
           profiling::SweepResults{runs, profiling::copy_bandwidth_gbps(stream.cuda(), runs), members, {}, 0}};
  std::printf("device: %s; copy %.0f GB/s; %zu members\n", device, sw.r.copy_gbps, members.size());
  profiling::SweepCsv csv(csv_path);
  sw.csv = &csv;

  // The short sections first (the modes, the conv and the trees hold three of issue 31's aims in 18
  // shapes, the 4 rounds the verify's part of a fourth, in about 2 s), the 48 chain shapes last: a run
  // stopped at its cap loses chains, not a whole section.
  const auto& [chains, modes, convs, trees, rounds] = grid;
  std::unique_ptr<Case> held;
  for (const SweepShape& s : modes) sw.run_shape(s, held);
  for (const SweepShape& s : convs) {
    Case& c = sw.run_shape(s, held);
    // The conv and the verify as two launches, through the Verifier as an engine without fusion runs them.
    Verifier& v = *c.verifier;
    const Stream st{Backend::cuda, sw.stream};
    LayerInputs unfused_in = c.in;
    unfused_in.q = c.conv_q.as();
    unfused_in.k = c.conv_k.as();
    unfused_in.v = c.conv_v.as();
    const double us = sw.time([&] {
      v.enqueue_conv(st, 0, c.conv_in, s.batch);
      v.enqueue_verify(st, 0, unfused_in, s.batch);
    });
    sw.add(s, "unfused", 0, us, c.bytes, sw.r.rows.back().library_us, "-", false, false);
  }
  for (const SweepShape& s : trees) {
    Case& c = sw.run_shape(s, held);
    VerifyParams chain = c.params;  // the same rows as chains: the tokens in a line
    chain.parent = nullptr;
    const double us = sw.time([&] { KDA_CUDA_CHECK(launch_verify(chain, Launch{sw.stream, false})); });
    sw.add(s, "chain", 0, us, c.bytes, us, "-", false, false);
  }
  // A round that fails on the host (its capture, the Verifier's checks) is reported and the run goes on;
  // a kernel's fault would end it, as anywhere in the sweep (the conv's members have just run these
  // shapes as one layer; the rounds differ by the layers' offsets, which every member shares with the
  // library's kernels, and by PDL).
  std::vector<std::string> failed_rounds;
  for (const SweepShape& s : rounds) {
    try {
      sw.run_round(s, held);
    } catch (const std::exception& e) {
      failed_rounds.push_back(s.section + " T=" + std::to_string(s.tokens) + ": " + e.what());
      std::fprintf(stderr, "bench_verify_sweep: the round %s failed\n", failed_rounds.back().c_str());
      cudaGetLastError();  // a capture's error, not the next launch's
    }
  }
  for (const SweepShape& s : chains) sw.run_shape(s, held);
  held.reset();
  csv.finish();

  // The tables and the aims are sweep_report.py's, from the CSV; the console ends with what fails the run.
  for (const std::string& f : failed_rounds) std::printf("The round %s failed; its rows stop there.\n", f.c_str());
  std::printf("%d member run(s) with the library's formula gave other bits than the library%s\n", sw.r.mismatches,
              sw.r.mismatches > 0 ? ": a bug, fix it before reading the times" : "");
  return sw.r.mismatches > 0 || !failed_rounds.empty() ? 1 : 0;
}

}  // namespace
}  // namespace kdagraph

int main(int argc, char** argv) {
  try {
    return kdagraph::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_verify_sweep: %s\n", e.what());
    return 1;
  }
}
