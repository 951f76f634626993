// IEEE binary16 and bfloat16 conversions, bit-exact (round to nearest, ties to even).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace vq {

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// binary16 -> binary32, exact for every input including subnormals, infinities and NaN.
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return f32_from_bits(sign);
    // Subnormal: value = mant * 2^-24, exactly representable in binary32.
    const float v = float(mant) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

// binary32 -> binary16 with round-to-nearest-even; overflow gives infinity, NaN stays NaN.
inline uint16_t f32_to_f16(float f) {
  const uint32_t u = f32_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs >= 0x7f800000u) return uint16_t(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: infinity
  if (abs < 0x38800000u) {
    // The result is subnormal or zero.
    // a * 2^24 is exact (a power-of-two scale) and below 1024; round its fraction by hand.
    const float scaled = f32_from_bits(abs) * 16777216.0f;
    uint32_t r = uint32_t(scaled);
    const float frac = scaled - float(r);
    if (frac > 0.5f || (frac == 0.5f && (r & 1u))) ++r;
    return uint16_t(sign | r);
  }
  // Normal: rebias the exponent and round the 13 dropped mantissa bits to nearest even.
  uint32_t v = abs - 0x38000000u;  // exponent bias 127 -> 15, aligned at bit 23
  const uint32_t round_bit = 0x1000u, sticky = 0x0fffu;
  uint32_t h = v >> 13;
  if ((v & round_bit) && ((v & sticky) || (h & 1u))) ++h;  // may carry into the exponent: fine
  return uint16_t(sign | h);
}

inline float bf16_to_f32(uint16_t b) { return f32_from_bits(uint32_t(b) << 16); }

// binary32 -> bfloat16, round to nearest even; NaN kept quiet.
inline uint16_t f32_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  const uint32_t lsb = (u >> 16) & 1u;
  return uint16_t((u + 0x7fffu + lsb) >> 16);
}

// Bulk conversions (vectorized where it pays).
void f16_to_f32(const uint16_t* in, float* out, size_t n);
void f32_to_f16(const float* in, uint16_t* out, size_t n);
void bf16_to_f32(const uint16_t* in, float* out, size_t n);
void f32_to_bf16(const float* in, uint16_t* out, size_t n);

}  // namespace vq
