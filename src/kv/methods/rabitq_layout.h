// RaBitQ's byte layouts (src/kv/methods/rabitq.cpp), shared with its tests: the row of one
// token and the prepared query state.
//
// Row of one token (B bits per coordinate, d a power of two >= 8):
//   fp16 |o|            the vector's norm (centroid 0: there is no calibration),
//   fp16 <o_bar, o>     the cosine between the quantized and the true direction (the correction),
//   fp16 |y|            (B >= 2 only) the norm of the grid vector y = code - (2^B - 1)/2, the
//                       rescale that maps the grid to the unit sphere; at B = 1 it is sqrt(d)/2,
//   B bit planes of d/8 bytes (plane k holds bit k of every code, src/kv/lut_kernels.h).
// Bits per element: B + 32/d at B = 1, B + 48/d at B >= 2.
//
// Query state at B = 1 (floats; at B >= 2 it is the rotated query itself): delta, lower bound v_l,
// sum of the 4-bit codes, one spare, then the 4 bit planes of the quantized rotated query as
// ceil(d/64) 64-bit words each (two floats a word; bits past d are zero). The held query is q_bar_i
// = v_l + delta * q_u[i].
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "src/core/fp16.h"
#include "src/kv/lut_kernels.h"

namespace vq::kv::rabitq {

constexpr int kBlockTokens = 16;
constexpr int kQueryBits = 4;

inline size_t scalar_bytes(int bits) { return bits == 1 ? 4 : 6; }
inline size_t row_bytes(int d, int bits) {
  return scalar_bytes(bits) + size_t(bits) * plane_bytes(d);
}

struct RowScalars {
  float norm;    // |o|
  float cosine;  // <o_bar, o>
  float ynorm;   // |y|
};

inline RowScalars read_scalars(const uint8_t* row, int d, int bits) {
  uint16_t h[3] = {0, 0, 0};
  std::memcpy(h, row, scalar_bytes(bits));
  return {f16_to_f32(h[0]), f16_to_f32(h[1]),
          bits == 1 ? 0.5f * std::sqrt(float(d)) : f16_to_f32(h[2])};
}

inline const uint8_t* row_planes(const uint8_t* row, int bits) { return row + scalar_bytes(bits); }

struct QueryState {
  static size_t words(int d) { return size_t(d + 63) / 64; }
  static size_t floats(int d) { return 4 + 2 * size_t(kQueryBits) * words(d); }
  // Plane j's words start here (memcpy them out: the state is a float array).
  static size_t plane_offset(int d, int j) { return 4 + 2 * size_t(j) * words(d); }
  static float delta(const float* s) { return s[0]; }
  static float lower(const float* s) { return s[1]; }
  static float code_sum(const float* s) { return s[2]; }
  // The held (quantized) value of rotated coordinate i.
  static float held(const float* s, int d, int i) {
    int code = 0;
    for (int j = 0; j < kQueryBits; ++j) {
      uint64_t w;
      std::memcpy(&w, s + plane_offset(d, j) + 2 * size_t(i / 64), 8);
      code |= int((w >> (i % 64)) & 1) << j;
    }
    return lower(s) + delta(s) * float(code);
  }
};

}  // namespace vq::kv::rabitq
