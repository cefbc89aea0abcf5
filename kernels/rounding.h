// docs/low_precision.md: how a state store rounds an fp32 value to the state dtype. Round to nearest even, or
// stochastically: the value's bits plus a uniformly random integer below one step of the target dtype,
// then truncated, with the random bits from Philox 4x32-10 (Random123) keyed by the slot's seed. The
// same bits on the CPU, the SIMT executor and the GPU: the draws are counter-based and the rounding is
// integer arithmetic on the fp32 bits.
#pragma once

#include <Random123/philox.h>

#include <cstdint>

#include "kernels/kda_math.h"

namespace kdagraph::math {

// ---- stochastic rounding of one value, given 32 random bits ------------------------------------------

// bf16: the low 16 bits of the fp32 value plus 16 random bits, carried into the kept half. NaN and the
// infinities as round to nearest leaves them; a value within a step of the largest bf16 may reach
// infinity, with the probability of its distance there.
KDA_HD bf16 f32_to_bf16_stochastic(float f, uint32_t random) {
  const uint32_t u = float_to_bits(f);
  if ((u & 0x7f800000u) == 0x7f800000u) return f32_to_bf16(f);
  return bf16{uint16_t((u + (random & 0xffffu)) >> 16)};
}

// f16: a normal half drops 13 bits of the fp32 significand, a subnormal one 14 to 24 or more (its step
// is 2^-24 whatever the exponent): the dropped bits plus as many random ones, carried into the kept ones.
KDA_HD f16 f32_to_f16_stochastic(float f, uint32_t random) {
  const uint32_t u = float_to_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return f32_to_f16(f);                          // NaN and infinity
  if (a >= 0x38800000u) {                                              // a normal half: 2^-14 and up
    const uint32_t r = a + (random & 0x1fffu);
    if (r >= 0x47800000u) return f16{uint16_t(sign | 0x7c00u)};        // carried past 65504
    return f16{uint16_t(sign | ((r - 0x38000000u) >> 13))};
  }
  // A subnormal half, m 2^-24: the significand m_f 2^(e - 150) in steps of 2^-24 drops 126 - e bits.
  const uint32_t e = a >> 23;
  const uint32_t shift = 126u - (e == 0 ? 1u : e);  // an fp32 subnormal has the exponent of 2^-126
  if (shift >= 32u) return f16{uint16_t(sign)};    // below 2^-56: no draw of 32 bits reaches a step
  const uint64_t m = e == 0 ? (a & 0x7fffffu) : ((a & 0x7fffffu) | 0x800000u);
  const uint64_t h = (m + (uint64_t(random) & ((uint64_t(1) << shift) - 1u))) >> shift;
  return f16{uint16_t(sign | uint32_t(h))};  // h may reach 0x400, the smallest normal: its encoding
}

// ---- the draws of one store --------------------------------------------------------------------------

// Which store of a slot's state a draw belongs to (Philox's counter word 2): a new token's post-state
// is its token index; a verify's flush of the checkpoint and materialize's have their own.
inline constexpr uint32_t kStoreFlush = 0xffffffffu;
inline constexpr uint32_t kStoreMaterialize = 0xfffffffeu;

// One store of one head's state rows: element e of the head (row-major [V, K], e = row K + channel)
// draws word e % 4 of Philox4x32-10 at counter {e / 4, layer << 16 | head, store, slot counter}, key
// the slot's seed. `stochastic` false: round to nearest, no draw.
struct StoreDraws {
  bool stochastic = false;
  uint32_t key0 = 0, key1 = 0;
  uint32_t layer_head = 0, store = 0, counter = 0;

  // The four draws of elements [4 g, 4 g + 4).
  KDA_HD void draw4(uint32_t group, uint32_t (&out)[4]) const {
    r123::Philox4x32_R<10> philox;
    const r123::Philox4x32::ctr_type ctr = {{group, layer_head, store, counter}};
    const r123::Philox4x32::key_type key = {{key0, key1}};
    const r123::Philox4x32::ctr_type r = philox(ctr, key);
    out[0] = r.v[0];
    out[1] = r.v[1];
    out[2] = r.v[2];
    out[3] = r.v[3];
  }
};

KDA_HD StoreDraws store_draws(bool stochastic, uint64_t seed, uint32_t counter, int32_t layer, int32_t head,
                              uint32_t store) {
  StoreDraws d;
  d.stochastic = stochastic;
  d.key0 = uint32_t(seed);
  d.key1 = uint32_t(seed >> 32);
  d.layer_head = uint32_t(layer) << 16 | (uint32_t(head) & 0xffffu);
  d.store = store;
  d.counter = counter;
  return d;
}

// x in StateT, to nearest, or stochastically with the draw `random`.
template <class StateT>
KDA_HD StateT round_state(float x, bool stochastic, uint32_t random);
template <>
KDA_HD float round_state<float>(float x, bool, uint32_t) {
  return x;
}
template <>
KDA_HD bf16 round_state<bf16>(float x, bool stochastic, uint32_t random) {
  return stochastic ? f32_to_bf16_stochastic(x, random) : f32_to_bf16(x);
}
template <>
KDA_HD f16 round_state<f16>(float x, bool stochastic, uint32_t random) {
  return stochastic ? f32_to_f16_stochastic(x, random) : f32_to_f16(x);
}

}  // namespace kdagraph::math
