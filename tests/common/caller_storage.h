// docs/ops.md in tests: state storage an engine would own, in the layouts engines use, and a driver that
// runs the same rounds through the operations on it and through a Verifier, for bitwise comparison.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kdagraph/ops.hpp"
#include "kdagraph/verifier.hpp"
#include "kernels/kda_math.h"
#include "kernels/layout.h"
#include "kernels/memory.h"

namespace kdagraph::test {

enum class CallerLayout {
  compact,      // one allocation per buffer, [L, rows, HV, V, K]
  layer_table,  // one allocation per layer, addressed through a table the backend reads (vLLM)
  padded_rows,  // rows a little longer than a state, the gap poisoned (a non-compact slot stride)
  sglang,       // SGLang's MambaPool: [L, P + 1, HV, V, K] with a padding slot P nobody names
};

inline const char* to_string(CallerLayout l) {
  switch (l) {
    case CallerLayout::compact: return "compact";
    case CallerLayout::layer_table: return "layer_table";
    case CallerLayout::padded_rows: return "padded_rows";
    case CallerLayout::sglang: return "sglang";
  }
  return "?";
}

constexpr uint8_t kPoison = 0xa5;

// One kind of state (pool or scratch) in a caller's layout, every byte poisoned at first.
struct CallerStates {
  Backend backend;
  DType dtype;
  int32_t layers;
  int64_t rows, row_stride, row_elems;
  std::vector<detail::Buffer> per_layer;  // layer_table: one allocation each
  detail::Buffer whole, table;
  StateView view;

  CallerStates(Backend b, CallerLayout layout, DType t, int32_t L, int64_t rows_, int64_t row_elems_)
      : backend(b), dtype(t), layers(L), rows(rows_), row_elems(row_elems_) {
    const int64_t es = int64_t(dtype_size(t));
    // Rows as close as views allow (16-byte multiples), or a gap of 32 bytes more.
    row_stride = aligned_row_elems(row_elems, t) + (layout == CallerLayout::padded_rows ? 32 / es : 0);
    const size_t layer_bytes = size_t(rows * row_stride * es);
    if (layout == CallerLayout::layer_table) {
      std::vector<void*> bases;
      for (int32_t l = 0; l < L; ++l) {
        per_layer.emplace_back(b, layer_bytes);
        per_layer.back().fill(kPoison);
        bases.push_back(per_layer.back().data());
      }
      table = detail::Buffer::copy_of(b, bases);
      view = state_view_table(table.as<void*>(), t, L, rows, row_stride);
    } else {
      whole = detail::Buffer(b, layer_bytes * size_t(L));
      whole.fill(kPoison);
      view = state_view(whole.data(), t, L, rows * row_stride, rows, row_stride);
    }
  }

  // Every byte, layer after layer, as the host sees it.
  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> out;
    auto append = [&](const detail::Buffer& buf) {
      const auto b = buf.download<uint8_t>();
      out.insert(out.end(), b.begin(), b.end());
    };
    if (per_layer.empty()) append(whole);
    for (const auto& buf : per_layer) append(buf);
    return out;
  }
  size_t row_offset(int32_t layer, int64_t row) const {
    return size_t((int64_t(layer) * rows + row) * row_stride) * dtype_size(dtype);
  }
  // The state bytes of one row (not the gap after it) from a bytes() snapshot.
  std::vector<uint8_t> row(const std::vector<uint8_t>& all, int32_t layer, int64_t r) const {
    const size_t at = row_offset(layer, r), n = size_t(row_elems) * dtype_size(dtype);
    return std::vector<uint8_t>(all.begin() + ptrdiff_t(at), all.begin() + ptrdiff_t(at + n));
  }
  void write_row(int32_t layer, int64_t r, const void* src) {
    const size_t n = size_t(row_elems) * dtype_size(dtype);
    char* base = per_layer.empty() ? whole.as<char>() + row_offset(layer, r)
                                   : per_layer[size_t(layer)].as<char>() + row_offset(0, r);
    detail::copy_to_backend(backend, base, src, n);
  }
};

// An engine's whole per-slot storage for the round of `config` (its model, pool, T and mode) and the
// layers' short convolution `conv` (width 0: none), in `layout`, plus the index and batch buffers the
// round needs.
struct CallerStorage {
  CallerLayout layout;
  VerifierConfig config;
  RoundSpec spec;
  int32_t pool_rows;  // P, or P + 1 with SGLang's padding slot
  CallerStates pool, scratch, ring_kg, ring_u;
  CallerStates conv_state, conv_scratch;  // rows 0 without a conv; conv_scratch: two-phase only
  detail::Buffer accept_len, round_parity, ring_cursor, index_storage, batch, accepted, materialize_list;
  SlotStorage storage;
  RoundIndices idx;

  CallerStorage(const VerifierConfig& c, CallerLayout l, ConvShape conv = {})
      : layout(l),
        config(c),
        spec(with_conv(round_spec(c), conv)),
        pool_rows(c.pool.slots + (l == CallerLayout::sglang ? 1 : 0)),
        pool(c.backend, l, c.pool.state_dtype, c.model.layers, pool_rows, row_elems(c)),
        scratch(c.backend, l, c.pool.state_dtype, c.model.layers, int64_t(pool_rows) * c.pool.scratch_steps,
                row_elems(c)),
        ring_kg(c.backend, l, c.io_dtype, c.model.layers, pool_rows, ring_kg_row_elems(spec)),
        ring_u(c.backend, l, DType::f32, c.model.layers, pool_rows, ring_u_row_elems(spec)),
        conv_state(c.backend, l, c.io_dtype, c.model.layers, conv.width > 0 ? pool_rows : 0,
                   conv_state_row_elems(spec, c.pool.scratch_steps)),
        conv_scratch(c.backend, l, c.io_dtype, c.model.layers,
                     conv.width > 0 && !mode_policy(c.mode).conv_offset_window ? int64_t(pool_rows) * c.pool.scratch_steps : 0,
                     conv_scratch_row_elems(spec)),
        accept_len(detail::Buffer::copy_of(c.backend, std::vector<int32_t>(size_t(pool_rows), 0))),
        round_parity(detail::Buffer::copy_of(c.backend, std::vector<int32_t>(size_t(pool_rows), 0))),
        ring_cursor(detail::Buffer::copy_of(c.backend, std::vector<int32_t>(2 * size_t(pool_rows), 0))),
        index_storage(c.backend, size_t(round_index_elems(c.max_rows, c.tokens)) * sizeof(int32_t)),
        batch(c.backend, (1 + size_t(c.max_rows)) * sizeof(int32_t)),
        accepted(c.backend, size_t(c.max_rows) * sizeof(int32_t)),
        materialize_list(c.backend, size_t(c.pool.slots) * sizeof(int32_t)) {
    index_storage.fill(0x7f);  // stale garbage: the build must overwrite what the round reads
    storage.slots = c.pool.slots;
    storage.scratch_steps = c.pool.scratch_steps;
    storage.pool = pool.view;
    storage.scratch = scratch.view;
    storage.accept_len = accept_len.as<int32_t>();
    if (mode_policy(c.mode).ring) {
      storage.ring_kg = ring_kg.view;
      storage.ring_u = ring_u.view;
      storage.ring_pending = ring_cursor.as<int32_t>();
      storage.ring_start = storage.ring_pending + pool_rows;
    }
    if (needs_round_parity(spec)) storage.round_parity = round_parity.as<int32_t>();
    if (conv.width > 0) {
      storage.conv_state = conv_state.view;
      if (conv_scratch.rows > 0) storage.conv_scratch = conv_scratch.view;
    }
    idx = round_indices(index_storage.as<int32_t>(), c.max_rows, c.tokens);
  }

  static RoundSpec with_conv(RoundSpec spec, const ConvShape& conv) {
    spec.conv = conv;
    return spec;
  }

  static int64_t row_elems(const VerifierConfig& c) {
    return int64_t(c.model.value_heads) * c.model.head_v * c.model.head_k;
  }

  BatchView batch_view(int32_t rows) const {
    return BatchView{batch.as<int32_t>() + 1, batch.as<int32_t>(), rows};
  }
  // The engine's own prefill: its state into pool[slot], accept_len[slot] = 0 and round_parity[slot] = 0
  // (a conv window, at columns [0, W - 1), is the caller's to write).
  void prefill(int32_t slot, const std::vector<uint8_t>& states) {
    const size_t layer_bytes = size_t(row_elems(config)) * dtype_size(config.pool.state_dtype);
    for (int32_t l = 0; l < config.model.layers; ++l) pool.write_row(l, slot, states.data() + size_t(l) * layer_bytes);
    const int32_t zero = 0;
    detail::copy_to_backend(config.backend, accept_len.as<int32_t>() + slot, &zero, sizeof zero);
    detail::copy_to_backend(config.backend, round_parity.as<int32_t>() + slot, &zero, sizeof zero);
  }
};

}  // namespace kdagraph::test

namespace kdagraph::test {

// L layers of random inputs in backend memory, shared by both paths of a comparison, and an output
// buffer per layer and path, poisoned before each round.
struct BackendInputs {
  VerifierConfig c;
  std::vector<detail::Buffer> q, k, v, g, beta, o[2];
  detail::Buffer gate;  // A_log [HV] then dt_bias [HV * K], one set for every layer

  explicit BackendInputs(const VerifierConfig& config) : c(config) {
    const size_t N = size_t(c.max_rows), T = size_t(c.tokens), H = size_t(c.model.heads);
    const size_t HV = size_t(c.model.value_heads), K = size_t(c.model.head_k), V = size_t(c.model.head_v);
    const size_t es = dtype_size(c.io_dtype);
    for (int32_t l = 0; l < c.model.layers; ++l) {
      q.emplace_back(c.backend, N * T * H * K * es);
      k.emplace_back(c.backend, N * T * H * K * es);
      v.emplace_back(c.backend, N * T * HV * V * es);
      g.emplace_back(c.backend, N * T * HV * K * es);
      beta.emplace_back(c.backend, N * T * HV * es);
      for (auto& out : o) out.emplace_back(c.backend, N * T * HV * V * es);
    }
    std::vector<float> params(HV + HV * K);
    for (size_t i = 0; i < params.size(); ++i) params[i] = 0.05f * float(i % 7) - 0.1f;
    gate = detail::Buffer::copy_of(c.backend, params);
  }

  // Fresh values for every input, and poisoned outputs (NaN in both dtypes).
  void randomize(std::mt19937_64& rng) {
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    auto fill = [&](detail::Buffer& b) {
      const size_t n = b.bytes() / dtype_size(c.io_dtype);
      std::vector<uint8_t> host(b.bytes());
      for (size_t i = 0; i < n; ++i) {
        const float x = d(rng);
        if (c.io_dtype == DType::f32) std::memcpy(host.data() + 4 * i, &x, 4);
        else {
          const math::bf16 h = math::f32_to_bf16(x);
          std::memcpy(host.data() + 2 * i, &h, 2);
        }
      }
      b.upload(host.data(), host.size());
    };
    for (int32_t l = 0; l < c.model.layers; ++l) {
      for (auto* b : {&q[size_t(l)], &k[size_t(l)], &v[size_t(l)], &g[size_t(l)], &beta[size_t(l)]}) fill(*b);
      for (auto& out : o) out[size_t(l)].fill(0xff);
    }
  }

  LayerInputs view(int32_t l, int path) const {
    LayerInputs in;
    in.q = q[size_t(l)].data();
    in.k = k[size_t(l)].data();
    in.v = v[size_t(l)].data();
    in.g = g[size_t(l)].data();
    in.beta = beta[size_t(l)].data();
    in.o = o[path][size_t(l)].data();
    in.A_log = gate.as<float>();
    in.dt_bias = gate.as<float>() + c.model.value_heads;
    return in;
  }
};

// Random states for every slot, [L, HV, V, K] each, in the state dtype.
inline std::vector<uint8_t> random_states(const VerifierConfig& c, std::mt19937_64& rng) {
  const size_t n = size_t(c.model.layers) * size_t(CallerStorage::row_elems(c));
  std::uniform_real_distribution<float> d(-0.5f, 0.5f);
  std::vector<uint8_t> out(n * dtype_size(c.pool.state_dtype));
  for (size_t i = 0; i < n; ++i) {
    const float x = d(rng);
    if (c.pool.state_dtype == DType::f32) std::memcpy(out.data() + 4 * i, &x, 4);
    else {
      const math::bf16 b = math::f32_to_bf16(x);
      std::memcpy(out.data() + 2 * i, &b, 2);
    }
  }
  return out;
}

// Runs `rounds` rounds of random batches (padded up to max_rows, random accept lengths) through a
// Verifier and through the operations on caller-owned storage in `layout`, on the backend `stream` is
// for. Expects, bitwise: every round's outputs, the accept lengths, every slot's pool row after the
// final materialize, and every caller byte that is no slot's state (row gaps, SGLang's padding slot)
// still poisoned.
// A round's batch: 1 to N distinct slots of P in random order, and an accept length in [1, T] for each
// (`accepted` has N entries, 0 past the batch).
struct RandomBatch {
  std::vector<int32_t> slots, accepted;
};
inline RandomBatch random_batch(std::mt19937_64& rng, int32_t P, int32_t N, int32_t T) {
  RandomBatch b;
  for (int32_t s = 0; s < P; ++s) b.slots.push_back(s);
  std::shuffle(b.slots.begin(), b.slots.end(), rng);
  const int32_t n = std::uniform_int_distribution<int32_t>(1, N)(rng);
  b.slots.resize(size_t(n));
  b.accepted.assign(size_t(N), 0);
  for (int32_t i = 0; i < n; ++i) b.accepted[size_t(i)] = std::uniform_int_distribution<int32_t>(1, T)(rng);
  return b;
}

inline void expect_ops_match_verifier(const VerifierConfig& c, CallerLayout layout, const Stream& stream,
                                      uint64_t seed, int rounds) {
  SCOPED_TRACE(std::string("layout ") + to_string(layout) + ", mode " + to_string(c.mode) + ", seed " +
               std::to_string(seed));
  std::mt19937_64 rng(seed);
  Verifier verifier(c);
  CallerStorage caller(c, layout);
  BackendInputs in(c);
  const int32_t P = c.pool.slots, L = c.model.layers, N = c.max_rows;
  const std::vector<uint8_t> pool_before = caller.pool.bytes(), scratch_before = caller.scratch.bytes();
  for (int32_t slot = 0; slot < P; ++slot) {
    const std::vector<uint8_t> states = random_states(c, rng);
    verifier.prefill(stream, slot, states.data());
    caller.prefill(slot, states);
  }
  const size_t out_bytes = in.o[0][0].bytes();
  for (int r = 0; r < rounds; ++r) {
    SCOPED_TRACE("round " + std::to_string(r));
    const auto [slots, accepted] = random_batch(rng, P, N, c.tokens);
    const int32_t n = int32_t(slots.size());
    in.randomize(rng);

    verifier.set_batch(stream, slots.data(), n);
    for (int32_t l = 0; l < L; ++l) {
      if (l == 0) verifier.enqueue_indices(stream, N);
      verifier.enqueue_verify(stream, l, in.view(l, 0), N);
    }
    caller.accepted.upload(accepted.data(), accepted.size() * sizeof(int32_t));
    verifier.enqueue_accept(stream, caller.accepted.as<int32_t>(), N);
    if (mode_policy(c.mode).commit) verifier.enqueue_commit(stream, N);

    std::vector<int32_t> packed(size_t(N) + 1, -1);  // n_real, then the slots, padded with -1
    packed[0] = n;
    std::copy(slots.begin(), slots.end(), packed.begin() + 1);
    caller.batch.upload(packed.data(), packed.size() * sizeof(int32_t));
    ops::build_indices(stream, caller.spec, caller.storage, caller.batch_view(N), caller.idx);
    for (int32_t l = 0; l < L; ++l)
      ops::verify_layer(stream, caller.spec, caller.storage, caller.idx, N, l, in.view(l, 1));
    ops::accept(stream, caller.spec, caller.storage, caller.idx, N, caller.accepted.as<int32_t>());
    if (mode_policy(c.mode).commit) ops::commit(stream, caller.spec, caller.storage, caller.idx, N);

    for (int32_t l = 0; l < L; ++l) {
      const auto a = in.o[0][size_t(l)].download<uint8_t>(), b = in.o[1][size_t(l)].download<uint8_t>();
      ASSERT_EQ(a.size(), out_bytes);
      ASSERT_EQ(a, b) << "outputs of layer " << l;
      ASSERT_NE(a, std::vector<uint8_t>(out_bytes, 0xff)) << "layer " << l << " wrote no output";
    }
    std::vector<int32_t> verifier_accept(static_cast<size_t>(P)), caller_accept(static_cast<size_t>(P));
    detail::copy_to_host(c.backend, verifier_accept.data(), verifier.accept_len(), size_t(P) * 4);
    detail::copy_to_host(c.backend, caller_accept.data(), caller.accept_len.data(), size_t(P) * 4);
    ASSERT_EQ(verifier_accept, caller_accept);
  }

  std::vector<int32_t> all;
  for (int32_t s = 0; s < P; ++s) all.push_back(s);
  verifier.enqueue_materialize(stream, all.data(), P);
  caller.materialize_list.upload(all.data(), all.size() * sizeof(int32_t));
  const std::vector<GateParams> gates(size_t(L), GateParams{in.gate.as<float>(), in.gate.as<float>() + c.model.value_heads});
  ops::materialize(stream, caller.spec, caller.storage, caller.materialize_list.as<int32_t>(), P, gates.data());
  std::vector<uint8_t> verifier_states(verifier.slot_state_bytes() * size_t(L));
  const std::vector<uint8_t> pool_after = caller.pool.bytes(), scratch_after = caller.scratch.bytes();
  for (int32_t slot = 0; slot < P; ++slot) {
    verifier.read_pool(stream, slot, verifier_states.data());
    for (int32_t l = 0; l < L; ++l) {
      const std::vector<uint8_t> want(verifier_states.begin() + ptrdiff_t(size_t(l) * verifier.slot_state_bytes()),
                                      verifier_states.begin() + ptrdiff_t(size_t(l + 1) * verifier.slot_state_bytes()));
      ASSERT_EQ(caller.pool.row(pool_after, l, slot), want) << "materialized pool, slot " << slot << " layer " << l;
    }
  }
  // Bytes outside every slot's state rows were never touched: the gaps of padded rows, the padding slot.
  const size_t state_bytes = size_t(caller.pool.row_elems) * dtype_size(c.pool.state_dtype);
  auto untouched_outside_rows = [&](const CallerStates& s, const std::vector<uint8_t>& before,
                                    const std::vector<uint8_t>& after, int64_t addressed_rows) {
    for (int32_t l = 0; l < L; ++l)
      for (int64_t row = 0; row < s.rows; ++row) {
        const size_t begin = s.row_offset(l, row) + (row < addressed_rows ? state_bytes : 0);
        const size_t end = s.row_offset(l, row + 1);
        for (size_t i = begin; i < end; ++i)
          ASSERT_EQ(after[i], before[i]) << "byte " << i - s.row_offset(l, row) << " of row " << row << ", layer " << l;
      }
  };
  untouched_outside_rows(caller.pool, pool_before, pool_after, P);
  untouched_outside_rows(caller.scratch, scratch_before, scratch_after,
                         mode_policy(c.mode).per_token_scratch ? int64_t(P) * c.pool.scratch_steps : 0);
}

}  // namespace kdagraph::test
