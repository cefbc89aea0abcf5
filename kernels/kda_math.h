// docs/math.md: the arithmetic of one KDA token update, written once for the CPU implementation and the CUDA
// kernel. Everything here is __host__ __device__ and compiles with g++ as well as nvcc.
//
// [TAG_UPDATE_ORDER] The order of operations below is the contract of docs/modes.md: every mode of one backend
// runs this same sequence, so outputs and states agree bitwise. The device spells its fused
// multiply-adds out (and is built with --fmad=false); the host is built with -ffp-contract=off and uses
// a multiply then an add, except in the CPU verify's vectors, which use the instruction set's FMA
// (kernels/cpu_simd.h). Change both backends together.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kdagraph/types.hpp"

#if defined(__CUDACC__)
#define KDA_HD __host__ __device__ __forceinline__
#else
#define KDA_HD inline
#endif

namespace kdagraph::math {

// ---- bf16 storage: the bits of the top half of an fp32, round to nearest even ----------------------

struct bf16 {
  uint16_t bits;
};

KDA_HD float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

KDA_HD uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

KDA_HD float to_f32(float x) { return x; }
KDA_HD float to_f32(bf16 x) { return bits_to_float(uint32_t(x.bits) << 16); }

KDA_HD bf16 f32_to_bf16(float f) {
  uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t(0x7fffu)};  // NaN: canonical, as cvt makes it
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{uint16_t(u >> 16)};
}

// ---- fp16 (IEEE binary16) io: round to nearest even, subnormals kept ---------------------------------
// On the device the conversions are the hardware's (cvt); the host computes the same bits (a NaN becomes
// the canonical 0x7fff, as cvt.rn.f16.f32 makes it).

struct f16 {
  uint16_t bits;
};

KDA_HD float to_f32(f16 x) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
  return f;
#else
  const uint32_t sign = uint32_t(x.bits & 0x8000u) << 16, e = (x.bits >> 10) & 0x1fu, m = x.bits & 0x3ffu;
  if (e == 0x1fu) return bits_to_float(sign | 0x7f800000u | (m << 13) | (m != 0 ? 0x00400000u : 0u));
  if (e != 0) return bits_to_float(sign | ((e + 112u) << 23) | (m << 13));
  const float magnitude = float(m) * 5.9604644775390625e-8f;  // m 2^-24, exact
  return sign != 0 ? -magnitude : magnitude;
#endif
}

KDA_HD f16 f32_to_f16(float f) {
#if defined(__CUDA_ARCH__)
  uint16_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return f16{h};
#else
  const uint32_t u = float_to_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return f16{uint16_t(0x7fffu)};                  // NaN
  if (a >= 0x477ff000u) return f16{uint16_t(sign | 0x7c00u)};          // 65520 and up round to infinity
  if (a >= 0x38800000u) {                                              // a normal half: 2^-14 and up
    const uint32_t r = a + 0x0fffu + ((a >> 13) & 1u) - 0x38000000u;  // round, then rebias 127 -> 15
    return f16{uint16_t(sign | (r >> 13))};
  }
  if (a < 0x33000000u) return f16{uint16_t(sign)};                    // below 2^-25: zero
  // A subnormal half, m 2^-24: the fp32 significand shifted down by 126 - exponent (14 to 24), to even.
  const uint32_t m = (a & 0x7fffffu) | 0x800000u, shift = 126u - (a >> 23);
  uint32_t h = m >> shift;
  const uint32_t rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (h & 1u) != 0)) ++h;
  return f16{uint16_t(sign | h)};
#endif
}

template <class T>
KDA_HD T from_f32(float x);
template <>
KDA_HD float from_f32<float>(float x) {
  return x;
}
template <>
KDA_HD bf16 from_f32<bf16>(float x) {
  return f32_to_bf16(x);
}

template <>
KDA_HD f16 from_f32<f16>(float x) {
  return f32_to_f16(x);
}

// Two values rounded to nearest even and packed, `lo` in the low half: on the device one cvt.rn.*x2.f32
// (the state stores' conversion, docs/low_precision.md), on the host the same bits.
template <class T>
KDA_HD uint32_t pack2_rn(float lo, float hi);
template <>
KDA_HD uint32_t pack2_rn<bf16>(float lo, float hi) {
#if defined(__CUDA_ARCH__)
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
#else
  return uint32_t(f32_to_bf16(lo).bits) | uint32_t(f32_to_bf16(hi).bits) << 16;
#endif
}
template <>
KDA_HD uint32_t pack2_rn<f16>(float lo, float hi) {
#if defined(__CUDA_ARCH__)
  uint32_t d;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
#else
  return uint32_t(f32_to_f16(lo).bits) | uint32_t(f32_to_f16(hi).bits) << 16;
#endif
}

// Element i of a buffer holding dtype t, as fp32.
KDA_HD float load_as_f32(const void* base, DType t, int64_t i) {
  if (t == DType::f32) return static_cast<const float*>(base)[i];
  if (t == DType::f16) return to_f32(static_cast<const f16*>(base)[i]);
  return to_f32(static_cast<const bf16*>(base)[i]);
}

// x rounded into element i of a buffer holding dtype t.
KDA_HD void store_from_f32(void* base, DType t, int64_t i, float x) {
  if (t == DType::f32) static_cast<float*>(base)[i] = x;
  else if (t == DType::f16) static_cast<f16*>(base)[i] = f32_to_f16(x);
  else static_cast<bf16*>(base)[i] = f32_to_bf16(x);
}

// ---- the multiply-add of the update, fused on the device, unfused on the host ----------------------

KDA_HD float fmadd(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return a * b + c;
#endif
}

// ---- input preprocessing -----------------------------------------------------------------------------

inline constexpr float kL2NormEps = 1e-6f;
inline constexpr float kSoftplusThreshold = 20.0f;

KDA_HD float softplus(float z) { return z > kSoftplusThreshold ? z : logf(1.0f + expf(z)); }

KDA_HD float sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }

// Multiplier that L2-normalizes a vector whose squares sum to `sum_sq`.
KDA_HD float l2_inv_norm(float sum_sq) { return 1.0f / sqrtf(sum_sq + kL2NormEps); }

// One multiplier for q (or k): the L2 normalization, when switched on, times the scale.
KDA_HD float qk_multiplier(bool l2norm, float sum_sq, float scale) {
  return (l2norm ? l2_inv_norm(sum_sq) : 1.0f) * scale;
}

KDA_HD float query_scale(const VerifyOptions& opt, int head_k) {
  if (!opt.use_scale) return 1.0f;
  return opt.scale != 0.0f ? opt.scale : 1.0f / sqrtf(float(head_k));
}

// The per-head factor of the gate in the kernel, computed once per head: -exp(A_log[h]) (softplus) or
// exp(A_log[h]) (lower bound); 0 for a precomputed g.
KDA_HD float gate_scale(const VerifyOptions& opt, float a_log) {
  switch (opt.gate) {
    case GateMode::softplus: return -expf(a_log);
    case GateMode::lower_bound: return expf(a_log);
    case GateMode::precomputed:
    default: return 0.0f;
  }
}

// Log decay of key channel i of value head h given its head's gate_scale. `x` is g itself for
// GateMode::precomputed, the raw gate input otherwise; dt_bias = dt_bias[h * K + i].
KDA_HD float log_decay_scaled(const VerifyOptions& opt, float x, float scale, float dt_bias) {
  switch (opt.gate) {
    case GateMode::softplus:
      return scale * softplus(x + dt_bias);
    case GateMode::lower_bound:
      return opt.gate_lower_bound * sigmoid(scale * (x + dt_bias));
    case GateMode::precomputed:
    default:
      return x;
  }
}

// The same from A_log[h] itself: log_decay_scaled's values bit for bit.
KDA_HD float log_decay(const VerifyOptions& opt, float x, float a_log, float dt_bias) {
  return log_decay_scaled(opt, x, gate_scale(opt, a_log), dt_bias);
}

KDA_HD float beta_value(const VerifyOptions& opt, float raw) {
  if (!opt.beta_is_logit) return raw;
  return opt.beta_neg_eigval ? 2.0f * sigmoid(raw) : sigmoid(raw);
}

// ---- the update of one state element S[j][i] ---------------------------------------------------------
//   a = exp(g[i]);  S' = a * S;  p[j] += S' * k[i];  oq[j] += S' * q[i];  u[j] = beta * (v[j] - p[j]);
//   S = S' + k[i] * u[j];  o[j] = oq[j] + u[j] * (k . q)
// The output is docs/math.md's o = S q, summed from the decayed state in the same pass as p (issue 31: one
// reduction a token), since S q = S' q + u (k . q).

KDA_HD float decay_factor(float log_decay_i) { return expf(log_decay_i); }
KDA_HD float decayed(float s, float a) { return a * s; }
KDA_HD float accumulate(float acc, float x, float y) { return fmadd(x, y, acc); }
KDA_HD float delta(float beta, float v, float p) { return beta * (v - p); }
KDA_HD float rank1_update(float s_decayed, float k, float u) { return fmadd(k, u, s_decayed); }

}  // namespace kdagraph::math
