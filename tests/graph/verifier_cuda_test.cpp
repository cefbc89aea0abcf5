// SPEC §3 on the CUDA backend, through the public Verifier API only: two-phase and fused-accept run side
// by side over many rounds with random batches, padding and accept lengths, and must agree bitwise
// (outputs every round, pools after materialize); a CPU Verifier on the same inputs agrees within
// tolerance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "kdagraph/verifier.hpp"
#include "tests/common/gpu.h"

namespace kdagraph::test {
namespace {

// Host values in a dtype: bf16 values are drawn exactly representable, so encoding is the top half.
struct HostTensor {
  DType dtype = DType::f32;
  std::vector<uint8_t> bytes;

  HostTensor(DType t, size_t count, std::mt19937_64& rng, float lo, float hi) : dtype(t) {
    std::uniform_real_distribution<float> dist(lo, hi);
    bytes.resize(count * dtype_size(t));
    for (size_t i = 0; i < count; ++i) {
      uint32_t u;
      const float f = dist(rng);
      std::memcpy(&u, &f, 4);
      if (t == DType::f32) {
        std::memcpy(bytes.data() + 4 * i, &u, 4);
      } else {
        const auto top = uint16_t(u >> 16);
        std::memcpy(bytes.data() + 2 * i, &top, 2);
      }
    }
  }
};

std::vector<double> decode(DType t, const std::vector<uint8_t>& bytes) {
  std::vector<double> out(bytes.size() / dtype_size(t));
  for (size_t i = 0; i < out.size(); ++i) {
    uint32_t u = 0;
    if (t == DType::f32) {
      std::memcpy(&u, bytes.data() + 4 * i, 4);
    } else {
      uint16_t top;
      std::memcpy(&top, bytes.data() + 2 * i, 2);
      u = uint32_t(top) << 16;
    }
    float f;
    std::memcpy(&f, &u, 4);
    out[i] = f;
  }
  return out;
}

double rel_error(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  if (std::isnan(num)) return INFINITY;
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

struct Shape {
  int32_t head_dim;
  DType io, state;
  double tol;
};

// One layer's inputs at max_rows, in host memory (for the CPU verifier) and device memory.
struct LayerData {
  HostTensor q, k, v, g, beta;
  std::vector<float> A_log, dt_bias;
  std::unique_ptr<DeviceBuffer> dq, dk, dv, dg, dbeta, dA_log, ddt_bias;

  LayerData(const VerifierConfig& c, std::mt19937_64& rng)
      : q(c.io_dtype, size_t(c.max_rows) * c.tokens * c.model.heads * c.model.head_k, rng, -1.0f, 1.0f),
        k(c.io_dtype, q.bytes.size() / dtype_size(c.io_dtype), rng, -1.0f, 1.0f),
        v(c.io_dtype, size_t(c.max_rows) * c.tokens * c.model.value_heads * c.model.head_v, rng, -1.0f, 1.0f),
        g(c.io_dtype, size_t(c.max_rows) * c.tokens * c.model.value_heads * c.model.head_k, rng, -3.0f, 3.0f),
        beta(c.io_dtype, size_t(c.max_rows) * c.tokens * c.model.value_heads, rng, -3.0f, 3.0f) {
    std::uniform_real_distribution<float> a(-1.0f, 0.5f), dt(-0.5f, 0.5f);
    for (int32_t h = 0; h < c.model.value_heads; ++h) A_log.push_back(a(rng));
    for (int32_t i = 0; i < c.model.value_heads * c.model.head_k; ++i) dt_bias.push_back(dt(rng));
    dq = std::make_unique<DeviceBuffer>(q.bytes);
    dk = std::make_unique<DeviceBuffer>(k.bytes);
    dv = std::make_unique<DeviceBuffer>(v.bytes);
    dg = std::make_unique<DeviceBuffer>(g.bytes);
    dbeta = std::make_unique<DeviceBuffer>(beta.bytes);
    dA_log = std::make_unique<DeviceBuffer>(A_log);
    ddt_bias = std::make_unique<DeviceBuffer>(dt_bias);
  }

  LayerInputs host(void* o) const {
    return LayerInputs{q.bytes.data(), k.bytes.data(), v.bytes.data(), g.bytes.data(), beta.bytes.data(), o,
                       A_log.data(),   dt_bias.data()};
  }
  LayerInputs device(void* o) const {
    return LayerInputs{
        dq->as(), dk->as(), dv->as(), dg->as(), dbeta->as(), o, dA_log->as<float>(), ddt_bias->as<float>()};
  }
};

void PrintTo(const Shape& s, std::ostream* os) {
  *os << "K=V=" << s.head_dim << " io=" << to_string(s.io) << " state=" << to_string(s.state)
      << " tol=" << s.tol;
}

class VerifierCuda : public ::testing::TestWithParam<Shape> {};

TEST_P(VerifierCuda, TheModesAgreeBitwiseAndMatchCpu) {
  KDA_SKIP_WITHOUT_GPU();
  const Shape shape = GetParam();
  const uint64_t seed = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  SCOPED_TRACE("K=V=" + std::to_string(shape.head_dim) + " io=" + to_string(shape.io) +
               " state=" + to_string(shape.state) + " seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);

  VerifierConfig cfg;
  cfg.backend = Backend::cuda;
  cfg.model = ModelShape{3, 2, 4, shape.head_dim, shape.head_dim};
  cfg.pool = PoolShape{10, 6, shape.state};
  cfg.max_rows = 8;
  cfg.tokens = 4;
  cfg.io_dtype = shape.io;
  cfg.options.l2norm_qk = true;
  cfg.options.gate = GateMode::softplus;
  cfg.options.beta_is_logit = true;
  VerifierConfig two_phase_cfg = cfg, fused_cfg = cfg, replay_cfg = cfg, cpu_cfg = cfg;
  two_phase_cfg.mode = Mode::two_phase;
  fused_cfg.mode = Mode::fused_accept;
  replay_cfg.mode = Mode::replay;
  cpu_cfg.mode = Mode::fused_accept;
  cpu_cfg.backend = Backend::cpu;
  Verifier two_phase(two_phase_cfg), fused(fused_cfg), replay(replay_cfg), cpu(cpu_cfg);
  const detail::StreamHandle stream = test_stream();
  const Stream cuda{Backend::cuda, stream.cuda()}, host{Backend::cpu, nullptr};

  const int32_t L = cfg.model.layers, P = cfg.pool.slots, T = cfg.tokens, N = cfg.max_rows;
  for (int32_t slot = 0; slot < P; ++slot) {
    const HostTensor states(shape.state, size_t(L) * two_phase.slot_state_bytes() / dtype_size(shape.state),
                            rng, -1.0f, 1.0f);
    two_phase.prefill(cuda, slot, states.bytes.data());
    fused.prefill(cuda, slot, states.bytes.data());
    replay.prefill(cuda, slot, states.bytes.data());
    cpu.prefill(host, slot, states.bytes.data());
  }

  const size_t out_bytes = size_t(N) * T * cfg.model.value_heads * cfg.model.head_v * dtype_size(shape.io);
  std::vector<std::unique_ptr<DeviceBuffer>> two_phase_out, fused_out, replay_out;
  std::vector<std::vector<uint8_t>> cpu_out(static_cast<size_t>(L), std::vector<uint8_t>(out_bytes));
  for (int32_t l = 0; l < L; ++l) {
    two_phase_out.push_back(std::make_unique<DeviceBuffer>(out_bytes));
    fused_out.push_back(std::make_unique<DeviceBuffer>(out_bytes));
    replay_out.push_back(std::make_unique<DeviceBuffer>(out_bytes));
  }

  std::vector<int32_t> all_slots(static_cast<size_t>(P));
  for (int32_t s = 0; s < P; ++s) all_slots[size_t(s)] = s;
  // The last round's inputs outlive it: a replay materialize reads the layers' gate parameters.
  std::vector<LayerData> data;
  for (int round = 0; round < 60; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const int32_t n = 1 + int32_t(rng() % uint64_t(N));
    const int32_t rows = n + int32_t(rng() % uint64_t(N - n + 1));  // rows past n are padding
    std::vector<int32_t> slots = all_slots;
    std::shuffle(slots.begin(), slots.end(), rng);
    slots.resize(size_t(n));

    data.clear();
    std::vector<LayerInputs> two_phase_in, fused_in, replay_in, cpu_in;
    for (int32_t l = 0; l < L; ++l) data.emplace_back(cfg, rng);
    for (int32_t l = 0; l < L; ++l) {
      two_phase_out[size_t(l)]->fill(0xff);
      fused_out[size_t(l)]->fill(0xff);
      replay_out[size_t(l)]->fill(0xff);
      two_phase_in.push_back(data[size_t(l)].device(two_phase_out[size_t(l)]->as()));
      fused_in.push_back(data[size_t(l)].device(fused_out[size_t(l)]->as()));
      replay_in.push_back(data[size_t(l)].device(replay_out[size_t(l)]->as()));
      cpu_in.push_back(data[size_t(l)].host(cpu_out[size_t(l)].data()));
    }
    two_phase.set_batch(cuda, slots.data(), n);
    fused.set_batch(cuda, slots.data(), n);
    replay.set_batch(cuda, slots.data(), n);
    cpu.set_batch(host, slots.data(), n);
    two_phase.enqueue_round(cuda, two_phase_in.data(), rows);
    fused.enqueue_round(cuda, fused_in.data(), rows);
    replay.enqueue_round(cuda, replay_in.data(), rows);
    cpu.enqueue_round(host, cpu_in.data(), rows);
    stream.synchronize();

    const size_t real_bytes = out_bytes / size_t(N) * size_t(n);
    for (int32_t l = 0; l < L; ++l) {
      std::vector<uint8_t> a = two_phase_out[size_t(l)]->download<uint8_t>();
      std::vector<uint8_t> b = fused_out[size_t(l)]->download<uint8_t>();
      std::vector<uint8_t> r = replay_out[size_t(l)]->download<uint8_t>();
      a.resize(size_t(rows) * out_bytes / size_t(N));
      b.resize(a.size());
      r.resize(a.size());
      ASSERT_EQ(first_difference(a, b), -1)
          << "layer " << l << ": two-phase and fused-accept outputs differ at this byte";
      ASSERT_EQ(first_difference(a, r), -1) << "layer " << l << ": two-phase and replay outputs differ at this byte";
      ASSERT_TRUE(std::all_of(b.begin() + ptrdiff_t(real_bytes), b.end(), [](uint8_t x) { return x == 0; }))
          << "layer " << l << ": padded rows must output zeros";
      b.resize(real_bytes);
      std::vector<uint8_t> c = cpu_out[size_t(l)];
      c.resize(real_bytes);
      EXPECT_LE(rel_error(decode(shape.io, b), decode(shape.io, c)), shape.tol)
          << "layer " << l << ": CUDA vs CPU";
    }

    std::vector<int32_t> accepted(static_cast<size_t>(n));
    for (auto& a : accepted) a = 1 + int32_t(rng() % uint64_t(T));
    two_phase.enqueue_accept_from_host(cuda, accepted.data(), n);
    two_phase.enqueue_commit(cuda, rows);
    fused.enqueue_accept_from_host(cuda, accepted.data(), n);
    replay.enqueue_accept_from_host(cuda, accepted.data(), n);
    cpu.enqueue_accept_from_host(host, accepted.data(), n);
    if (round % 7 == 6) {  // materialize mid-run, as a prefix-cache snapshot would
      std::vector<int32_t> some = all_slots;
      std::shuffle(some.begin(), some.end(), rng);
      some.resize(size_t(1 + rng() % uint64_t(P)));
      fused.enqueue_materialize(cuda, some.data(), int32_t(some.size()));
      replay.enqueue_materialize(cuda, some.data(), int32_t(some.size()));
      cpu.enqueue_materialize(host, some.data(), int32_t(some.size()));
    }
  }

  fused.enqueue_materialize(cuda, all_slots.data(), P);
  replay.enqueue_materialize(cuda, all_slots.data(), P);
  cpu.enqueue_materialize(host, all_slots.data(), P);
  stream.synchronize();
  EXPECT_EQ(two_phase.device_errors().count, 0u);
  EXPECT_EQ(fused.device_errors().count, 0u);
  EXPECT_EQ(replay.device_errors().count, 0u);
  EXPECT_EQ(replay.scratch_bytes(), 0u);
  std::vector<uint8_t> a(size_t(L) * two_phase.slot_state_bytes()), b(a.size()), c(a.size()), r(a.size());
  for (int32_t slot = 0; slot < P; ++slot) {
    two_phase.read_pool(cuda, slot, a.data());
    fused.read_pool(cuda, slot, b.data());
    replay.read_pool(cuda, slot, r.data());
    cpu.read_pool(host, slot, c.data());
    EXPECT_EQ(first_difference(a, b), -1)
        << "slot " << slot << ": pools differ after materialize at this byte";
    EXPECT_EQ(first_difference(a, r), -1) << "slot " << slot << ": replay's pool differs after materialize at this byte";
    EXPECT_LE(rel_error(decode(shape.state, b), decode(shape.state, c)), shape.tol)
        << "slot " << slot << ": CUDA vs CPU pool";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, VerifierCuda,
                         ::testing::Values(Shape{128, DType::f32, DType::f32, 1e-5},
                                           Shape{64, DType::bf16, DType::bf16, 1e-2},
                                           Shape{128, DType::bf16, DType::f32, 1e-2}),
                         [](const ::testing::TestParamInfo<Shape>& param_info) {
                           return "K" + std::to_string(param_info.param.head_dim) + "_io_" +
                                  to_string(param_info.param.io) + "_state_" +
                                  to_string(param_info.param.state);
                         });

}  // namespace
}  // namespace kdagraph::test
