// Whole-storage snapshots of a Verifier (pool, scratch, accept_len), for "nothing else changed" checks.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kdagraph/verifier.hpp"
#include "kernels/layout.h"
#include "kernels/memory.h"

namespace kdagraph::test {

struct StorageSnapshot {
  std::vector<uint8_t> pool, scratch, ring_kg, ring_u;  // ring: replay's records
  std::vector<int32_t> accept_len, round_parity, ring_pending, ring_start;
  bool operator==(const StorageSnapshot& o) const {
    return pool == o.pool && scratch == o.scratch && ring_kg == o.ring_kg && ring_u == o.ring_u &&
           accept_len == o.accept_len && round_parity == o.round_parity && ring_pending == o.ring_pending &&
           ring_start == o.ring_start;
  }
};

// Bytes of a one-allocation view's layers.
inline size_t view_bytes(const StateView& v) {
  return v.base == nullptr ? 0 : size_t(v.layers) * size_t(v.layer_stride) * dtype_size(v.dtype);
}

// After all of the device's work (a round on any stream) has run.
inline StorageSnapshot snapshot(const Verifier& v) {
  StorageSnapshot s;
  const Backend b = v.config().backend;
  detail::wait_for_device(b);
  s.pool.resize(v.pool_bytes());
  s.scratch.resize(v.scratch_bytes());
  s.accept_len.resize(size_t(v.config().pool.slots));
  detail::copy_to_host(b, s.pool.data(), v.pool(), s.pool.size());
  detail::copy_to_host(b, s.scratch.data(), v.scratch(), s.scratch.size());
  detail::copy_to_host(b, s.accept_len.data(), v.accept_len(), s.accept_len.size() * sizeof(int32_t));
  const SlotStorage& st = v.storage();
  s.ring_kg.resize(view_bytes(st.ring_kg));
  s.ring_u.resize(view_bytes(st.ring_u));
  detail::copy_to_host(b, s.ring_kg.data(), st.ring_kg.base, s.ring_kg.size());
  detail::copy_to_host(b, s.ring_u.data(), st.ring_u.base, s.ring_u.size());
  if (st.ring_pending != nullptr) {
    s.ring_pending.resize(s.accept_len.size());
    s.ring_start.resize(s.accept_len.size());
    detail::copy_to_host(b, s.ring_pending.data(), st.ring_pending, s.ring_pending.size() * sizeof(int32_t));
    detail::copy_to_host(b, s.ring_start.data(), st.ring_start, s.ring_start.size() * sizeof(int32_t));
  }
  if (v.storage().round_parity != nullptr) {
    s.round_parity.resize(s.accept_len.size());
    detail::copy_to_host(b, s.round_parity.data(), v.storage().round_parity, s.round_parity.size() * sizeof(int32_t));
  }
  return s;
}

inline StateGeometry geometry(const VerifierConfig& c) { return make_geometry(c.model, c.pool); }

// Expects every byte that belongs to slot `slot` (its pool states, scratch rows or ring records and
// cursor, accept_len and round parity) to be the same in both snapshots.
inline void expect_slot_unchanged(const VerifierConfig& c, const StorageSnapshot& a, const StorageSnapshot& b,
                                  int32_t slot) {
  const StateGeometry g = geometry(c);
  const size_t es = dtype_size(c.pool.state_dtype), bytes = size_t(g.slot_elems()) * es;
  for (int32_t l = 0; l < g.layers; ++l) {
    const size_t p = size_t(g.pool_offset(l, slot, 0)) * es;
    EXPECT_EQ(0, std::memcmp(a.pool.data() + p, b.pool.data() + p, bytes)) << "pool slot " << slot << " layer " << l;
    for (int32_t t = 0; t < g.scratch_steps && !a.scratch.empty(); ++t) {
      const size_t r = size_t(g.scratch_offset(l, scratch_row(slot, t, g.scratch_steps), 0)) * es;
      EXPECT_EQ(0, std::memcmp(a.scratch.data() + r, b.scratch.data() + r, bytes))
          << "scratch slot " << slot << " step " << t << " layer " << l;
    }
  }
  for (const auto* ring : {&a.ring_kg, &a.ring_u}) {  // [L, P] rows: the slot's
    if (ring->empty()) continue;
    const std::vector<uint8_t>& other = ring == &a.ring_kg ? b.ring_kg : b.ring_u;
    const size_t row = ring->size() / size_t(g.layers) / size_t(g.slots);
    for (int32_t l = 0; l < g.layers; ++l) {
      const size_t at = (size_t(l) * size_t(g.slots) + size_t(slot)) * row;
      EXPECT_EQ(0, std::memcmp(ring->data() + at, other.data() + at, row))
          << (ring == &a.ring_kg ? "ring k and g" : "ring u") << " slot " << slot << " layer " << l;
    }
  }
  if (!a.ring_pending.empty()) {
    EXPECT_EQ(a.ring_pending[size_t(slot)], b.ring_pending[size_t(slot)]) << "ring_pending slot " << slot;
    EXPECT_EQ(a.ring_start[size_t(slot)], b.ring_start[size_t(slot)]) << "ring_start slot " << slot;
  }
  if (!a.round_parity.empty()) {
    EXPECT_EQ(a.round_parity[size_t(slot)], b.round_parity[size_t(slot)]) << "round parity slot " << slot;
  }
  EXPECT_EQ(a.accept_len[size_t(slot)], b.accept_len[size_t(slot)]) << "accept_len slot " << slot;
}

// Fills every slot's pool and scratch with random states (fp32 storage) so nothing is tested on zeros.
inline void randomize_storage(Verifier& v, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-0.5f, 0.5f);
  const Backend b = v.config().backend;
  auto fill = [&](void* dst, size_t bytes) {
    std::vector<uint8_t> host(bytes);
    if (v.config().pool.state_dtype == DType::f32) {
      for (size_t i = 0; i < bytes / 4; ++i) {
        const float x = d(rng);
        std::memcpy(host.data() + 4 * i, &x, 4);
      }
    } else {
      for (size_t i = 0; i < bytes / 2; ++i) math::store_from_f32(host.data(), v.config().pool.state_dtype, int64_t(i), d(rng));
    }
    detail::copy_to_backend(b, dst, host.data(), bytes);
  };
  fill(v.pool(), v.pool_bytes());
  if (v.scratch_bytes() > 0) fill(v.scratch(), v.scratch_bytes());
}

}  // namespace kdagraph::test
