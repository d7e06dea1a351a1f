// fp16/bf16 conversions against a brute-force oracle: the nearest
// representable value, ties to the even bit pattern, found by binary search
// over the (monotonic) positive bit patterns.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>

#include "common/half_convert.h"

namespace {

using flashcore::bf16_bits_to_float;
using flashcore::bits_float;
using flashcore::float_bits;
using flashcore::float_to_bf16_bits;
using flashcore::float_to_half_bits;
using flashcore::half_bits_to_float;

// Rounds |x| to the format whose positive finite patterns are 0..max_finite,
// with value(p) decoded by `decode`. The pattern after max_finite (infinity)
// takes the value the next binade step would have, which gives IEEE overflow.
uint16_t oracle(double x, uint16_t max_finite, double inf_step_value,
                const std::function<double(uint16_t)>& decode) {
  const bool neg = std::signbit(x);
  const double a = std::fabs(x);
  auto value = [&](uint32_t p) { return p > max_finite ? inf_step_value : decode(static_cast<uint16_t>(p)); };
  uint32_t lo = 0, hi = uint32_t(max_finite) + 1;  // invariant: value(lo) <= a < value(hi) when a < inf value
  if (a >= value(hi)) return static_cast<uint16_t>(hi | (neg ? 0x8000u : 0u));
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    (value(mid) <= a ? lo : hi) = mid;
  }
  const double dlo = a - value(lo), dhi = value(hi) - a;
  const uint32_t pick = dlo < dhi ? lo : dhi < dlo ? hi : ((lo & 1u) ? hi : lo);
  return static_cast<uint16_t>(pick | (neg ? 0x8000u : 0u));
}

uint16_t half_oracle(float f) {
  return oracle(f, 0x7bff, 65536.0, [](uint16_t p) { return double(half_bits_to_float(p)); });
}
uint16_t bf16_oracle(float f) {
  return oracle(f, 0x7f7f, std::ldexp(1.0, 128), [](uint16_t p) { return double(bf16_bits_to_float(p)); });
}

TEST(HalfConvert, DecodesKnownValues) {
  EXPECT_EQ(half_bits_to_float(0x3c00), 1.0f);
  EXPECT_EQ(half_bits_to_float(0xc000), -2.0f);
  EXPECT_EQ(half_bits_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(half_bits_to_float(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(half_bits_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(half_bits_to_float(0x7c00), INFINITY);
  EXPECT_TRUE(std::signbit(half_bits_to_float(0x8000)));
  EXPECT_TRUE(std::isnan(half_bits_to_float(0x7e00)));
  EXPECT_EQ(bf16_bits_to_float(0x3f80), 1.0f);
  EXPECT_EQ(bf16_bits_to_float(0xc040), -3.0f);
}

TEST(HalfConvert, HalfRoundTripsEveryPattern) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = half_bits_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(half_bits_to_float(float_to_half_bits(f))));
    } else {
      ASSERT_EQ(float_to_half_bits(f), h) << std::hex << h;
    }
  }
}

TEST(HalfConvert, Bf16RoundTripsEveryPattern) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = bf16_bits_to_float(static_cast<uint16_t>(b));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(f))));
    } else {
      ASSERT_EQ(float_to_bf16_bits(f), b) << std::hex << b;
    }
  }
}

// Exact midpoints between neighbours go to the even pattern; a hair either
// side goes to the nearer one.
TEST(HalfConvert, TiesAndNearTies) {
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const double a = half_bits_to_float(static_cast<uint16_t>(h));
    const double b = h + 1 == 0x7c00 ? 65536.0 : double(half_bits_to_float(static_cast<uint16_t>(h + 1)));
    const float mid = static_cast<float>((a + b) / 2);  // exact: 12 significant bits
    ASSERT_EQ(float_to_half_bits(mid), (h & 1u) ? h + 1 : h) << std::hex << h;
    ASSERT_EQ(float_to_half_bits(-mid), ((h & 1u) ? h + 1 : h) | 0x8000u) << std::hex << h;
    ASSERT_EQ(float_to_half_bits(std::nextafter(mid, 0.f)), h) << std::hex << h;
    ASSERT_EQ(float_to_half_bits(std::nextafter(mid, INFINITY)), h + 1) << std::hex << h;
  }
  for (uint32_t b = 0; b < 0x7f80; b += 7) {
    const float lo = bf16_bits_to_float(static_cast<uint16_t>(b));
    const float mid = bits_float(float_bits(lo) + 0x8000u);  // halfway to the next bf16 pattern
    ASSERT_EQ(float_to_bf16_bits(mid), (b & 1u) ? b + 1 : b) << std::hex << b;
  }
}

TEST(HalfConvert, RandomFloatsMatchOracle) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    // Half: exponents from below its subnormals to past its overflow.
    const uint32_t exp = 95 + bits(rng) % 60;
    const float fh = bits_float((bits(rng) & 0x807fffffu) | (exp << 23));
    ASSERT_EQ(float_to_half_bits(fh), half_oracle(fh)) << fh;
    // bf16: any non-NaN float.
    float fb = bits_float(bits(rng));
    if (std::isnan(fb)) fb = 1.5f;
    ASSERT_EQ(float_to_bf16_bits(fb), bf16_oracle(fb)) << fb;
  }
}

TEST(HalfConvert, SpecialValues) {
  EXPECT_EQ(float_to_half_bits(0.0f), 0x0000);
  EXPECT_EQ(float_to_half_bits(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half_bits(INFINITY), 0x7c00);
  EXPECT_EQ(float_to_half_bits(-INFINITY), 0xfc00);
  EXPECT_EQ(float_to_half_bits(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half_bits(65519.996f), 0x7bff);
  EXPECT_EQ(float_to_half_bits(65520.0f), 0x7c00);  // tie with "65536": to even = inf
  EXPECT_EQ(float_to_half_bits(1e30f), 0x7c00);
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.0f, -25)), 0x0000);  // tie between 0 and 2^-24: even
  EXPECT_EQ(float_to_half_bits(std::nextafter(std::ldexp(1.0f, -25), 1.f)), 0x0001);
  EXPECT_EQ(float_to_half_bits(1e-30f), 0x0000);
  EXPECT_TRUE(std::isnan(half_bits_to_float(float_to_half_bits(NAN))));
  EXPECT_EQ(float_to_half_bits(NAN) & 0x7c00, 0x7c00);
  EXPECT_EQ(float_to_bf16_bits(INFINITY), 0x7f80);
  EXPECT_EQ(float_to_bf16_bits(3.4028235e38f), 0x7f80);  // rounds up past the largest bf16
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(NAN))));
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(bits_float(0x7f800001u)))));  // payload in low bits only
  EXPECT_EQ(float_to_bf16_bits(-0.0f), 0x8000);
}

}  // namespace
