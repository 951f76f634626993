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
// Deviations: the paper's rotation is a dense random orthogonal matrix; the randomized Hadamard
// transform is used instead (O(d log d), the same as llama.cpp's rotated caches), so head_dim must
// be a power of two (others are refused). The fractional settings (2.5 and 3.5 bits with outlier
// channels at one bit more) are not implemented.
//
// Layout: 16 tokens per block, a row per token: fp16 norm, then the codes as B bit planes of
// ceil(d/8) bytes. Bits per element: B + 16/d (the norm counts).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "src/core/fp16.h"
#include "src/core/hadamard.h"
#include "src/kv/calib/lloyd_max.h"
#include "src/kv/calib/nuq.h"
#include "src/kv/decode_tiles.h"
#include "src/kv/f16_kernels.h"
#include "src/kv/lut_kernels.h"
#include "src/kv/registry.h"
#include "src/kv/rotation.h"
#include "veloxquant/error.h"

namespace vq::kv {
namespace {

constexpr int kBlockTokens = 16;

// The per-token part shared by keys and values: norm and Lloyd–Max codes of the (already
// rotated) vector.
class TurboRows {
 public:
  TurboRows(int d, int bits)
      : d_(d), bits_(bits), levels_(lloyd_max_sphere(d, bits).levels), mids_(level_midpoints(levels_)),
        row_(2 + size_t(bits) * plane_bytes(d)) {}
  size_t row_bytes() const { return row_; }

  void encode(const float* x, uint8_t* row) const {
    double ss = 0;
    for (int j = 0; j < d_; ++j) ss += double(x[j]) * x[j];
    const float norm = float(std::sqrt(ss));
    const uint16_t h = f32_to_f16(std::min(norm, 65504.0f));
    std::memcpy(row, &h, 2);
    uint8_t codes[4096];
    const float inv = norm > 0.0f ? 1.0f / norm : 0.0f;
    for (int j = 0; j < d_; ++j) codes[j] = uint8_t(nearest_level(mids_.data(), int(mids_.size()), x[j] * inv));
    pack_planes(codes, d_, bits_, row + 2);
  }
  void decode(const uint8_t* row, float* x) const {
    uint16_t h;
    std::memcpy(&h, row, 2);
    lut_affine_planes(row + 2, d_, bits_, levels_.data(), 0.0f, f16_to_f32(h), x);
  }
  // Tokens [i0, i1) of a run of blocks decoded a tile at a time (decode_tiles.h), handed to fn.
  template <typename Fn>
  void tiles(const uint8_t* blocks, int64_t i0, int64_t i1, Fn fn) const {
    decode_tiles(
        i0, i1, d_,
        [&](int64_t i, float* x) {
          decode(blocks + size_t(i / kBlockTokens) * kBlockTokens * row_ + size_t(i % kBlockTokens) * row_, x);
        },
        fn);
  }
  size_t param_bytes() const { return (levels_.size() + mids_.size()) * sizeof(float); }

 private:
  int d_, bits_;
  std::vector<float> levels_, mids_;
  size_t row_;
};

class TurboKeyCodec final : public KeyCodec {
 public:
  TurboKeyCodec(int d, int bits) : d_(d), rows_(d, bits) {}
  int head_dim() const override { return d_; }
  int block_tokens() const override { return kBlockTokens; }
  size_t block_bytes() const override { return kBlockTokens * rows_.row_bytes(); }
  size_t param_bytes() const override { return rows_.param_bytes(); }
  void encode(const float* keys, int64_t, uint8_t* block) const override {
    for (int t = 0; t < kBlockTokens; ++t) rows_.encode(keys + size_t(t) * d_, block + size_t(t) * rows_.row_bytes());
  }
  bool encodes_single_tokens() const override { return true; }
  void encode_token(const float* key, int64_t, int slot, uint8_t* block) const override {
    rows_.encode(key, block + size_t(slot) * rows_.row_bytes());
  }
  void decode(const uint8_t* block, int64_t, float* keys) const override {
    for (int t = 0; t < kBlockTokens; ++t) rows_.decode(block + size_t(t) * rows_.row_bytes(), keys + size_t(t) * d_);
  }
  size_t query_state_floats() const override { return size_t(d_); }
  void prepare_query(const float* q, float* state) const override { std::copy_n(q, d_, state); }
  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1, float* out,
              size_t out_stride) const override {
    rows_.tiles(blocks, i0, i1, [&](int64_t a, int64_t n, const float* tile) {
      float_scores(states, n_q, size_t(d_), tile, size_t(d_), n, d_, out + (a - i0), out_stride);
    });
  }

 private:
  int d_;
  TurboRows rows_;
};

class TurboValueCodec final : public ValueCodec {
 public:
  TurboValueCodec(int d, int bits) : d_(d), rows_(d, bits) {}
  int head_dim() const override { return d_; }
  int block_tokens() const override { return kBlockTokens; }
  size_t block_bytes() const override { return kBlockTokens * rows_.row_bytes(); }
  size_t param_bytes() const override { return rows_.param_bytes(); }
  void encode(const float* values, int64_t, uint8_t* block) const override {
    for (int t = 0; t < kBlockTokens; ++t) rows_.encode(values + size_t(t) * d_, block + size_t(t) * rows_.row_bytes());
  }
  bool encodes_single_tokens() const override { return true; }
  void encode_token(const float* value, int64_t, int slot, uint8_t* block) const override {
    rows_.encode(value, block + size_t(slot) * rows_.row_bytes());
  }
  void decode(const uint8_t* block, int64_t, float* values) const override {
    for (int t = 0; t < kBlockTokens; ++t) rows_.decode(block + size_t(t) * rows_.row_bytes(), values + size_t(t) * d_);
  }
  size_t accum_floats() const override { return size_t(d_); }
  void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1,
                  float* acc) const override {
    rows_.tiles(blocks, i0, i1, [&](int64_t a, int64_t n, const float* tile) {
      float_accumulate(w + (a - i0), w_stride, n_q, tile, size_t(d_), n, d_, acc, size_t(d_));
    });
  }
  void finalize(const float* acc, int n_q, float* out) const override { std::copy_n(acc, size_t(n_q) * d_, out); }

 private:
  int d_;
  TurboRows rows_;
};

class TurboMethod final : public MethodImpl {
 public:
  explicit TurboMethod(const ParamValues& v)
      : bits_(param_int(v, "bits")), seed_(uint64_t(param_int(v, "seed"))), residual_(param_int(v, "residual")),
        sink_(param_int(v, "sink")) {}
  std::unique_ptr<KeyCodec> key_codec(const CodecContext& ctx) const override {
    check(ctx.head_dim);
    return rotate_keys(std::make_unique<TurboKeyCodec>(ctx.head_dim, bits_), layer_seed(seed_, ctx.layer, 0));
  }
  std::unique_ptr<ValueCodec> value_codec(const CodecContext& ctx) const override {
    check(ctx.head_dim);
    return rotate_values(std::make_unique<TurboValueCodec>(ctx.head_dim, bits_), layer_seed(seed_, ctx.layer, 1));
  }
  double key_bits(int d) const override { return bits(d); }
  double value_bits(int d) const override { return bits(d); }
  int key_keep() const override { return residual_; }
  int value_keep() const override { return residual_; }
  int sink_tokens() const override { return sink_; }

 private:
  double bits(int d) const { return 8.0 * double(2 + size_t(bits_) * plane_bytes(d)) / d; }
  static void check(int d) {
    VQ_CHECK(d >= 4 && d <= 4096 && is_power_of_two(size_t(d)),
             fmt::format("turbo: head_dim must be a power of two in [4, 4096] (the rotation is a Hadamard "
                         "transform), got {}",
                         d));
  }
  int bits_;
  uint64_t seed_;
  int residual_, sink_;
};

}  // namespace

const MethodDef& turbo_method() {
  static const MethodDef def{
      {"turbo",
       "TurboQuant-MSE: norm + randomized Hadamard rotation + Lloyd-Max codes of the sphere's coordinate density",
       [] {
         std::vector<ParamInfo> p = {{"bits", ParamType::kInt, 3, 1, 4, "bits per coordinate", {}}};
         for (auto& x : rotation_params()) {
           if (x.name == "seed") p.push_back(x);
         }
         for (auto& x : window_params()) p.push_back(x);
         return p;
       }()},
      [](const ParamValues& v) -> std::unique_ptr<MethodImpl> { return std::make_unique<TurboMethod>(v); }};
  return def;
}

}  // namespace vq::kv
