// float <-> IEEE fp16 and float <-> bfloat16 conversions done on bit patterns,
// so the CPU reference needs neither compiler support for _Float16/__bf16
// nor CUDA headers. Float -> 16-bit rounds to nearest, ties to even, like the
// GPU's cvt.rn; NaN stays NaN (quiet) and overflow becomes infinity.
#pragma once

#include <cstdint>
#include <cstring>

namespace flashcore {

inline uint32_t float_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  return x;
}

inline float bits_float(uint32_t x) {
  float f;
  std::memcpy(&f, &x, sizeof f);
  return f;
}

// Drops the low `shift` bits of `m`, rounding to nearest, ties to even.
// A carry out of the kept bits is intended: it bumps the exponent field.
inline uint32_t round_shift_rne(uint32_t m, uint32_t shift) {
  const uint32_t kept = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1u);
  return kept + ((rem > halfway || (rem == halfway && (kept & 1u))) ? 1u : 0u);
}

inline uint16_t float_to_half_bits(float f) {
  const uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t mag = x & 0x7fffffffu;
  if (mag >= 0x7f800000u) {  // inf, or NaN (keep the top payload bits, force quiet)
    return static_cast<uint16_t>(sign | 0x7c00u | (mag > 0x7f800000u ? 0x0200u | ((mag >> 13) & 0x3ffu) : 0u));
  }
  if (mag >= 0x38800000u) {  // |f| >= 2^-14: a normal half, or overflow to inf
    // Rebias the exponent (127 -> 15) and drop 13 mantissa bits. Anything
    // that rounds past 65504 carries into the all-ones exponent: infinity.
    const uint32_t h = round_shift_rne(mag - 0x38000000u, 13);
    return static_cast<uint16_t>(sign | (h >= 0x7c00u ? 0x7c00u : h));
  }
  if (mag < 0x33000000u) return static_cast<uint16_t>(sign);  // |f| <= 2^-25 rounds to zero
  // Subnormal half: count in units of 2^-24. The float is m * 2^(e-150) with
  // the implicit bit restored, so the shift is 126 - e, between 14 and 24.
  const uint32_t e = mag >> 23;
  const uint32_t m = (mag & 0x7fffffu) | 0x800000u;
  return static_cast<uint16_t>(sign | round_shift_rne(m, 126u - e));  // may round up to 2^-14: still right
}

inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = (uint32_t(h) & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24 is exact in float.
    const float v = float(mant) * 5.9604644775390625e-8f;
    return bits_float(float_bits(v) | sign);
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline uint16_t float_to_bf16_bits(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // quiet NaN
  // bf16 is the top half of a float: round the low 16 bits away. Rounding
  // the largest floats up carries into the exponent and yields infinity.
  return static_cast<uint16_t>(round_shift_rne(x & 0x7fffffffu, 16) | ((x >> 16) & 0x8000u));
}

inline float bf16_bits_to_float(uint16_t b) { return bits_float(uint32_t(b) << 16); }

}  // namespace flashcore
