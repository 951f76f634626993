// What the TurboQuant family shares once a vector has been rotated (the rotation itself is the
// rotate_keys/rotate_values wrapper around these codecs): each token is a row holding its norm
// (fp16) and one code per coordinate of its unit direction, the codes stored as bit planes; a
// code stands for a level of a table of 2^bits floats. The stages differ only in how a unit
// direction is turned into codes (nearest Lloyd–Max level for TurboQuant-MSE, two residual
// stages for TurboQuant-RVQ) and in the table; scoring and accumulation read the codes through
// the table, a tile of tokens at a time, never building the run in fp16.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "src/core/fp16.h"
#include "src/kv/calib/lloyd_max.h"
#include "src/kv/calib/nuq.h"
#include "src/kv/kernels/decode_tiles.h"
#include "src/kv/kernels/f16_kernels.h"
#include "src/kv/kernels/lut_kernels.h"
#include "veloxquant/kv/codec.h"

namespace vq::kv {

inline constexpr int kTurboBlockTokens = 16;

class TurboRows {
 public:
  static constexpr int kMaxDim = 4096;
  // quantize(u, codes): codes (< 2^bits) of the d coordinates of the unit vector u.
  using Quantizer = std::function<void(const float* u, uint8_t* codes)>;

  // What the stored fp16 scale is. kNorm: ||x||, the paper's. kNormMatched: ||x|| / ||c||, so
  // that the reconstruction keeps x's length. kInnerUnbiased: ||x|| / <u, c>, so that
  // <x, x_hat> = ||x||^2 (RaBitQ's correction): the Lloyd-Max reconstruction c is a conditional
  // mean and shorter than u, which shrinks every inner product by about (1 - D).
  enum class NormMode { kNorm = 0, kNormMatched = 1, kInnerUnbiased = 2 };
  TurboRows(int d, int bits, std::vector<float> table, Quantizer quantize, size_t param_bytes,
            NormMode norm_mode = NormMode::kNorm)
      : d_(d), bits_(bits), table_(std::move(table)), quantize_(std::move(quantize)),
        row_(2 + size_t(bits) * plane_bytes(d)), param_bytes_(param_bytes), norm_mode_(norm_mode) {}
  int head_dim() const { return d_; }
  int bits() const { return bits_; }
  // The 2^bits levels a code stands for (before the row's scale).
  const std::vector<float>& table() const { return table_; }
  size_t row_bytes() const { return row_; }
  size_t param_bytes() const { return param_bytes_; }

  // The codes of x's direction (codes[j] < 2^bits) and the fp16 bits of its stored scale.
  uint16_t quantize(const float* x, uint8_t* codes) const {
    double ss = 0;
    for (int j = 0; j < d_; ++j) ss += double(x[j]) * x[j];
    const float norm = float(std::sqrt(ss));
    float u[kMaxDim];  // d <= kMaxDim is checked by the methods
    const float inv = norm > 0.0f ? 1.0f / norm : 0.0f;
    for (int j = 0; j < d_; ++j) u[j] = x[j] * inv;
    quantize_(u, codes);
    float scale = norm;
    if (norm_mode_ != NormMode::kNorm && norm > 0.0f) {
      double cc = 0, uc = 0;
      for (int j = 0; j < d_; ++j) {
        const double c = table_[codes[j]];
        cc += c * c;
        uc += double(u[j]) * c;
      }
      const double den = norm_mode_ == NormMode::kNormMatched ? std::sqrt(cc) : uc;
      if (den > 0) scale = float(norm / den);
    }
    return f32_to_f16(std::min(scale, 65504.0f));
  }
  void encode(const float* x, uint8_t* row) const {
    uint8_t codes[kMaxDim];
    const uint16_t h = quantize(x, codes);
    pack_planes(codes, d_, bits_, row + 2);
    std::memcpy(row, &h, 2);
  }
  void decode(const uint8_t* row, float* x) const {
    uint16_t h;
    std::memcpy(&h, row, 2);
    lut_affine_planes(row + 2, d_, bits_, table_.data(), 0.0f, f16_to_f32(h), x);
  }
 private:
  int d_, bits_;
  std::vector<float> table_;
  Quantizer quantize_;
  size_t row_, param_bytes_;
  NormMode norm_mode_;
};

// Rows whose codes are the nearest Lloyd–Max level of the density of a coordinate of a uniformly
// random unit vector in R^d (TurboQuant-MSE's codebook), nearest by counting the midpoints a
// value exceeds. Below d = 3 that density has no Lloyd–Max solution here; the unit Gaussian's
// levels scaled by 1/sqrt(d) stand in (only SpectralQuant's small parts reach it).
inline TurboRows sphere_rows(int d, int bits, TurboRows::NormMode norm_mode = TurboRows::NormMode::kNorm) {
  std::vector<float> levels = d >= 3 ? lloyd_max_sphere(d, bits).levels : lloyd_max_gaussian(bits).levels;
  if (d < 3) {
    for (float& x : levels) x /= std::sqrt(float(d));
  }
  std::vector<float> mids = level_midpoints(levels);
  const size_t param_bytes = (levels.size() + mids.size()) * sizeof(float);
  return TurboRows(
      d, bits, levels,
      [d, mids = std::move(mids)](const float* u, uint8_t* codes) {
        for (int j = 0; j < d; ++j) codes[j] = uint8_t(nearest_level(mids.data(), int(mids.size()), u[j]));
      },
      param_bytes, norm_mode);
}

// Tokens [i0, i1) of a run of blocks of kTurboBlockTokens rows decoded a tile at a time
// (decode_tiles.h) and handed to fn.
template <typename Rows, typename Fn>
void decode_row_tiles(const Rows& rows, const uint8_t* blocks, int64_t i0, int64_t i1, Workspace& ws, Fn fn) {
  const size_t row = rows.row_bytes();
  decode_tiles(
      i0, i1, rows.head_dim(), ws,
      [&](int64_t i, float* x) {
        rows.decode(blocks + size_t(i / kTurboBlockTokens) * kTurboBlockTokens * row + size_t(i % kTurboBlockTokens) * row,
                    x);
      },
      fn);
}

// The block plumbing of a codec over blocks of kTurboBlockTokens rows, for any Rows type with
// head_dim(), row_bytes(), param_bytes(), encode(x, row) and decode(row, x): the same for a key and
// a value codec (Base). Every token is coded on its own, so a token is compressed as soon as it
// leaves the window.
template <typename Base, typename Rows>
class RowBlockCodec : public Base {
 public:
  explicit RowBlockCodec(Rows rows) : rows_(std::move(rows)) {}
  int head_dim() const override { return rows_.head_dim(); }
  int block_tokens() const override { return kTurboBlockTokens; }
  size_t block_bytes() const override { return kTurboBlockTokens * rows_.row_bytes(); }
  size_t param_bytes() const override { return rows_.param_bytes(); }
  void encode(const float* x, int64_t, uint8_t* block) const override {
    for (int t = 0; t < kTurboBlockTokens; ++t) rows_.encode(x + size_t(t) * head_dim(), block + size_t(t) * rows_.row_bytes());
  }
  bool encodes_single_tokens() const override { return true; }
  void encode_token(const float* x, int64_t, int slot, uint8_t* block) const override {
    rows_.encode(x, block + size_t(slot) * rows_.row_bytes());
  }
  void decode(const uint8_t* block, int64_t, float* x) const override {
    for (int t = 0; t < kTurboBlockTokens; ++t) rows_.decode(block + size_t(t) * rows_.row_bytes(), x + size_t(t) * head_dim());
  }

 protected:
  const Rows& rows() const { return rows_; }

 private:
  Rows rows_;
};

// Scores and accumulation through float tiles decoded in L1 (decode_tiles.h): the path of rows
// that turbo_lanes.h's layout does not take (head dims not a multiple of 32, codes over 4 bits).
template <typename Rows>
class RowKeyCodec final : public RowBlockCodec<KeyCodec, Rows> {
 public:
  using RowBlockCodec<KeyCodec, Rows>::RowBlockCodec;
  using RowBlockCodec<KeyCodec, Rows>::head_dim;
  size_t query_state_floats() const override { return size_t(head_dim()); }
  void prepare_query(const float* q, float* state, Workspace&) const override { std::copy_n(q, head_dim(), state); }
  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1, float* out,
              size_t out_stride, Workspace& ws) const override {
    const int d = head_dim();
    decode_row_tiles(this->rows(), blocks, i0, i1, ws, [&](int64_t a, int64_t n, const float* tile) {
      float_scores(states, n_q, size_t(d), tile, size_t(d), n, d, out + (a - i0), out_stride);
    });
  }
};

template <typename Rows>
class RowValueCodec final : public RowBlockCodec<ValueCodec, Rows> {
 public:
  using RowBlockCodec<ValueCodec, Rows>::RowBlockCodec;
  using RowBlockCodec<ValueCodec, Rows>::head_dim;
  size_t accum_floats() const override { return size_t(head_dim()); }
  void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1,
                  float* acc, Workspace& ws) const override {
    const int d = head_dim();
    decode_row_tiles(this->rows(), blocks, i0, i1, ws, [&](int64_t a, int64_t n, const float* tile) {
      float_accumulate(w + (a - i0), w_stride, n_q, tile, size_t(d), n, d, acc, size_t(d));
    });
  }
  void finalize(const float* acc, int n_q, float* out) const override {
    std::copy_n(acc, size_t(n_q) * head_dim(), out);
  }
};

using TurboKeyCodec = RowKeyCodec<TurboRows>;
using TurboValueCodec = RowValueCodec<TurboRows>;

// Bits per element of a row: the codes plus the fp16 norm.
inline double turbo_row_bits(int d, int code_bits) {
  return 8.0 * double(2 + size_t(code_bits) * plane_bytes(d)) / d;
}

}  // namespace vq::kv
