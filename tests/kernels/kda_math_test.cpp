// SPEC §1 preprocessing against the direct formulas, and the bf16 and f16 roundings.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "kernels/kda_math.h"
#include "tests/common/reference.h"
#include "tests/common/verify_case.h"

namespace kdagraph::test {
namespace {

TEST(KdaMath, SoftplusGateMatchesFormulaAcrossThreshold) {
  VerifyOptions o;
  o.gate = GateMode::softplus;
  std::mt19937_64 rng(fresh_seed());
  std::uniform_real_distribution<float> a_log(-2.0f, 1.0f), x(-30.0f, 30.0f);
  for (int i = 0; i < 2000; ++i) {
    const float al = a_log(rng), xi = x(rng), dt = 0.25f;
    const double want = -std::exp(double(al)) * ref_softplus(double(xi) + dt);
    EXPECT_NEAR(math::log_decay(o, xi, al, dt), want, 2e-6 * std::max(1.0, std::abs(want))) << xi;
  }
  // Above the threshold softplus is the identity, exactly.
  EXPECT_EQ(math::softplus(20.5f), 20.5f);
  EXPECT_EQ(math::softplus(20.0f), logf(1.0f + expf(20.0f)));
  EXPECT_NEAR(math::softplus(19.9f), std::log1p(std::exp(19.9)), 1e-5);
}

TEST(KdaMath, LowerBoundGateMatchesFormula) {
  VerifyOptions o;
  o.gate = GateMode::lower_bound;
  o.gate_lower_bound = -4.0f;
  std::mt19937_64 rng(fresh_seed());
  std::uniform_real_distribution<float> a_log(-2.0f, 1.0f), x(-10.0f, 10.0f);
  for (int i = 0; i < 2000; ++i) {
    const float al = a_log(rng), xi = x(rng), dt = -0.5f;
    const double want = -4.0 * ref_sigmoid(std::exp(double(al)) * (double(xi) + dt));
    const float got = math::log_decay(o, xi, al, dt);
    EXPECT_NEAR(got, want, 2e-6);
    EXPECT_LE(got, 0.0f);
    EXPECT_GE(got, -4.0f);
  }
}

TEST(KdaMath, PrecomputedGatePassesThrough) {
  VerifyOptions o;
  EXPECT_EQ(math::log_decay(o, -0.375f, 3.0f, 7.0f), -0.375f);
}

TEST(KdaMath, L2NormAndBetaLogit) {
  std::mt19937_64 rng(fresh_seed());
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  for (int i = 0; i < 1000; ++i) {
    const float x = d(rng), sum_sq = x * x * 64.0f, scale = 0.125f;
    EXPECT_NEAR(math::qk_multiplier(true, sum_sq, scale), scale / std::sqrt(double(sum_sq) + 1e-6),
                1e-6 * scale / std::sqrt(double(sum_sq) + 1e-6));
    EXPECT_EQ(math::qk_multiplier(false, sum_sq, scale), scale);
    VerifyOptions o;
    o.beta_is_logit = true;
    const float b = d(rng) * 4.0f;
    EXPECT_NEAR(math::beta_value(o, b), ref_sigmoid(b), 1e-7);
    o.beta_is_logit = false;
    EXPECT_EQ(math::beta_value(o, b), b);
  }
  VerifyOptions o;
  EXPECT_FLOAT_EQ(math::query_scale(o, 128), 1.0f / std::sqrt(128.0f));
  o.scale = 0.5f;
  EXPECT_EQ(math::query_scale(o, 128), 0.5f);
  o.use_scale = false;
  EXPECT_EQ(math::query_scale(o, 128), 1.0f);
}

TEST(KdaMath, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1).
  EXPECT_EQ(math::to_f32(math::f32_to_bf16(1.0f + 0x1p-8f)), 1.0f);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: even is 1 + 2^-6.
  EXPECT_EQ(math::to_f32(math::f32_to_bf16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
  EXPECT_EQ(math::to_f32(math::f32_to_bf16(1.0f + 0x1p-8f + 0x1p-12f)), 1.0f + 0x1p-7f);
  EXPECT_EQ(math::to_f32(math::f32_to_bf16(-2.5f)), -2.5f);
  EXPECT_TRUE(std::isnan(math::to_f32(math::f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(math::to_f32(math::f32_to_bf16(std::numeric_limits<float>::infinity()))));
}

// A half's value from its fields, in double: (-1)^s 2^(e - 15) (1 + m / 1024), subnormals 2^-14 m / 1024.
double half_value(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double magnitude = e == 0 ? std::ldexp(m / 1024.0, -14) : std::ldexp(1.0 + m / 1024.0, e - 15);
  return s != 0 ? -magnitude : magnitude;
}

// x rounded to a half by another road: to a multiple of the half's step at x's binade (2^-24 below
// 2^-14), ties to even by nearbyint in double; 65520 and up are infinite.
double half_rounded(float x) {
  const double a = std::fabs(double(x));
  if (a >= 65520.0) return std::copysign(std::numeric_limits<double>::infinity(), double(x));
  const int binade = a < 0x1p-14 ? -14 : std::ilogb(a);
  const double step = std::ldexp(1.0, binade - 10);
  return std::copysign(std::nearbyint(a / step) * step, double(x));
}

TEST(KdaMath, F16RoundsToNearestEvenWithSubnormals) {
  // Every half back and forth: its value, and the same bits again (NaNs become the canonical 0x7fff).
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = math::to_f32(math::f16{uint16_t(h)});
    const bool nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
    if (nan) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      ASSERT_EQ(math::f32_to_f16(f).bits, 0x7fffu) << std::hex << h;
      continue;
    }
    ASSERT_EQ(double(f), (h & 0x7c00u) == 0x7c00u ? std::copysign(std::numeric_limits<double>::infinity(), half_value(uint16_t(h)))
                                                  : half_value(uint16_t(h))) << std::hex << h;
    ASSERT_EQ(math::f32_to_f16(f).bits, h) << std::hex << h;
  }
  // Fresh random floats over the half's whole range and past it, ties included.
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> binade(-27, 17);
  std::uniform_int_distribution<uint32_t> bits(0, 0x7fffffu);
  for (int i = 0; i < 200000; ++i) {
    uint32_t mantissa = bits(rng);
    if (i % 4 == 0) mantissa = (mantissa & ~0x1fffu) | 0x1000u;  // exactly halfway at a normal half's step
    const float x = std::ldexp(1.0f + float(mantissa) * 0x1p-23f, binade(rng)) * (i % 2 != 0 ? -1.0f : 1.0f);
    ASSERT_EQ(double(math::to_f32(math::f32_to_f16(x))), half_rounded(x)) << x;
  }
  EXPECT_EQ(math::f32_to_f16(-0.0f).bits, 0x8000u);
}

}  // namespace
}  // namespace kdagraph::test
