// Vector kernels for codecs that dequantize through a small table of levels and apply RoPE while
// they read (KVQuant): a table lookup with an affine map, and the pairwise rotation. Each
// computes exactly what its plain expression does (multiplies and adds kept apart, no fused
// multiply-add), so every SIMD target and the scalar fallback give the same bits.
#pragma once

#include <cstdint>

namespace vq::kv {

// Codes stored as bit planes: plane j (ceil(n/8) bytes) holds bit j of every code, channel c at
// bit c % 8 of byte c / 8. A vector of codes comes out of `bits` mask loads, with no shifting
// across byte boundaries.
inline size_t plane_bytes(int n) { return size_t(n + 7) / 8; }
void pack_planes(const uint8_t* codes, int n, int bits, uint8_t* out);
inline int plane_code(const uint8_t* planes, int n, int bits, int c) {
  int code = 0;
  for (int j = 0; j < bits; ++j) code |= ((planes[size_t(j) * plane_bytes(n) + size_t(c / 8)] >> (c % 8)) & 1) << j;
  return code;
}
// out[c] = base[c] + scale[c] * levels[code c], codes as bit planes (n_levels = 2^bits <= 16)
void lut_affine_planes_channels(const uint8_t* planes, int n, int bits, const float* levels, const float* base,
                                const float* scale, float* out);
// out[c] = zero + scale * levels[code c]
void lut_affine_planes(const uint8_t* planes, int n, int bits, const float* levels, float zero, float scale, float* out);
// The same for n_rows rows in one call (codes of row r at planes + r * row_stride, its output at
// out + r * out_stride), each row's bits exactly as the one-row call gives them: the level table
// is built once and the width fixed at compile time, so a run of tokens pays no per-row setup.
void lut_affine_planes_channels_rows(const uint8_t* planes, size_t row_stride, int n_rows, int n, int bits,
                                     const float* levels, const float* base, const float* scale, float* out,
                                     size_t out_stride);
// Per row r: out = zero[r] + scale[r] * levels[code].
void lut_affine_planes_rows(const uint8_t* planes, size_t row_stride, int n_rows, int n, int bits, const float* levels,
                            const float* zero, const float* scale, float* out, size_t out_stride);

// cs[i] = hc[i] * lc[i] - hs[i] * ls[i];  sn[i] = hs[i] * lc[i] + hc[i] * ls[i]
void compose_angles(const float* hc, const float* hs, const float* lc, const float* ls, int n, float* cs, float* sn);
// (a[i], b[i]) <- (a[i] * cs[i] - b[i] * s[i], a[i] * s[i] + b[i] * cs[i]) with s = sign * sn
void rotate_pairs(float* a, float* b, int n, const float* cs, const float* sn, float sign);
// rotate_pairs on n_rows rows of 2 * half floats (row r at x + r * stride, its halves paired),
// row r by cos angles + r * angle_stride and sin that + half.
void rotate_halves_rows(float* x, size_t stride, int n_rows, int half, const float* angles, size_t angle_stride,
                        float sign);

}  // namespace vq::kv
