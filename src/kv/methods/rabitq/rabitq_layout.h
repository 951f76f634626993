// RaBitQ's byte layouts (src/kv/methods/rabitq/rabitq.cpp), shared with its tests: the token and the
// prepared query state.
//
// A token: the estimator and the decode need only the factor |o| / (|y| <o_bar, o>) beside the
// grid codes c (y = c - (2^B - 1)/2), so a token is that factor (fp16) and its codes:
// TurboQuant's row (turbo_rows.h: the scale, then B bit planes of d/8 bytes) with the grid's
// levels, laid out with tokens in the vector lanes when d is a multiple of 32 (turbo_lanes.h: a
// block's 16 factors first, then per group of 32 channels B 32-bit words per token), as rows of
// 2 + B d/8 bytes otherwise. Bits per element: B + 16/d. The papers' |o| and <o_bar, o> are not
// kept apart: their ratio is all the estimator uses (the tests recover <o_bar, o> = |o| / |o_hat|
// from the decode).
//
// Query state at B = 1 (floats; at B >= 2 it is the rotated query itself): delta, lower bound v_l,
// sum of the 4-bit codes, one spare, then the 4 bit planes of the quantized rotated query as
// ceil(d/64) 64-bit words each (two floats a word; bits past d are zero). The held query is q_bar_i
// = v_l + delta * q_u[i].
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "src/kv/kernels/lut_kernels.h"

namespace vq::kv::rabitq {

constexpr int kBlockTokens = 16;
constexpr int kQueryBits = 4;

inline size_t scalar_bytes() { return 2; }
inline size_t row_bytes(int d, int bits) { return scalar_bytes() + size_t(bits) * plane_bytes(d); }

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
