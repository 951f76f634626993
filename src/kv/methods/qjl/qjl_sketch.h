// The 1-bit quantized Johnson-Lindenstrauss transform shared by QJL (qjl.cpp) and TurboQuant-Prod
// (turbo_prod.cpp): a seeded Gaussian sketch S (m x d, i.i.d. N(0, 1)), the packed signs of S x,
// and the two ways attention reads those signs.
//
// For any q and x, E[<S q, sign(S x)>] = m * sqrt(2/pi) * <q, x> / ||x|| (each row s gives
// E[<s, q> sign(<s, x>)] = sqrt(2/pi) <q, x> / ||x|| for Gaussian s), so
//   sqrt(pi/2) / m * ||x|| * <S q, sign(S x)>
// is an unbiased estimate of <q, x> with variance ((pi/2) ||q||^2 ||x||^2 - <q, x>^2) / m: the
// scale kQjlScale / m below holds for N(0, 1) entries only.
//
// Sign bits are packed little-endian: row i of the sketch is bit i % 8 of byte i / 8, 1 for a
// positive projection (zero and negative give 0, i.e. -1).
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "src/core/rng.h"
#include "src/kv/methods/qjl/qjl_lane_kernels.h"

namespace vq::kv::qjl {

inline constexpr double kQjlScale = 1.2533141373155002512;  // sqrt(pi / 2)

// kSigns[b][i] = +1 if bit i of byte b is set, else -1: a byte of sign bits becomes eight floats
// with one load, so the sign-select loops below run as plain multiply-adds over 8 lanes.
inline constexpr auto kSigns = [] {
  std::array<std::array<float, 8>, 256> t{};
  for (int b = 0; b < 256; ++b) {
    for (int i = 0; i < 8; ++i) t[size_t(b)][size_t(i)] = ((b >> i) & 1) ? 1.0f : -1.0f;
  }
  return t;
}();

// <w, sign bits> over the first 8 * n_bytes entries of w.
inline float sign_dot(const float* w, const uint8_t* bits, int n_bytes) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int j = 0; j < n_bytes; ++j) {
    const float* s = kSigns[bits[j]].data();
    for (int i = 0; i < 8; ++i) acc[i] += w[8 * j + i] * s[i];
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// acc[i] += coef * sign_i over the first 8 * n_bytes entries.
inline void sign_axpy(float coef, const uint8_t* bits, int n_bytes, float* acc) {
  for (int j = 0; j < n_bytes; ++j) {
    const float* s = kSigns[bits[j]].data();
    for (int i = 0; i < 8; ++i) acc[8 * j + i] += coef * s[i];
  }
}

// S, kept transposed (column c of S is the m contiguous floats st[c * m ...]): projecting a vector
// and the query corrections of QJL's outlier channels both read whole columns.
class GaussianSketch {
 public:
  // Rows drawn one after another from Rng(seed), m x d normals in row-major order.
  GaussianSketch(int m, int d, uint64_t seed) : m_(m), d_(d), st_(size_t(m) * size_t(d)) {
    Rng rng(seed);
    for (int i = 0; i < m; ++i) {
      for (int c = 0; c < d; ++c) st_[size_t(c) * m + size_t(i)] = float(rng.normal());
    }
  }
  int rows() const { return m_; }
  int dim() const { return d_; }
  const float* column(int c) const { return st_.data() + size_t(c) * size_t(m_); }
  size_t bytes() const { return st_.size() * sizeof(float); }

  // out[0, rows) = (S x)[0, rows) over the channels c with (mask[c] != 0) == in_mask (all
  // channels when mask is null). rows <= m.
  void project(const float* x, int rows, float* out, const uint8_t* mask = nullptr, bool in_mask = false) const {
    project_columns(st_.data(), m_, d_, x, rows, out, mask, in_mask);
  }

  // project (all m rows, all channels) for n vectors x (x_stride apart) into outputs out_stride
  // apart, each with project's bits, several vectors per pass over S.
  void project_rows(const float* xs, size_t x_stride, int n, float* out, size_t out_stride) const {
    project_columns_rows(st_.data(), m_, d_, xs, x_stride, n, m_, out, out_stride);
  }

  // out[c] += (S^T z)_c for z of m floats (the sum over the rows taken first, then added).
  void add_transposed(const float* z, float* out) const { add_transposed(z, m_, out); }
  // The same for n vectors z_r (z_stride apart) into out rows (out_stride apart), in the same order
  // of sums, with the vectors in the lanes: attention's values finalize all query rows at once.
  void add_transposed_rows(const float* z, size_t z_stride, int n, float* out, size_t out_stride) const {
    transposed_add(st_.data(), m_, d_, z, z_stride, n, out, out_stride);
  }
  // The same with the first `rows` rows of S and z, over the channels c with
  // (mask[c] != 0) == in_mask (all channels when mask is null).
  void add_transposed(const float* z, int rows, float* out, const uint8_t* mask = nullptr, bool in_mask = false) const {
    for (int c = 0; c < d_; ++c) {
      if (mask && (mask[c] != 0) != in_mask) continue;
      const float* col = column(c);
      float s = 0.0f;
      for (int i = 0; i < rows; ++i) s += col[i] * z[i];
      out[c] += s;
    }
  }

  // out[c] += coef * (S[0, rows)^T sign bits)_c over the same channels as `project`.
  void add_transposed_signs(float coef, const uint8_t* bits, int rows, float* out, const uint8_t* mask = nullptr,
                            bool in_mask = false) const {
    for (int c = 0; c < d_; ++c) {
      if (mask && (mask[c] != 0) != in_mask) continue;
      out[c] += coef * sign_dot(column(c), bits, rows / 8);
    }
  }

 private:
  int m_, d_;
  std::vector<float> st_;
};

// Packs the signs of the n projections p (n a multiple of 8): bit set where p > 0.
inline void pack_signs(const float* p, int n, uint8_t* bits) {
  for (int j = 0; j < n / 8; ++j) {
    uint8_t b = 0;
    for (int i = 0; i < 8; ++i) b = uint8_t(b | ((p[8 * j + i] > 0.0f ? 1 : 0) << i));
    bits[j] = b;
  }
}

// A seed for a layer's sketch, apart from the seeds of its rotations (registry's layer_seed):
// the same layer seed with a fixed salt, so the sketch and the rotation draw different streams.
inline uint64_t sketch_seed(uint64_t layer_seed_value) { return layer_seed_value ^ 0x514a4c5f736b6574ull; }

}  // namespace vq::kv::qjl
