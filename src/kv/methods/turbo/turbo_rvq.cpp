// TurboQuant-RVQ: TurboQuant's normalization and rotation followed by two residual scalar stages
// with analytical codebooks, no calibration:
//
//   turbo-rvq:bits=B[,seed=S]
//
// After the randomized Hadamard rotation each coordinate of the unit direction u is close to
// N(0, 1/d). With z = sqrt(d) u_j (unit variance):
//   stage 1: c1 = the nearest of the 2^B Lloyd–Max levels g of the unit Gaussian
//            (B = 1: the two-level sign quantizer +-0.798 = +-sqrt(2/pi));
//   stage 2: the residual e = z - g[c1], divided by sqrt(D1) (D1: stage 1's distortion, the
//            residual's expected square) so that it has unit variance, is coded as the nearest of
//            the 2^B Lloyd–Max levels l of the unit Laplace density (the residual of a
//            Gaussian quantizer is peaked at zero with heavier tails than a Gaussian).
// Reconstruction: u_hat_j = (g[c1] + sqrt(D1) l[c2]) / sqrt(d). Both codebooks are solved by this
// project's Lloyd–Max solver (src/kv/calib/lloyd_max.h).
//
// "B-bit RVQ" spends B bits in each stage: 2B bits per coordinate, and the fp16 norm. The two
// codes are stored as one 2B-bit code c1 | c2 << B, and the 2^(2B) sums of levels form one
// table, so scoring and accumulation are TurboQuant-MSE's with a larger table (turbo_rows.h):
// the query is rotated once per step, values are accumulated in the rotated space and rotated
// back once.
//
// Deviations: as for TurboQuant-MSE, the rotation is the randomized Hadamard transform for
// power-of-two head dims (the dense random rotation for others). Encoding is greedy (stage 1, then stage 2 on its residual),
// as residual quantization is; no joint search over the pair of codes.
//
// Layout: TurboQuant-MSE's with 2B code bits: 16 tokens per block, per token an fp16 norm and
// 2B bits per coordinate; with tokens in lanes (turbo_lanes.h) at 2B <= 4 and head_dim % 32 == 0,
// a row per token (2B planes of ceil(d/8) bytes) otherwise. Bits per element: 2B + 16/d.
#include <fmt/format.h>

#include <cmath>
#include <memory>
#include <vector>

#include "src/core/hadamard.h"
#include "src/kv/calib/lloyd_max.h"
#include "src/kv/calib/nuq.h"
#include "src/kv/methods/turbo/turbo_lanes.h"
#include "src/kv/methods/turbo/turbo_rows.h"
#include "src/kv/registry.h"
#include "src/kv/rotation.h"
#include "veloxquant/error.h"

namespace vq::kv {
namespace {

TurboRows rvq_rows(int d, int bits) {
  const LloydMax& gauss = lloyd_max_gaussian(bits);
  const LloydMax& laplace = lloyd_max_laplace(bits);
  const int k = 1 << bits;
  const double sd = 1.0 / std::sqrt(double(d));
  const double stage2 = std::sqrt(gauss.coordinate_mse);
  // Midpoints in the units the codes are searched in: stage 1 on u directly (levels times sd),
  // stage 2 on the residual in units of sd * sqrt(D1).
  std::vector<float> g(static_cast<size_t>(k)), l(static_cast<size_t>(k));
  for (int c = 0; c < k; ++c) {
    g[size_t(c)] = float(gauss.levels[size_t(c)] * sd);
    l[size_t(c)] = float(laplace.levels[size_t(c)]);
  }
  std::vector<float> mids1 = level_midpoints(g), mids2 = level_midpoints(l);
  std::vector<float> table(static_cast<size_t>(k) * k);
  for (int c2 = 0; c2 < k; ++c2) {
    for (int c1 = 0; c1 < k; ++c1) {
      table[size_t(c2) * k + c1] = float((gauss.levels[size_t(c1)] + stage2 * laplace.levels[size_t(c2)]) * sd);
    }
  }
  const size_t param_bytes = (table.size() + g.size() + mids1.size() + mids2.size()) * sizeof(float);
  const float inv_step2 = float(1.0 / (stage2 * sd));
  return TurboRows(
      d, 2 * bits, std::move(table),
      [=, g = std::move(g), mids1 = std::move(mids1), mids2 = std::move(mids2)](const float* u, uint8_t* codes) {
        for (int j = 0; j < d; ++j) {
          const int c1 = nearest_level(mids1.data(), int(mids1.size()), u[j]);
          const int c2 = nearest_level(mids2.data(), int(mids2.size()), (u[j] - g[size_t(c1)]) * inv_step2);
          codes[j] = uint8_t(c1 | c2 << bits);
        }
      },
      param_bytes);
}

class TurboRvqMethod final : public RotatedMethod {
 public:
  explicit TurboRvqMethod(const ParamValues& v)
      : RotatedMethod(v), bits_(param_int(v, "bits")) {}
  std::unique_ptr<KeyCodec> key_codec(const CodecContext& ctx) const override {
    check_rotation_dim("turbo-rvq", ctx.head_dim);
    return rotate_keys(make_turbo_key_codec(rvq_rows(ctx.head_dim, bits_)), rotation_seed(ctx.layer, 0));
  }
  std::unique_ptr<ValueCodec> value_codec(const CodecContext& ctx) const override {
    check_rotation_dim("turbo-rvq", ctx.head_dim);
    return rotate_values(make_turbo_value_codec(rvq_rows(ctx.head_dim, bits_)),
                         rotation_seed(ctx.layer, 1));
  }
  double key_bits(int d) const override { return turbo_row_bits(d, 2 * bits_); }
  double value_bits(int d) const override { return turbo_row_bits(d, 2 * bits_); }

 private:
  int bits_;
};

}  // namespace

const MethodDef& turbo_rvq_method() {
  static const MethodDef def{
      {"turbo-rvq",
       "TurboQuant-RVQ: norm + randomized Hadamard rotation + a Gaussian then a Laplacian Lloyd-Max stage on the "
       "residual (2*bits bits per coordinate)",
       rotated_method_params({{"bits", ParamType::kInt, 2, 1, 4, "bits per stage (two stages)", {}}})},
      [](const ParamValues& v) -> std::unique_ptr<MethodImpl> { return std::make_unique<TurboRvqMethod>(v); }};
  return def;
}

}  // namespace vq::kv
