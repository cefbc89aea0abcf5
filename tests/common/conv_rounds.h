// docs/modes.md, docs/conv.md through the operations on caller-owned storage: a KDA layer's round with its short
// convolution (build_indices, then per layer conv_layer into q, k and v and verify_layer, or the two
// fused in conv_verify_layer; accept; the two-phase commit), run in two-phase, fused-accept and replay,
// each unfused and fused, side by side over many rounds with requests joining and retiring. Shared by
// the CPU test, its SIMT twin and its GPU twin.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kdagraph/ops.hpp"
#include "tests/common/caller_storage.h"
#include "tests/common/conv_reference.h"
#include "tests/common/reference.h"

namespace kdagraph::test {

inline std::vector<uint8_t> random_io_bytes(size_t n, DType t, std::mt19937_64& rng, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<uint8_t> out(n * dtype_size(t));
  for (size_t i = 0; i < n; ++i) {
    const float x = d(rng);
    if (t == DType::f32) {
      std::memcpy(out.data() + 4 * i, &x, 4);
    } else {
      const math::bf16 b = math::f32_to_bf16(x);
      std::memcpy(out.data() + 2 * i, &b, 2);
    }
  }
  return out;
}

// One mode's storage and its per-layer outputs: the conv's q, k, v and the verify's o. Fused, one kernel
// per layer leaves q, k and v as they were.
struct ConvModeRun {
  CallerStorage st;
  bool fused;
  std::vector<detail::Buffer> q, k, v, o;
  ConvModeRun(const VerifierConfig& c, CallerLayout layout, const ConvShape& conv, bool fuse = false)
      : st(c, layout, conv), fused(fuse) {
    const size_t N = size_t(c.max_rows), T = size_t(c.tokens), es = dtype_size(c.io_dtype);
    const size_t HK = size_t(c.model.heads) * size_t(c.model.head_k);
    const size_t HVV = size_t(c.model.value_heads) * size_t(c.model.head_v);
    for (int32_t l = 0; l < c.model.layers; ++l) {
      q.emplace_back(c.backend, N * T * HK * es);
      k.emplace_back(c.backend, N * T * HK * es);
      v.emplace_back(c.backend, N * T * HVV * es);
      o.emplace_back(c.backend, N * T * HVV * es);
    }
  }
  // Every output buffer of every layer, as the host sees it.
  std::vector<std::vector<uint8_t>> outputs() const {
    std::vector<std::vector<uint8_t>> all;
    for (const auto* set : {&q, &k, &v, &o})
      for (const auto& b : *set) all.push_back(b.download<uint8_t>());
    return all;
  }
  // Every byte of the storage a round may write.
  std::vector<std::vector<uint8_t>> storage() const {
    return {st.pool.bytes(),
            st.scratch.bytes(),
            st.ring_kg.bytes(),
            st.ring_u.bytes(),
            st.ring_cursor.download<uint8_t>(),
            st.conv_state.bytes(),
            st.conv_scratch.bytes(),
            st.accept_len.download<uint8_t>(),
            st.round_parity.download<uint8_t>()};
  }
  std::string name() const { return std::string(to_string(st.config.mode)) + (fused ? " fused" : ""); }
};

// Runs `rounds` rounds in every mode, unfused and fused (conv_verify_layer, with the batch for its early
// loads), on the backend of `s` and expects, bitwise across all six: every round's verify outputs, and
// every retired request's materialized recurrent state and conv window; across the unfused runs the conv
// outputs too, which the fused ones never write; fused against unfused of each mode, every byte of the
// storage after every round. Against fp64: every conv output (each request's window is its last W - 1
// accepted inputs, so windows straddle rounds for every a). Padded rows output zeros; the batch's slot
// array holds other live slots past n_real, and slots outside the batch keep every conv state byte.
inline void expect_conv_modes_agree(VerifierConfig base, ConvShape conv, CallerLayout layout, const Stream& s,
                                    uint64_t seed, int rounds) {
  SCOPED_TRACE(std::string("layout ") + to_string(layout) + " seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const Mode modes[] = {Mode::two_phase, Mode::fused_accept, Mode::replay};
  std::vector<std::unique_ptr<ConvModeRun>> runs;  // the unfused modes, then the fused ones
  for (bool fused : {false, true})
    for (Mode m : modes) {
      base.mode = m;
      runs.push_back(std::make_unique<ConvModeRun>(base, layout, conv, fused));
    }
  const VerifierConfig& c = base;
  const Backend b = c.backend;
  const int32_t P = c.pool.slots, L = c.model.layers, N = c.max_rows, T = c.tokens, C = conv.channels, W = conv.width;
  const DType io = c.io_dtype;
  const size_t es = dtype_size(io);

  // Per layer: weights, a bias on odd layers, and the shared inputs of each round.
  std::vector<RefConv> ref;
  std::vector<detail::Buffer> weight, bias, x, g, beta;
  std::vector<std::vector<uint8_t>> x_host(static_cast<size_t>(L));
  for (int32_t l = 0; l < L; ++l) {
    std::uniform_real_distribution<float> d(-0.8f, 0.8f);
    std::vector<float> w(size_t(C) * W), bs(l % 2 ? size_t(C) : 0);
    for (auto& e : w) e = d(rng);
    for (auto& e : bs) e = 0.3f * d(rng);
    weight.push_back(detail::Buffer::copy_of(b, w));
    bias.push_back(detail::Buffer::copy_of(b, bs));
    ref.push_back(RefConv{C, W, std::vector<double>(w.begin(), w.end()), std::vector<double>(bs.begin(), bs.end()),
                          conv.activation == ConvActivation::silu});
    x.emplace_back(b, size_t(N) * T * C * es);
    g.emplace_back(b, size_t(N) * T * c.model.value_heads * c.model.head_k * es);
    beta.emplace_back(b, size_t(N) * T * c.model.value_heads * es);
  }
  std::vector<float> gate_host(size_t(c.model.value_heads) * (1 + size_t(c.model.head_k)));
  for (size_t i = 0; i < gate_host.size(); ++i) gate_host[i] = 0.05f * float(i % 7) - 0.1f;
  const detail::Buffer gate = detail::Buffer::copy_of(b, gate_host);
  const GateParams layer_gate{gate.as<float>(), gate.as<float>() + c.model.value_heads};
  const std::vector<GateParams> gates(size_t(L), layer_gate);

  struct Request {
    int32_t slot;
    std::vector<std::vector<std::vector<double>>> window;  // [layer][W - 1][C]: the last accepted inputs
  };
  std::vector<Request> live;
  std::vector<int32_t> free_slots;
  for (int32_t slot = P - 1; slot >= 0; --slot) free_slots.push_back(slot);
  const int64_t conv_row = conv_state_row_elems(runs[1]->st.spec, c.pool.scratch_steps);  // the widest
  auto join = [&] {
    Request r{free_slots.back(), {}};
    free_slots.pop_back();
    const std::vector<uint8_t> states = random_states(c, rng);
    for (int32_t l = 0; l < L; ++l) {
      // A whole row of inputs: the window at columns [0, W - 1), the rest garbage no one may read.
      const std::vector<uint8_t> row = random_io_bytes(size_t(conv_row), io, rng, -2.0f, 2.0f);
      r.window.emplace_back();
      for (int32_t j = 0; j < W - 1; ++j) {
        r.window.back().emplace_back();
        for (int32_t ch = 0; ch < C; ++ch) r.window.back().back().push_back(math::load_as_f32(row.data(), io, int64_t(j) * C + ch));
      }
      for (auto& run : runs) run->st.conv_state.write_row(l, r.slot, row.data());
    }
    for (auto& run : runs) run->st.prefill(r.slot, states);
    live.push_back(std::move(r));
  };
  int retired = 0;
  auto retire = [&](std::vector<size_t> which) {
    if (which.empty()) return;
    std::vector<int32_t> slots;
    for (size_t i : which) slots.push_back(live[i].slot);
    for (auto& run : runs) {
      run->st.materialize_list.upload(slots.data(), slots.size() * sizeof(int32_t));
      ops::materialize(s, run->st.spec, run->st.storage, run->st.materialize_list.as<int32_t>(), int32_t(slots.size()),
                       gates.data());
    }
    std::vector<std::vector<uint8_t>> pools, convs;
    for (auto& run : runs) {
      pools.push_back(run->st.pool.bytes());
      convs.push_back(run->st.conv_state.bytes());
    }
    for (size_t i : which) {
      const Request& r = live[i];
      for (int32_t l = 0; l < L; ++l) {
        SCOPED_TRACE("retiring slot " + std::to_string(r.slot) + " layer " + std::to_string(l));
        const std::vector<uint8_t> want_pool = runs[0]->st.pool.row(pools[0], l, r.slot);
        std::vector<uint8_t> want_window = runs[0]->st.conv_state.row(convs[0], l, r.slot);
        want_window.resize(size_t(W - 1) * size_t(C) * es);
        for (int32_t j = 0; j < W - 1; ++j)
          for (int32_t ch = 0; ch < C; ++ch)
            ASSERT_EQ(math::load_as_f32(want_window.data(), io, int64_t(j) * C + ch), float(r.window[size_t(l)][size_t(j)][size_t(ch)]))
                << "two-phase window, column " << j << " channel " << ch << ": not the last accepted inputs";
        for (size_t m = 1; m < runs.size(); ++m) {
          ASSERT_EQ(runs[m]->st.pool.row(pools[m], l, r.slot), want_pool) << runs[m]->name() << ": recurrent state";
          std::vector<uint8_t> window = runs[m]->st.conv_state.row(convs[m], l, r.slot);
          window.resize(want_window.size());
          ASSERT_EQ(window, want_window) << runs[m]->name() << ": materialized conv window";
        }
      }
      free_slots.push_back(r.slot);
      ++retired;
    }
    std::vector<Request> keep;
    for (size_t i = 0; i < live.size(); ++i)
      if (std::find(which.begin(), which.end(), i) == which.end()) keep.push_back(std::move(live[i]));
    live = std::move(keep);
  };

  // Row `row`'s T inputs of layer l this round, [T][C].
  auto inputs_of = [&](int32_t l, int32_t row) {
    std::vector<std::vector<double>> xs(static_cast<size_t>(T), std::vector<double>(static_cast<size_t>(C)));
    for (int32_t t = 0; t < T; ++t)
      for (int32_t ch = 0; ch < C; ++ch)
        xs[size_t(t)][size_t(ch)] = math::load_as_f32(x_host[size_t(l)].data(), io, (int64_t(row) * T + t) * C + ch);
    return xs;
  };

  while (int32_t(live.size()) < N) join();
  for (int round = 0; round < rounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    if (round > 0) {
      std::vector<size_t> leaving;
      for (size_t i = 0; i < live.size(); ++i)
        if (std::bernoulli_distribution(0.12)(rng)) leaving.push_back(i);
      retire(leaving);
      if (::testing::Test::HasFatalFailure()) return;
      while (int32_t(live.size()) < N && !free_slots.empty() && std::bernoulli_distribution(0.7)(rng)) join();
      if (live.empty()) join();
    }
    std::vector<size_t> order(live.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    order.resize(size_t(std::uniform_int_distribution<int32_t>(1, int32_t(order.size()))(rng)));
    const int32_t n = int32_t(order.size());
    std::vector<int32_t> packed(size_t(N) + 1, -1), accepted(size_t(N), 0);
    packed[0] = n;
    for (int32_t i = 0; i < n; ++i) {
      packed[size_t(i) + 1] = live[order[size_t(i)]].slot;
      accepted[size_t(i)] = std::uniform_int_distribution<int32_t>(1, T)(rng);
    }
    // Past n_real the slot array holds stale entries, live slots outside the batch among them: rows
    // n_real and on are padding whatever they name, and those slots must stay untouched.
    for (int32_t i = n; i < N; ++i)
      if (size_t(i) < live.size() && std::bernoulli_distribution(0.5)(rng)) packed[size_t(i) + 1] = live[size_t(i)].slot;
    const auto in_batch = [&](int32_t slot) {
      return std::find(packed.begin() + 1, packed.begin() + 1 + n, slot) != packed.begin() + 1 + n;
    };
    for (int32_t l = 0; l < L; ++l) {
      x_host[size_t(l)] = random_io_bytes(size_t(N) * T * C, io, rng, -2.0f, 2.0f);
      x[size_t(l)].upload(x_host[size_t(l)].data(), x_host[size_t(l)].size());
      const std::vector<uint8_t> gb = random_io_bytes(g[size_t(l)].bytes() / es, io, rng, -3.0f, 3.0f);
      g[size_t(l)].upload(gb.data(), gb.size());
      const std::vector<uint8_t> bb = random_io_bytes(beta[size_t(l)].bytes() / es, io, rng, -3.0f, 3.0f);
      beta[size_t(l)].upload(bb.data(), bb.size());
    }
    std::vector<std::vector<uint8_t>> conv_before, scratch_before, pool_before;
    for (auto& run : runs) {
      conv_before.push_back(run->st.conv_state.bytes());
      scratch_before.push_back(run->st.conv_scratch.bytes());
      pool_before.push_back(run->st.pool.bytes());
      for (auto* set : {&run->q, &run->k, &run->v, &run->o})
        for (auto& buf : *set) buf.fill(0xff);
      CallerStorage& st = run->st;
      st.batch.upload(packed.data(), packed.size() * sizeof(int32_t));
      st.accepted.upload(accepted.data(), accepted.size() * sizeof(int32_t));
      ops::build_indices(s, st.spec, st.storage, st.batch_view(N), st.idx);
      for (int32_t l = 0; l < L; ++l) {
        const size_t li = size_t(l);
        ConvLayerInputs ci = conv_into_verify_inputs(st.spec, x[li].data(), weight[li].as<float>(),
                                                     l % 2 ? bias[li].as<float>() : nullptr, run->q[li].data(),
                                                     run->k[li].data(), run->v[li].data());
        if (!run->fused) ops::conv_layer(s, st.spec, st.storage, st.idx, N, l, ci);
        LayerInputs in;
        in.q = run->q[li].data();
        in.k = run->k[li].data();
        in.v = run->v[li].data();
        in.g = g[li].data();
        in.beta = beta[li].data();
        in.o = run->o[li].data();
        in.A_log = layer_gate.A_log;
        in.dt_bias = layer_gate.dt_bias;
        const BatchView batch = st.batch_view(N);
        if (run->fused) ops::conv_verify_layer(s, st.spec, st.storage, st.idx, N, l, ci, in, &batch);
        else ops::verify_layer(s, st.spec, st.storage, st.idx, N, l, in);
      }
      ops::accept(s, st.spec, st.storage, st.idx, N, st.accepted.as<int32_t>());
      if (mode_policy(st.spec.mode).commit) ops::commit(s, st.spec, st.storage, st.idx, N);
    }

    const auto want = runs[0]->outputs();
    const size_t first_o = 3 * size_t(L);  // q, k, v, then o, per layer
    for (size_t m = 1; m < runs.size(); ++m) {
      const auto got = runs[m]->outputs();
      for (size_t i = 0; i < want.size(); ++i) {
        if (runs[m]->fused && i < first_o) {
          ASSERT_EQ(got[i], std::vector<uint8_t>(got[i].size(), 0xff)) << runs[m]->name() << " wrote q, k or v";
          continue;
        }
        ASSERT_EQ(first_difference(got[i], want[i]), -1)
            << runs[m]->name() << " differs from two-phase in output buffer " << i << " (q, k, v, o per layer)";
      }
    }
    // Padded rows output zeros (every run's o equals these).
    const size_t o_row = size_t(T) * size_t(c.model.value_heads) * size_t(c.model.head_v) * es;
    for (int32_t l = 0; l < L; ++l) {
      const std::vector<uint8_t>& o = want[first_o + size_t(l)];
      ASSERT_TRUE(std::all_of(o.begin() + ptrdiff_t(size_t(n) * o_row), o.end(), [](uint8_t byte) { return byte == 0; }))
          << "a padded row's output is not zero, layer " << l;
    }
    // Fused against unfused, mode by mode: every byte of the storage.
    for (size_t m = 0; m < 3; ++m) {
      const auto unfused = runs[m]->storage(), fused = runs[m + 3]->storage();
      for (size_t i = 0; i < unfused.size(); ++i)
        ASSERT_EQ(first_difference(fused[i], unfused[i]), -1)
            << runs[m + 3]->name() << ": storage buffer " << i
            << " (pool, scratch, token cache, conv state, conv scratch, accept_len, round parity) differs from unfused";
    }
    // The conv outputs against fp64: the channels [0, HK), [HK, 2HK), [2HK, C) are q, k and v.
    const int32_t HK = c.model.heads * c.model.head_k;
    for (int32_t l = 0; l < L; ++l) {
      const std::vector<uint8_t> y[3] = {want[size_t(l)], want[size_t(L + l)], want[size_t(2 * L + l)]};
      const int32_t widths[3] = {HK, HK, C - 2 * HK};
      std::vector<double> got, ref_y;
      for (int32_t row = 0; row < N; ++row) {
        const std::vector<std::vector<double>> xs = inputs_of(l, row);
        const bool real = row < n;
        const auto yr = real ? ref_conv(ref[size_t(l)], live[order[size_t(row)]].window[size_t(l)], xs)
                             : std::vector<std::vector<double>>();
        for (int32_t t = 0; t < T; ++t)
          for (int seg = 0, first = 0; seg < 3; first += widths[seg++])
            for (int32_t e = 0; e < widths[seg]; ++e) {
              const float value = math::load_as_f32(y[seg].data(), io, (int64_t(row) * T + t) * widths[seg] + e);
              if (!real) {
                ASSERT_EQ(value, 0.0f) << "padded row " << row << " layer " << l;
                continue;
              }
              ASSERT_FALSE(std::isnan(value)) << "conv output not written: row " << row << " layer " << l;
              got.push_back(value);
              ref_y.push_back(yr[size_t(t)][size_t(first + e)]);
            }
      }
      EXPECT_LE(rel_error(got, ref_y), io == DType::f32 ? 1e-5 : 1e-2) << "conv outputs of layer " << l;
    }
    // Slots outside the batch keep every conv byte and their pool state, in every mode.
    for (size_t m = 0; m < runs.size(); ++m) {
      const auto after = runs[m]->st.conv_state.bytes(), scratch_after = runs[m]->st.conv_scratch.bytes();
      const auto pool_after = runs[m]->st.pool.bytes();
      for (int32_t slot = 0; slot < runs[m]->st.pool_rows; ++slot) {
        if (in_batch(slot)) continue;
        for (int32_t l = 0; l < L; ++l) {
          ASSERT_EQ(runs[m]->st.pool.row(pool_after, l, slot), runs[m]->st.pool.row(pool_before[m], l, slot))
              << runs[m]->name() << ": pool state of slot " << slot << " outside the batch, layer " << l;
          ASSERT_EQ(runs[m]->st.conv_state.row(after, l, slot), runs[m]->st.conv_state.row(conv_before[m], l, slot))
              << runs[m]->name() << ": conv state of slot " << slot << " outside the batch, layer " << l;
          for (int32_t t = 0; t < c.pool.scratch_steps && runs[m]->st.conv_scratch.rows > 0; ++t)
            ASSERT_EQ(runs[m]->st.conv_scratch.row(scratch_after, l, slot * c.pool.scratch_steps + t),
                      runs[m]->st.conv_scratch.row(scratch_before[m], l, slot * c.pool.scratch_steps + t))
                << "conv scratch of slot " << slot << " outside the batch";
        }
      }
    }
    if (::testing::Test::HasFailure()) return;
    for (int32_t i = 0; i < n; ++i) {
      Request& r = live[order[size_t(i)]];
      for (int32_t l = 0; l < L; ++l) {
        r.window[size_t(l)] = ref_after_accept(r.window[size_t(l)], inputs_of(l, i), accepted[size_t(i)]);
      }
    }
  }
  std::vector<size_t> all(live.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  retire(all);
  EXPECT_GT(retired, rounds / 10) << "requests should retire along the way";
}

}  // namespace kdagraph::test
