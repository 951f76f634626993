// The rotary embedding as a pre-RoPE codec needs it: the rotation of a key at any position, and
// its inverse, computed the same way every time so that a fused scoring path and the plain
// decode agree to the last bit.
//
// The angle of pair i at position p is p * theta_i, theta_i = freq_scale * base^(-2i/d) / factor_i
// (factor_i from RopeSpec::freq_factors, else 1). Its cos and sin come from two parts, p = 256 a + b: a table of exact (double, rounded) values for
// b < 256 built once, and exact values for 256 a made the first time segment a is used and kept
// (d floats per 256 positions, counted in bytes()); one complex multiplication in float joins
// them. The result differs from the model's own angle (ggml builds it in float) by about 1e-7
// relative. A scorer can also split the rotation: R(p) = R(256 a) R(b), the first applied to the
// query once per segment, the second to each key straight from the table.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "veloxquant/kv/codec.h"

namespace vq::kv {

class RopeTable {
 public:
  RopeTable(int head_dim, RopeSpec spec);
  bool identity() const { return spec_.style == RopeSpec::Style::kNone; }
  int pairs() const { return half_; }
  // Channel indices of pair i.
  int first(int i) const { return spec_.style == RopeSpec::Style::kNorm ? 2 * i : i; }
  int second(int i) const { return spec_.style == RopeSpec::Style::kNorm ? 2 * i + 1 : i + half_; }

  // cos and sin of the angles of every pair at position pos.
  void angles(int64_t pos, float* cs, float* sn) const;
  // x (head_dim floats) rotated to position pos, or back from it (inverse).
  void rotate(float* x, int64_t pos, bool inverse) const;
  // x rotated by the given angles (cos, sin per pair), or back.
  void rotate_by(float* x, const float* cs, const float* sn, bool inverse) const;

  static constexpr int kSegment = 256;
  // cos then sin (pairs() floats each) of 256 a theta_i, and of b theta_i for b < 256.
  const float* segment(int64_t a) const;
  const float* low(int b) const { return low_.data() + size_t(b) * 2 * half_; }
  // Rows x + r * stride (r < n) rotated by the low-table angles of b0 + r (b0 + n <= 256), each
  // row's bits the same as rotate_by(row, low(b0 + r), ...) gives.
  void rotate_low_rows(float* x, size_t stride, int n, int b0, bool inverse) const;
  // cos_t[i * cols + b] and sin_t[i * cols + b] = cos and sin of b theta_i for b < cols (the low
  // table's values for b < 256, made the same way past it): a pair's angles at consecutive
  // positions side by side, for kernels with tokens in the vector lanes. 1 and 0 without RoPE.
  void angle_columns(int cols, float* cos_t, float* sin_t) const;
  // Bytes held: the low table and the segments made so far.
  size_t bytes() const;

 private:

  int d_, half_;
  RopeSpec spec_;
  uint64_t serial_;
  std::vector<double> theta_;
  std::vector<float> low_;  // [256][cos half_, sin half_]
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<float[]>> segments_;  // by a; arrays never move
  mutable size_t n_segments_ = 0;
};

}  // namespace vq::kv
