// The rotary embedding as a pre-RoPE codec needs it: the rotation of a key at any position, and
// its inverse, computed the same way every time so that a fused scoring path and the plain
// decode agree to the last bit.
//
// The angle of pair i at position p is p * theta_i, theta_i = freq_scale * base^(-2i/d). Its cos
// and sin come from two parts, p = 256 a + b: a table of exact (double, rounded) values for
// b < 256 built once, and exact values for 256 a computed when a run of positions enters a new
// segment of 256 (remembered per thread, so a scan in position order pays 1/256 of a sin and cos
// per pair and token); one complex multiplication in float joins them. The result differs from
// the model's own angle (ggml builds it in float) by about 1e-7 relative.
#pragma once

#include <cstdint>
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
  size_t bytes() const { return low_.size() * sizeof(float); }

 private:

  int d_, half_;
  RopeSpec spec_;
  uint64_t serial_;
  std::vector<double> theta_;
  std::vector<float> low_;  // [256][cos half_, sin half_]
};

}  // namespace vq::kv
