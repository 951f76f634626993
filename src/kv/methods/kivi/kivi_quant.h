// KIVI's quantizer, shared by its packed layout (kivi.cpp) and its tokens-in-lanes layout
// (kivi_lanes.cpp): asymmetric min/max round-to-nearest over a group, scale and zero in fp16.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "src/core/fp16.h"

namespace vq::kv::kivi {

struct GroupParams {
  float scale, zero;
};

// Min/max quantization of n values at stride `stride`; writes fp16 scale and zero, and codes.
inline GroupParams quantize_group(const float* x, int n, size_t stride, int bits, uint8_t* codes, size_t code_stride) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[size_t(i) * stride]);
    hi = std::max(hi, x[size_t(i) * stride]);
  }
  const int levels = (1 << bits) - 1;
  // Stored in fp16; the codes are chosen against the stored values so decoding is exact to them.
  const float s = f16_to_f32(f32_to_f16((hi - lo) / float(levels)));
  const float z = f16_to_f32(f32_to_f16(lo));
  for (int i = 0; i < n; ++i) {
    const float v = x[size_t(i) * stride];
    const int c = s > 0.0f ? int(std::nearbyint((v - z) / s)) : 0;
    codes[size_t(i) * code_stride] = uint8_t(std::clamp(c, 0, levels));
  }
  return {s, z};
}

inline void put_params(uint8_t* p, GroupParams g) {
  const uint16_t s = f32_to_f16(g.scale), z = f32_to_f16(g.zero);
  std::memcpy(p, &s, 2);
  std::memcpy(p + 2, &z, 2);
}
inline GroupParams get_params(const uint8_t* p) {
  uint16_t s, z;
  std::memcpy(&s, p, 2);
  std::memcpy(&z, p + 2, 2);
  return {f16_to_f32(s), f16_to_f32(z)};
}

}  // namespace vq::kv::kivi
