// PolarQuant (Han, Kacham, Karbasi, Mirrokni, Zandieh, "PolarQuant: Quantizing KV Caches with
// Polar Transformation", 2025, https://arxiv.org/abs/2502.02617):
//
//   polar:levels=L,bits1=B1,bits=B[,seed=S]      (defaults L = 4, B1 = 4, B = 2: 3.875 bits at any d)
//
// Each key or value is rotated by a random preconditioner, then put through the recursive polar
// transform: level 1 pairs coordinates (x_2i, x_2i+1) into a radius and an angle; level l > 1
// pairs two level-(l-1) radii (r_a, r_b) into sqrt(r_a^2 + r_b^2) and psi = atan2(r_b, r_a).
// After L levels a vector of d coordinates is d / 2^L radii (fp16) and d - d / 2^L angles.
// After the rotation the angles are independent with known densities (the paper's Lemma 2):
// level-1 angles uniform on the full circle [0, 2 pi); level-l angles on [0, pi/2] with density
// proportional to sin^(2^(l-1) - 1)(2 psi), concentrated around pi/4. Each level's angles are
// coded against the Lloyd–Max codebook of its density: B1 bits at level 1 (uniform cells of the
// circle, the optimal quantizer of a uniform density; the circle is atan2's (-pi, pi] wrapped
// onto [0, 2 pi)), B bits above (src/kv/calib/lloyd_max.h, solved numerically). An angle's code
// is found by comparing the pair against the cell edges, without taking the angle
// (polar_angles.h). No normalization constants are stored: the radii are the only scalars.
//
// Decoding walks the tree down from the radii, multiplying by cos and sin of each level's coded
// angle (tables of 2^B entries; up to 4 bits, held in registers and read a vector of angles at a
// time, polar_kernels.h). Scores rotate the query once per step and read each tile of
// tokens decoded in L1 (as TurboQuant-MSE does); values are accumulated in the rotated space and
// rotated back once.
//
// Deviations: the preconditioner is the randomized Hadamard transform (as for TurboQuant), not a
// dense Gaussian matrix, so head_dim must be a power of two; the codebooks are those of the
// analytic densities (the paper also offers codebooks fitted online per prompt).
//
// Layout: 16 tokens per block, a row per token: the d / 2^L fp16 radii, then each level's codes as
// bit planes (level 1: B1 planes of ceil(d/16) bytes; level l: B planes of ceil(d / 2^(l+3)) bytes).
// Bits per element: (B1 d/2 + B (d/2 - d/2^L) + 16 d/2^L) / d.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "src/core/fp16.h"
#include "src/core/hadamard.h"
#include "src/kv/calib/lloyd_max.h"
#include "src/kv/calib/nuq.h"
#include "src/kv/kernels/lut_kernels.h"
#include "src/kv/methods/polar/polar_angles.h"
#include "src/kv/methods/polar/polar_kernels.h"
#include "src/kv/methods/turbo/turbo_rows.h"
#include "src/kv/registry.h"
#include "src/kv/rotation.h"
#include "veloxquant/error.h"

namespace vq::kv {
namespace {

constexpr int kMaxDim = 4096;

class PolarRows {
 public:
  PolarRows(int d, int levels, int bits1, int bits)
      : d_(d), levels_(levels), bits_(static_cast<size_t>(levels) + 1),
        stride_(std::max(16, 1 << std::max(bits1, bits))) {
    size_t at = 2 * size_t(radii());
    offset_.assign(static_cast<size_t>(levels) + 1, 0);
    cos_.assign(stride_ * size_t(levels), 0.0f);
    sin_.assign(stride_ * size_t(levels), 0.0f);
    for (int l = 1; l <= levels; ++l) {
      const int b = l == 1 ? bits1 : bits;
      bits_[size_t(l)] = b;
      offset_[size_t(l)] = at;
      at += size_t(b) * plane_bytes(angles(l));
      const int k = 1 << b;
      std::vector<float> a(static_cast<size_t>(k));
      if (l == 1) {
        for (int c = 0; c < k; ++c) a[size_t(c)] = float((c + 0.5) * 2 * M_PI / k);
      } else {
        a = lloyd_max_polar_angle(l, b).levels;
      }
      for (int c = 0; c < k; ++c) {
        cos_[stride_ * size_t(l - 1) + size_t(c)] = float(std::cos(double(a[size_t(c)])));
        sin_[stride_ * size_t(l - 1) + size_t(c)] = float(std::sin(double(a[size_t(c)])));
      }
      mids_.push_back(l == 1 ? std::vector<float>{} : level_midpoints(a));
      // What encode compares each angle with (polar_angles.h): level 1's cell boundaries in the
      // first quadrant, the upper levels' midpoints.
      std::vector<polar::Edge> e = l == 1 ? polar::circle_edges(k) : std::vector<polar::Edge>{};
      for (float m : mids_.back()) e.push_back(polar::edge(double(m)));
      edges_.push_back(std::move(e));
    }
    row_ = at;
    tables_ = std::all_of(bits_.begin() + 1, bits_.end(), [](int b) { return b <= polar::kTableBits; });
  }
  int head_dim() const { return d_; }
  size_t row_bytes() const { return row_; }
  size_t param_bytes() const {
    size_t n = 0;
    for (int l = 1; l <= levels_; ++l) {
      n += (2 * (size_t(1) << bits_[size_t(l)]) + mids_[size_t(l) - 1].size()) * sizeof(float) +
           edges_[size_t(l) - 1].size() * sizeof(polar::Edge);
    }
    return n;
  }

  void encode(const float* x, uint8_t* row) const {
    float r[kMaxDim];
    uint8_t codes[kMaxDim / 2];
    std::copy_n(x, d_, r);
    for (int l = 1; l <= levels_; ++l) {
      const int n = angles(l), k = 1 << bits_[size_t(l)];
      const std::vector<polar::Edge>& e = edges_[size_t(l) - 1];
      for (int i = 0; i < n; ++i) {
        const double a = r[2 * i], b = r[2 * i + 1];
        codes[i] = uint8_t(l == 1 ? polar::circle_cell(a, b, k, e) : polar::edges_below(a, b, e));
        r[i] = float(std::sqrt(a * a + b * b));
      }
      pack_planes(codes, n, bits_[size_t(l)], row + offset_[size_t(l)]);
    }
    for (int i = 0; i < radii(); ++i) {
      const uint16_t h = f32_to_f16(std::min(r[i], 65504.0f));
      std::memcpy(row + 2 * size_t(i), &h, 2);
    }
  }

  // The walk of polar_kernels.h: with angles of at most kTableBits bits a vector of angles at a
  // time, otherwise one at a time (the same products either way).
  void decode(const uint8_t* row, float* x) const {
    polar::decode_row(row, d_, levels_, bits_.data(), offset_.data(), cos_.data(), sin_.data(), stride_, tables_, x);
  }

 private:
  int radii() const { return d_ >> levels_; }
  int angles(int level) const { return d_ >> level; }

  int d_, levels_;
  std::vector<int> bits_;
  size_t stride_;  // floats per level in cos_ and sin_ (2^bits used, zero after)
  bool tables_ = false;  // every level's angles fit register tables (polar::kTableBits)
  std::vector<size_t> offset_;
  std::vector<std::vector<float>> mids_;  // per level, from level 1
  std::vector<std::vector<polar::Edge>> edges_;  // per level, from level 1: what encode compares with
  std::vector<float> cos_, sin_;          // per level, from level 1, stride_ floats each
  size_t row_ = 0;
};

class PolarMethod final : public RotatedMethod {
 public:
  explicit PolarMethod(const ParamValues& v)
      : RotatedMethod(v), levels_(param_int(v, "levels")), bits1_(param_int(v, "bits1")), bits_(param_int(v, "bits")) {}
  std::unique_ptr<KeyCodec> key_codec(const CodecContext& ctx) const override {
    check(ctx.head_dim);
    return rotate_keys(std::make_unique<RowKeyCodec<PolarRows>>(PolarRows(ctx.head_dim, levels_, bits1_, bits_)),
                       rotation_seed(ctx.layer, 0));
  }
  std::unique_ptr<ValueCodec> value_codec(const CodecContext& ctx) const override {
    check(ctx.head_dim);
    return rotate_values(std::make_unique<RowValueCodec<PolarRows>>(PolarRows(ctx.head_dim, levels_, bits1_, bits_)),
                         rotation_seed(ctx.layer, 1));
  }
  double key_bits(int d) const override { return row_bits(d); }
  double value_bits(int d) const override { return row_bits(d); }

 private:
  double row_bits(int d) const {
    size_t bytes = 2 * size_t(d >> levels_);
    for (int l = 1; l <= levels_; ++l) bytes += size_t(l == 1 ? bits1_ : bits_) * plane_bytes(d >> l);
    return 8.0 * double(bytes) / d;
  }
  void check(int d) const {
    check_hadamard_dim("polar", d, 4);
    VQ_CHECK((d >> levels_) >= 1,
             fmt::format("polar: levels={} needs head_dim of at least 2^{}, got {}", levels_, levels_, d));
  }
  int levels_, bits1_, bits_;
};

}  // namespace

const MethodDef& polar_method() {
  static const MethodDef def{
      {"polar",
       "PolarQuant: randomized Hadamard preconditioning + recursive polar transform, angles coded with the Lloyd-Max "
       "codebooks of their densities, fp16 radii",
       rotated_method_params({
             {"levels", ParamType::kInt, 4, 1, 12, "levels of the polar recursion (d / 2^levels fp16 radii)", {}},
             {"bits1", ParamType::kInt, 4, 1, 8, "bits of a level-1 angle (full circle)", {}},
             {"bits", ParamType::kInt, 2, 1, 8, "bits of an angle at levels 2 and above", {}},
         })},
      [](const ParamValues& v) -> std::unique_ptr<MethodImpl> { return std::make_unique<PolarMethod>(v); }};
  return def;
}

}  // namespace vq::kv
