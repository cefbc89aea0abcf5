// docs/modes.md through the public Verifier API, on one backend: two-phase, fused-accept and replay run side by
// side over many rounds with random batches, padding and accept lengths, slots materialized and refilled
// (a request retiring and another joining) mid-ring, and must agree bitwise (outputs every round, pools
// after every materialize; with a bf16 state replay rounds at its flushes only, docs/low_precision.md, and is held to
// the fp64 tolerance instead); every round's outputs and every state the two-phase commit writes also
// match an fp64 reference (tests/common/reference.h) seeded from the two-phase pool.
// One body for every build: the CPU backend and, compiled for the SIMT executor, the CUDA kernels on the
// CPU (tests/graph/verifier_modes_test.cpp), and the GPU (tests/graph/verifier_cuda_test.cpp).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kdagraph/verifier.hpp"
#include "kernels/memory.h"
#include "kernels/stream.h"
#include "tests/common/reference.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {

struct ModesShape {
  int32_t head_dim;  // K = V
  DType io, state;
  double tol;        // against fp64
};

inline void PrintTo(const ModesShape& s, std::ostream* os) {
  *os << "K=V=" << s.head_dim << " io=" << to_string(s.io) << " state=" << to_string(s.state) << " tol=" << s.tol;
}

// The shapes every build runs: both head dims the GPU supports, fp32 and bf16 io and state.
inline const std::vector<ModesShape> kModesShapes = {
    {128, DType::f32, DType::f32, 1e-5}, {64, DType::bf16, DType::bf16, 1e-2}, {128, DType::bf16, DType::f32, 1e-2}};

// How long a run is: rounds, a mid-run materialize of random slots and a refill of one every
// `materialize_every` rounds (as a prefix-cache snapshot and a new request would), batches of up to
// `max_rows` rows, the layers (at least 2, each with its own gate parameters), replay's ring
// (VerifierConfig::ring: 0 and -1 its defaults), and whether each round is checked against fp64 too.
struct ModesRun {
  int32_t rounds;
  int32_t materialize_every;
  int32_t max_rows;
  int32_t layers;
  ReplayRing ring{};
  bool fp64 = true;
};
// What the GPU and the CPU backend run.
inline constexpr ModesRun kModesRun{60, 7, 8, 3};

inline std::string modes_shape_name(const ::testing::TestParamInfo<ModesShape>& info) {
  return "K" + std::to_string(info.param.head_dim) + "_io_" + to_string(info.param.io) + "_state_" +
         to_string(info.param.state);
}

// A layer's weights, A_log [HV] and dt_bias [HV * K]: drawn once, before the rounds, as a model's are,
// and different in every layer, so a replay that used another layer's gate (or another round's)
// would differ from two-phase. In host memory for the reference and in the backend's for the verifiers.
struct ModesLayerGate {
  std::vector<float> A_log, dt_bias;
  detail::Buffer dA_log, ddt_bias;

  ModesLayerGate(Backend b, const VerifierConfig& c, std::mt19937_64& rng) {
    std::uniform_real_distribution<float> a(-1.0f, 0.5f), dt(-0.5f, 0.5f);
    for (int32_t h = 0; h < c.model.value_heads; ++h) A_log.push_back(a(rng));
    for (int32_t i = 0; i < c.model.value_heads * c.model.head_k; ++i) dt_bias.push_back(dt(rng));
    dA_log = detail::Buffer::copy_of(b, A_log);
    ddt_bias = detail::Buffer::copy_of(b, dt_bias);
  }
};

// One layer's inputs of one round at max_rows rows, in the io dtype, kept as host values for the
// reference and copied into the backend's memory.
struct ModesLayerInputs {
  Tensor q, k, v, g, beta;
  detail::Buffer dq, dk, dv, dg, dbeta;

  ModesLayerInputs(Backend b, const VerifierConfig& c, std::mt19937_64& rng) {
    const size_t rows_t = size_t(c.max_rows) * size_t(c.tokens), H = size_t(c.model.heads);
    const size_t HV = size_t(c.model.value_heads), K = size_t(c.model.head_k), V = size_t(c.model.head_v);
    auto draw = [&](size_t n, float lo, float hi) {
      std::uniform_real_distribution<float> d(lo, hi);
      std::vector<float> out(n);
      for (float& x : out) x = d(rng);
      return out;
    };
    q.assign(c.io_dtype, draw(rows_t * H * K, -1.0f, 1.0f));
    k.assign(c.io_dtype, draw(rows_t * H * K, -1.0f, 1.0f));
    v.assign(c.io_dtype, draw(rows_t * HV * V, -1.0f, 1.0f));
    g.assign(c.io_dtype, draw(rows_t * HV * K, -3.0f, 3.0f));
    beta.assign(c.io_dtype, draw(rows_t * HV, -3.0f, 3.0f));
    dq = detail::Buffer::copy_of(b, q.bytes);
    dk = detail::Buffer::copy_of(b, k.bytes);
    dv = detail::Buffer::copy_of(b, v.bytes);
    dg = detail::Buffer::copy_of(b, g.bytes);
    dbeta = detail::Buffer::copy_of(b, beta.bytes);
  }

  LayerInputs view(const ModesLayerGate& gate, void* o) const {
    LayerInputs in;
    in.q = dq.data();
    in.k = dk.data();
    in.v = dv.data();
    in.g = dg.data();
    in.beta = dbeta.data();
    in.o = o;
    in.A_log = gate.dA_log.as<const float>();
    in.dt_bias = gate.ddt_bias.as<const float>();
    return in;
  }
};

// fp64 outputs [T][V] of one head of one row, and its post-state [V * K] after the accepted tokens.
struct ModesHeadRef {
  std::vector<std::vector<double>> out;
  std::vector<double> accepted;
};

// The fp64 verify of head h of row n (of `c`'s shape) from `seed`, the slot's [L, HV, V, K] states in
// the state dtype, of which the first `accepted` tokens are accepted.
inline ModesHeadRef modes_reference(const VerifierConfig& c, const ModesLayerInputs& in, const ModesLayerGate& gate,
                                    const std::vector<uint8_t>& seed, int32_t layer, int32_t n, int32_t h,
                                    int32_t accepted) {
  const int32_t T = c.tokens, H = c.model.heads, HV = c.model.value_heads, K = c.model.head_k, V = c.model.head_v;
  const int32_t hq = h / (HV / H);
  std::vector<double> state(size_t(V) * size_t(K));
  const int64_t base = (int64_t(layer) * HV + h) * V * K;
  for (size_t e = 0; e < state.size(); ++e) state[e] = math::load_as_f32(seed.data(), c.pool.state_dtype, base + int64_t(e));
  auto slice = [](const Tensor& x, size_t at, int32_t len) {
    return std::vector<double>(x.values.begin() + ptrdiff_t(at), x.values.begin() + ptrdiff_t(at) + len);
  };
  RefHeadInputs r;
  for (int32_t t = 0; t < T; ++t) {
    const size_t tok = size_t(n) * size_t(T) + size_t(t);
    r.q.push_back(slice(in.q, (tok * size_t(H) + size_t(hq)) * size_t(K), K));
    r.k.push_back(slice(in.k, (tok * size_t(H) + size_t(hq)) * size_t(K), K));
    r.v.push_back(slice(in.v, (tok * size_t(HV) + size_t(h)) * size_t(V), V));
    r.g.push_back(slice(in.g, (tok * size_t(HV) + size_t(h)) * size_t(K), K));
    r.beta.push_back(in.beta.values[tok * size_t(HV) + size_t(h)]);
  }
  r.a_log = gate.A_log[size_t(h)];
  r.dt_bias.assign(gate.dt_bias.begin() + ptrdiff_t(h) * K, gate.dt_bias.begin() + ptrdiff_t(h + 1) * K);
  std::vector<std::vector<double>> posts;
  ModesHeadRef out;
  out.out = ref_verify_head(ref_options(c.options), K, V, state, r, &posts);
  out.accepted = std::move(posts[size_t(accepted - 1)]);
  return out;
}

// Runs the rounds of `run` through the three modes on `backend` (seed `seed`) and checks them as the top
// of this file says.
inline void expect_modes_agree(Backend backend, const ModesShape& shape, const ModesRun& run, uint64_t seed) {
  SCOPED_TRACE(std::string("backend=") + to_string(backend) + " seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);

  VerifierConfig cfg;
  cfg.backend = backend;
  cfg.model = ModelShape{run.layers, 2, 4, shape.head_dim, shape.head_dim};
  cfg.pool = PoolShape{10, 6, shape.state};
  cfg.max_rows = run.max_rows;
  cfg.tokens = 4;
  cfg.io_dtype = shape.io;
  cfg.options.l2norm_qk = true;
  cfg.options.gate = GateMode::softplus;
  cfg.options.beta_is_logit = true;
  cfg.ring = run.ring;
  VerifierConfig two_phase_cfg = cfg, fused_cfg = cfg, replay_cfg = cfg;
  two_phase_cfg.mode = Mode::two_phase;
  fused_cfg.mode = Mode::fused_accept;
  replay_cfg.mode = Mode::replay;
  Verifier two_phase(two_phase_cfg), fused(fused_cfg), replay(replay_cfg);
  const detail::StreamHandle stream = detail::StreamHandle::create(backend);
  const Stream& s = stream.get();

  const int32_t L = cfg.model.layers, P = cfg.pool.slots, T = cfg.tokens, N = cfg.max_rows;
  const int32_t HV = cfg.model.value_heads, V = cfg.model.head_v;
  // Replay rounds where the others do with an fp32 state only (docs/low_precision.md).
  const bool replay_bitwise = shape.state == DType::f32;
  // pools[slot]: the slot's states [L, HV, V, K] as two-phase holds them, which seed the reference.
  std::vector<std::vector<uint8_t>> pools(static_cast<size_t>(P));
  auto fill_slot = [&](int32_t slot) {  // a new request in `slot`, in every mode
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    std::vector<float> values(size_t(L) * two_phase.slot_state_bytes() / dtype_size(shape.state));
    for (float& x : values) x = d(rng);
    Tensor states;
    states.assign(shape.state, values);
    pools[size_t(slot)] = states.bytes;
    for (Verifier* v : {&two_phase, &fused, &replay}) v->prefill(s, slot, states.bytes.data());
  };
  for (int32_t slot = 0; slot < P; ++slot) fill_slot(slot);

  const size_t out_bytes = size_t(N) * size_t(T) * size_t(HV) * size_t(V) * dtype_size(shape.io);
  std::vector<detail::Buffer> two_phase_out, fused_out, replay_out;
  for (int32_t l = 0; l < L; ++l) {
    two_phase_out.emplace_back(backend, out_bytes);
    fused_out.emplace_back(backend, out_bytes);
    replay_out.emplace_back(backend, out_bytes);
  }
  std::vector<int32_t> all_slots(static_cast<size_t>(P));
  for (int32_t slot = 0; slot < P; ++slot) all_slots[size_t(slot)] = slot;

  // Materialized slots hold, in fused-accept and replay, exactly the state two-phase committed (replay
  // with a bf16 state: within the fp64 tolerance of it).
  auto expect_materialized = [&](const std::vector<int32_t>& slots) {
    std::vector<uint8_t> got(pools[0].size());
    for (int32_t slot : slots)
      for (Verifier* v : {&fused, &replay}) {
        v->read_pool(s, slot, got.data());
        if (v == &replay && !replay_bitwise) {
          std::vector<double> a, b;
          for (size_t e = 0; e < got.size() / dtype_size(shape.state); ++e) {
            a.push_back(math::load_as_f32(got.data(), shape.state, int64_t(e)));
            b.push_back(math::load_as_f32(pools[size_t(slot)].data(), shape.state, int64_t(e)));
          }
          EXPECT_LE(rel_error(a, b), shape.tol) << "replay: slot " << slot << "'s materialized pool against two-phase's";
          continue;
        }
        EXPECT_EQ(first_difference(got, pools[size_t(slot)]), -1)
            << to_string(v->config().mode) << ": slot " << slot << "'s materialized pool differs from two-phase's at this byte";
      }
  };

  std::vector<ModesLayerGate> gates;
  for (int32_t l = 0; l < L; ++l) gates.emplace_back(backend, cfg, rng);
  std::vector<ModesLayerInputs> data;
  for (int32_t round = 0; round < run.rounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const int32_t n = 1 + int32_t(rng() % uint64_t(N));
    const int32_t rows = n + int32_t(rng() % uint64_t(N - n + 1));  // rows past n are padding
    std::vector<int32_t> slots = all_slots;
    std::shuffle(slots.begin(), slots.end(), rng);
    slots.resize(size_t(n));
    std::vector<int32_t> accepted(static_cast<size_t>(n));
    for (int32_t& a : accepted) a = 1 + int32_t(rng() % uint64_t(T));

    data.clear();
    for (int32_t l = 0; l < L; ++l) data.emplace_back(backend, cfg, rng);
    std::vector<LayerInputs> two_phase_in, fused_in, replay_in;
    for (int32_t l = 0; l < L; ++l) {
      for (auto* out : {&two_phase_out, &fused_out, &replay_out}) (*out)[size_t(l)].fill(0xff);  // NaN
      two_phase_in.push_back(data[size_t(l)].view(gates[size_t(l)], two_phase_out[size_t(l)].data()));
      fused_in.push_back(data[size_t(l)].view(gates[size_t(l)], fused_out[size_t(l)].data()));
      replay_in.push_back(data[size_t(l)].view(gates[size_t(l)], replay_out[size_t(l)].data()));
    }
    std::vector<std::vector<ModesHeadRef>> refs(size_t(L) * size_t(n));  // [l][row][h]
    for (int32_t l = 0; l < L && run.fp64; ++l)
      for (int32_t r = 0; r < n; ++r)
        for (int32_t h = 0; h < HV; ++h)
          refs[size_t(l) * size_t(n) + size_t(r)].push_back(
              modes_reference(cfg, data[size_t(l)], gates[size_t(l)], pools[size_t(slots[size_t(r)])], l, r, h,
                              accepted[size_t(r)]));

    for (Verifier* v : {&two_phase, &fused, &replay}) v->set_batch(s, slots.data(), n);
    two_phase.enqueue_round(s, two_phase_in.data(), rows);
    fused.enqueue_round(s, fused_in.data(), rows);
    replay.enqueue_round(s, replay_in.data(), rows);
    stream.synchronize();

    const size_t row_bytes = out_bytes / size_t(N), real_bytes = row_bytes * size_t(n);
    for (int32_t l = 0; l < L; ++l) {
      std::vector<uint8_t> a = two_phase_out[size_t(l)].download<uint8_t>();
      std::vector<uint8_t> b = fused_out[size_t(l)].download<uint8_t>();
      std::vector<uint8_t> r = replay_out[size_t(l)].download<uint8_t>();
      for (auto* x : {&a, &b, &r}) x->resize(size_t(rows) * row_bytes);
      ASSERT_EQ(first_difference(a, b), -1) << "layer " << l << ": two-phase and fused-accept outputs differ at this byte";
      if (replay_bitwise) {
        ASSERT_EQ(first_difference(a, r), -1) << "layer " << l << ": two-phase and replay outputs differ at this byte";
      }
      ASSERT_TRUE(std::all_of(a.begin() + ptrdiff_t(real_bytes), a.end(), [](uint8_t x) { return x == 0; }))
          << "layer " << l << ": padded rows must output zeros";
      ASSERT_TRUE(std::all_of(r.begin() + ptrdiff_t(real_bytes), r.end(), [](uint8_t x) { return x == 0; }))
          << "layer " << l << ": replay's padded rows must output zeros";
      if (!run.fp64) continue;
      for (const auto* out : {&a, &r}) {
        std::vector<double> got, want;
        for (int32_t row = 0; row < n; ++row)
          for (int32_t t = 0; t < T; ++t)
            for (int32_t h = 0; h < HV; ++h)
              for (int32_t j = 0; j < V; ++j) {
                const int64_t at = ((int64_t(row) * T + t) * HV + h) * V + j;
                got.push_back(math::load_as_f32(out->data(), shape.io, at));
                want.push_back(refs[size_t(l) * size_t(n) + size_t(row)][size_t(h)].out[size_t(t)][size_t(j)]);
              }
        EXPECT_LE(rel_error(got, want), shape.tol)
            << "layer " << l << ": " << (out == &a ? "two-phase" : "replay") << " outputs against fp64";
      }
    }

    two_phase.enqueue_accept_from_host(s, accepted.data(), n);
    two_phase.enqueue_commit(s, rows);
    fused.enqueue_accept_from_host(s, accepted.data(), n);
    replay.enqueue_accept_from_host(s, accepted.data(), n);
    for (int32_t row = 0; row < n; ++row) {
      const int32_t slot = slots[size_t(row)];
      std::vector<uint8_t>& pool = pools[size_t(slot)];
      two_phase.read_pool(s, slot, pool.data());
      for (int32_t l = 0; l < L && run.fp64; ++l)
        for (int32_t h = 0; h < HV; ++h) {
          const std::vector<double>& want = refs[size_t(l) * size_t(n) + size_t(row)][size_t(h)].accepted;
          std::vector<double> got(want.size());
          const int64_t base = (int64_t(l) * HV + h) * int64_t(want.size());
          for (size_t e = 0; e < got.size(); ++e) got[e] = math::load_as_f32(pool.data(), shape.state, base + int64_t(e));
          EXPECT_LE(rel_error(got, want), shape.tol) << "slot " << slot << " layer " << l << " head " << h
                                                     << ": the committed state against fp64";
        }
    }
    if (round % run.materialize_every == run.materialize_every - 1) {
      std::vector<int32_t> some = all_slots;
      std::shuffle(some.begin(), some.end(), rng);
      some.resize(size_t(1 + rng() % uint64_t(P)));
      fused.enqueue_materialize(s, some.data(), int32_t(some.size()));
      replay.enqueue_materialize(s, some.data(), int32_t(some.size()));
      expect_materialized(some);
      fill_slot(all_slots[rng() % uint64_t(P)]);  // a request retires, a new one takes its slot
    }
  }

  fused.enqueue_materialize(s, all_slots.data(), P);
  replay.enqueue_materialize(s, all_slots.data(), P);
  expect_materialized(all_slots);
  EXPECT_EQ(two_phase.device_errors().count, 0u);
  EXPECT_EQ(fused.device_errors().count, 0u);
  EXPECT_EQ(replay.device_errors().count, 0u);
  EXPECT_EQ(replay.scratch_bytes(), 0u);
}

}  // namespace kdagraph::test
