// docs/math.md preprocessing against the direct formulas; the bf16 and f16 roundings, to nearest and
// stochastic (docs/low_precision.md), and the generator's published test vectors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "kernels/kda_math.h"
#include "kernels/rounding.h"
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

// Random123's known-answer vectors for Philox4x32-10 (its kat_vectors file; cuRAND's Philox4_32_10
// gives the same), through the draws a store makes: counter {group, layer_head, store, counter}.
TEST(Rounding, PhiloxGivesItsPublishedTestVectors) {
  struct Vector {
    uint32_t ctr[4], key[2], out[4];
  };
  const Vector vectors[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}, {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}, {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Vector& v : vectors) {
    math::StoreDraws d;
    d.stochastic = true;
    d.key0 = v.key[0];
    d.key1 = v.key[1];
    d.layer_head = v.ctr[1];
    d.store = v.ctr[2];
    d.counter = v.ctr[3];
    uint32_t out[4];
    d.draw4(v.ctr[0], out);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], v.out[i]) << std::hex << "word " << i << " of ctr " << v.ctr[0];
  }
  // store_draws puts its fields where the counter says.
  const math::StoreDraws d = math::store_draws(true, 0x0123456789abcdefull, 7, 3, 5, 2);
  EXPECT_EQ(d.key0, 0x89abcdefu);
  EXPECT_EQ(d.key1, 0x01234567u);
  EXPECT_EQ(d.layer_head, (3u << 16) | 5u);
  EXPECT_EQ(d.store, 2u);
  EXPECT_EQ(d.counter, 7u);
}

// The two 16-bit values around x (x itself when it is one) as doubles, by the nearest rounding and the
// next value away from zero.
template <class T>
std::pair<double, double> neighbours(float x) {
  const T n = math::from_f32<T>(x);
  const double near = double(math::to_f32(n));
  if (near == double(x)) return {near, near};
  T other = n;
  // The other neighbour is one step toward x from the nearest one (sign-magnitude: bits +- 1).
  const bool up = std::fabs(double(x)) > std::fabs(near);
  other.bits = uint16_t(up ? n.bits + 1 : n.bits - 1);
  const double o = double(math::to_f32(other));
  return {std::min(near, o), std::max(near, o)};
}

// Stochastic rounding lands on one of x's two neighbours, with a mean that is x: over 40,000 draws its
// mean error is within 5 standard errors of zero, a bound the nearest rounding's bias (a quarter step and
// more, on the values chosen) fails. bf16 and f16, normal and f16-subnormal values, both signs.
template <class T>
void expect_unbiased(std::mt19937& rng, float lo_exp, float hi_exp) {
  std::uniform_real_distribution<float> exponent(lo_exp, hi_exp), fraction(0.2f, 0.8f);
  constexpr int kDraws = 40000;
  r123::Philox4x32_R<10> philox;
  for (int value = 0; value < 24; ++value) {
    // A value a fraction 0.2..0.8 of a step above a representable one: nearest is biased by >= 0.2 step.
    const float base = math::to_f32(math::from_f32<T>(std::exp2(exponent(rng)) * (value % 2 != 0 ? -1.0f : 1.0f)));
    const auto [lo, hi] = neighbours<T>(std::nextafter(base, 2 * base));
    const double step = hi - lo;
    const float x = float(lo + fraction(rng) * step);
    const auto [a, b] = neighbours<T>(x);
    ASSERT_LT(a, b) << x << " is not between two values";
    double sum = 0.0;
    for (int i = 0; i < kDraws; i += 4) {
      const r123::Philox4x32::ctr_type c = {{uint32_t(i), uint32_t(value), 0, 0}};
      const r123::Philox4x32::key_type k = {{0x5eed, uint32_t(rng())}};
      const r123::Philox4x32::ctr_type r = philox(c, k);
      for (int j = 0; j < 4; ++j) {
        const double y = double(math::to_f32(math::round_state<T>(x, true, r.v[j])));
        ASSERT_TRUE(y == a || y == b) << x << " rounded to " << y << ", not a neighbour";
        sum += y - double(x);
      }
    }
    const double bound = 5.0 * 0.5 * (b - a) / std::sqrt(double(kDraws));
    EXPECT_LE(std::fabs(sum / kDraws), bound) << "stochastic rounding of " << x << " is biased";
    const double nearest_bias = std::fabs(double(math::to_f32(math::round_state<T>(x, false, 0))) - double(x));
    EXPECT_GT(nearest_bias, bound) << "the bound would not catch the nearest rounding's bias at " << x;
  }
}

TEST(Rounding, StochasticRoundingIsUnbiased) {
  std::mt19937 rng(std::random_device{}());
  expect_unbiased<math::bf16>(rng, -20.0f, 20.0f);
  expect_unbiased<math::f16>(rng, -13.0f, 15.0f);   // normal halves
  expect_unbiased<math::f16>(rng, -23.0f, -14.5f);  // subnormal halves: a step of 2^-24
}

// Infinities and NaN pass as the nearest rounding leaves them; exactly representable values stay.
TEST(Rounding, StochasticRoundingKeepsSpecialsAndExactValues) {
  const float inf = std::numeric_limits<float>::infinity();
  for (uint32_t r : {0u, 0x8000u, 0xffffffffu}) {
    EXPECT_EQ(math::round_state<math::bf16>(inf, true, r).bits, 0x7f80u);
    EXPECT_EQ(math::round_state<math::f16>(-inf, true, r).bits, 0xfc00u);
    EXPECT_TRUE(std::isnan(math::to_f32(math::round_state<math::f16>(std::nanf(""), true, r))));
    EXPECT_EQ(math::to_f32(math::round_state<math::bf16>(1.5f, true, r)), 1.5f);
    EXPECT_EQ(math::to_f32(math::round_state<math::f16>(-0.125f, true, r)), -0.125f);
  }
  // Two cvt-style pairs: the host's packing equals two nearest roundings.
  EXPECT_EQ(math::pack2_rn<math::f16>(1.0f, -2.0f), 0x3c00u | (0xc000u << 16));
  EXPECT_EQ(math::pack2_rn<math::bf16>(1.0f, -2.0f), 0x3f80u | (0xc000u << 16));
}

}  // namespace
}  // namespace kdagraph::test
