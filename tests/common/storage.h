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
  std::vector<uint8_t> pool, scratch, token_cache;
  std::vector<int32_t> accept_len, round_parity;
  bool operator==(const StorageSnapshot& o) const {
    return pool == o.pool && scratch == o.scratch && token_cache == o.token_cache && accept_len == o.accept_len &&
           round_parity == o.round_parity;
  }
};

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
  s.token_cache.resize(v.token_cache_bytes());
  detail::copy_to_host(b, s.token_cache.data(), v.storage().token_cache.base, s.token_cache.size());
  if (v.storage().round_parity != nullptr) {
    s.round_parity.resize(s.accept_len.size());
    detail::copy_to_host(b, s.round_parity.data(), v.storage().round_parity, s.round_parity.size() * sizeof(int32_t));
  }
  return s;
}

inline StateGeometry geometry(const VerifierConfig& c) { return make_geometry(c.model, c.pool); }

// Expects every byte that belongs to slot `slot` (its pool states, scratch rows or token cache rows, and
// accept_len) to be the same in both snapshots.
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
  if (!a.token_cache.empty()) {  // [L, 2P] rows: the slot's two
    const size_t row = a.token_cache.size() / size_t(g.layers) / (2 * size_t(g.slots));
    for (int32_t l = 0; l < g.layers; ++l) {
      const size_t at = (size_t(l) * 2 * size_t(g.slots) + 2 * size_t(slot)) * row;
      EXPECT_EQ(0, std::memcmp(a.token_cache.data() + at, b.token_cache.data() + at, 2 * row))
          << "token cache slot " << slot << " layer " << l;
    }
    EXPECT_EQ(a.round_parity[size_t(slot)], b.round_parity[size_t(slot)]) << "cache parity slot " << slot;
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
      for (size_t i = 0; i < bytes / 2; ++i) {
        const math::bf16 x = math::f32_to_bf16(d(rng));
        std::memcpy(host.data() + 2 * i, &x, 2);
      }
    }
    detail::copy_to_backend(b, dst, host.data(), bytes);
  };
  fill(v.pool(), v.pool_bytes());
  if (v.scratch_bytes() > 0) fill(v.scratch(), v.scratch_bytes());
}

}  // namespace kdagraph::test
