// TurboQuant-MSE (Zandieh et al., "TurboQuant: Online Vector Quantization with Near-optimal
// Distortion Rate", ICLR 2026, https://arxiv.org/abs/2504.19874), the MSE-optimal stage:
//
//   turbo:bits=B[,seed=S]
//
// Each key or value x is split into its norm (fp16) and direction u = x / ||x||; the direction is
// rotated by a randomized Hadamard transform (H D / sqrt(d), D a seeded sign diagonal per layer
// and side), after which every coordinate follows the density of a coordinate of a uniformly
// random unit vector; each coordinate is coded as the nearest of the 2^B Lloyd–Max levels of
// that density (src/kv/calib/lloyd_max.h: solved by this project numerically, cached), nearest by
// counting the midpoints it exceeds. Decoding is ||x|| * Pi^T c[code]. No calibration.
//
// Scores rotate the query once per step (q' = Pi q) and read each token's codes through the
// level table scaled by its norm: q . x_hat = ||x|| sum_j q'_j c[code_j]. Values accumulate in
// the rotated space and are rotated back once per step (the rotation wrappers of rot=1).
//
// norm=length or norm=inner store ||x|| / ||c|| (length kept) or ||x|| / <u, c> (<x, x_hat> =
// ||x||^2) in place of the norm (norm=paper): deviations from the paper, off by default
// (turbo_rows.h). The old spellings norm=0, 1, 2 still parse (a choice's position).
//
// Deviations: the paper's rotation is a dense random orthogonal matrix; for power-of-two head dims
// the randomized Hadamard transform is used instead (O(d log d), the same as llama.cpp's rotated
// caches); other head dims (up to 1024) take the dense matrix (src/core/random_rotation.h).
//
// Fractional settings: outliers=N codes, in each group of `group` tokens, the N channels of
// largest norm at bits + 1 and the rest at bits, each set by its own TurboQuant instance, as the
// paper does for 2.5 and 3.5 bits (turbo_split.cpp; N = head_dim / 2 gives bits + 0.5).
// pick=first, an ablation, takes the first N channels instead of the loudest.
//
// Pieces: channels=N codes each piece of N consecutive channels as its own vector (own rotation,
// own scale, levels for N dimensions), as llama.cpp's turbo cache types do with N = 128: a
// deviation from the paper, off by default (turbo_pieces.h). Bits per element: B + 16 P / d.
//
// Layout: 16 tokens per block with tokens in the vector lanes (turbo_lanes.h; one-bit values as
// per-channel planes of token bits, turbo_sign_lanes.h) when head_dim is a multiple of 32;
// otherwise a row per token: fp16 norm, then the codes as B bit planes of ceil(d/8) bytes. The
// same bytes either way. Bits per element: B + 16/d (the norm counts). With outliers,
// turbo_split.h.
#include <fmt/format.h>

#include <memory>
#include <vector>

#include "src/core/hadamard.h"
#include "src/kv/methods/turbo/turbo_lanes.h"
#include "src/kv/methods/turbo/turbo_pieces.h"
#include "src/kv/methods/turbo/turbo_rows.h"
#include "src/kv/methods/turbo/turbo_split.h"
#include "src/kv/registry.h"
#include "src/kv/rotation.h"
#include "veloxquant/error.h"

namespace vq::kv {
namespace {

class TurboMethod final : public RotatedMethod {
 public:
  explicit TurboMethod(const ParamValues& v)
      : RotatedMethod(v), bits_(param_int(v, "bits")),
        norm_mode_(TurboRows::NormMode(param_int(v, "norm"))), outliers_(param_int(v, "outliers")),
        group_(param_int(v, "group")), pick_by_norm_(param_int(v, "pick") == 0), channels_(param_int(v, "channels")) {
    VQ_CHECK(channels_ == 0 || outliers_ == 0, "turbo: channels and outliers cannot be combined");
  }
  std::unique_ptr<KeyCodec> key_codec(const CodecContext& ctx) const override {
    if (outliers_ > 0) return turbo_split_keys(split_shape(ctx.head_dim), rotation_seed(ctx.layer, 0));
    if (pieces(ctx.head_dim)) return turbo_pieces_keys(pieces_shape(ctx.head_dim), rotation_seed(ctx.layer, 0));
    check_rotation_dim("turbo", ctx.head_dim);
    return rotate_keys(make_turbo_key_codec(sphere_rows(ctx.head_dim, bits_, norm_mode_)), rotation_seed(ctx.layer, 0));
  }
  std::unique_ptr<ValueCodec> value_codec(const CodecContext& ctx) const override {
    if (outliers_ > 0) return turbo_split_values(split_shape(ctx.head_dim), rotation_seed(ctx.layer, 1));
    if (pieces(ctx.head_dim)) return turbo_pieces_values(pieces_shape(ctx.head_dim), rotation_seed(ctx.layer, 1));
    check_rotation_dim("turbo", ctx.head_dim);
    return rotate_values(make_turbo_value_codec(sphere_rows(ctx.head_dim, bits_, norm_mode_)), rotation_seed(ctx.layer, 1));
  }
  double key_bits(int d) const override { return bits(d); }
  double value_bits(int d) const override { return bits(d); }

 private:
  double bits(int d) const {
    if (outliers_ > 0) return turbo_split_bits(split_shape(d));
    if (pieces(d)) return turbo_pieces_bits(pieces_shape(d));
    return turbo_row_bits(d, bits_);
  }
  TurboSplitShape split_shape(int d) const { return {d, outliers_, group_, bits_, norm_mode_, pick_by_norm_}; }
  // channels=0, or as many as the head has, is the whole head as one vector (the paper's).
  bool pieces(int d) const { return channels_ > 0 && channels_ != d; }
  TurboPiecesShape pieces_shape(int d) const { return {d, channels_, bits_, norm_mode_}; }
  int bits_;
  TurboRows::NormMode norm_mode_;
  int outliers_, group_;
  bool pick_by_norm_;
  int channels_;
};

}  // namespace

const MethodDef& turbo_method() {
  static const MethodDef def{
      {"turbo",
       "TurboQuant-MSE: norm + randomized Hadamard rotation + Lloyd-Max codes of the sphere's coordinate density",
       rotated_method_params({{"bits", ParamType::kInt, 3, 1, 4, "bits per coordinate", {}},
                              {"norm", ParamType::kChoice, 0, 0, 2,
                               "stored scale: the norm (paper), norm / |c| (length kept), or norm / <u, c> (inner products unbiased)",
                               {"paper", "length", "inner"}},
                              {"outliers", ParamType::kInt, 0, 0, 4096,
                               "channels per group of tokens coded at bits + 1 by their own instance (head_dim / 2: bits + 0.5)",
                               {}},
                              {"group", ParamType::kInt, 32, 1, 1024, "tokens per choice of outlier channels (with outliers; a multiple of 16)", {}},
                              {"pick", ParamType::kChoice, 0, 0, 1,
                               "outlier channels: the group's largest norms (paper), or the first ones (ablation)",
                               {"norm", "first"}},
                              {"channels", ParamType::kInt, 0, 0, 4096,
                               "channels per piece of the head coded as its own vector, own rotation and scale (0: the whole head; llama.cpp's turbo types: 128)",
                               {}}})},
      [](const ParamValues& v) -> std::unique_ptr<MethodImpl> { return std::make_unique<TurboMethod>(v); }};
  return def;
}

}  // namespace vq::kv
