// SpectralQuant: keys and values coded in their own spectral basis, learned per layer and KV
// head from calibration text, with more bits on the few strong directions than on the rest:
//
//   spectral:hi=4,lo=2[,rank=R][,residual=N,sink=N]
//
// Calibration (`veloxquant calibrate --kv spectral...`): per layer, KV head and side, the mean mu
// of the vectors as the cache receives them (keys after RoPE) and the eigen-decomposition of
// their covariance, C = sum_i sigma_i^2 v_i v_i^T, strongest first (src/kv/calib/spectral_basis.h).
// The layer's signal rank r is the effective dimension of the spectrum, its participation ratio
// (sum lambda)^2 / sum lambda^2, averaged over the layer's KV heads and rounded (or `rank=R`).
//
// Encoding: whitened coordinates z_i = <v_i, x - mu> / sigma_i, so every coordinate has unit
// variance over the calibration text; the r signal coordinates and the d - r noise coordinates
// are each coded like a TurboQuant-MSE row: one fp16 scale per part (the part's norm over the
// reconstruction's, so the part keeps its length), and per coordinate the nearest Lloyd–Max
// level of the coordinate density of a unit vector of the part's size, at `hi` bits for the
// signal part and `lo` for the noise part (lo = 0 drops the noise part: a rank-r code).
// Decoding: x = mu + sum_i sigma_i z_i v_i.
//
// Scores rotate the query into the basis once per step, q'_i = sigma_i <v_i, q>, plus the bias
// <q, mu>; a token's score is then bias + sum_i q'_i z_i, read from its codes a tile at a time.
// Values accumulate attention weight times z (and the weight itself, for the mean) and leave the
// basis once per step in `finalize`.
//
// Choices of this implementation, stated (the method has no reference paper to follow line by
// line): whitening (so a part's one scale and one codebook fit all its coordinates), the
// participation ratio as the effective dimension, one rank per layer (the codecs of a layer's
// heads must agree on block bytes), deviations floored at 1e-3 of the largest, and TurboQuant's
// sphere codebooks for the parts.
//
// Layout: 16 tokens per block, a row per token: the signal part (fp16 scale, hi bit planes of
// ceil(r/8) bytes), then the noise part (fp16 scale, lo bit planes of ceil((d-r)/8) bytes) when
// lo > 0 and r < d. Bits per element: that row's bits over d, so rounding of the planes counts.
// The bases (mean, deviations, d x d vectors per head) are codec parameters, counted in the
// cache's memory. Before calibration fixes r, `methods` reports the bits of r = 0 (the floor).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <vector>

#include "src/core/threads.h"
#include "src/kv/calib/spectral_basis.h"
#include "src/kv/kernels/f16_kernels.h"
#include "src/kv/methods/turbo/turbo_rows.h"
#include "src/kv/registry.h"
#include "src/kv/rope_table.h"
#include "veloxquant/error.h"
#include "veloxquant/kv/calibration.h"

namespace vq::kv {
namespace {

constexpr int kMaxDim = TurboRows::kMaxDim;
constexpr int64_t kMaxSamples = 16384;  // vectors per head and side the basis is learned from

// One head's rows: the basis and the two parts' row codecs.
class SpectralRows {
 public:
  SpectralRows(const SpectralBasis& b, int d, int rank, int hi, int lo)
      : d_(d), r_(rank), mean_(b.mean), sigma_(b.sigma), basis_(b.basis),
        signal_(sphere_rows(std::max(rank, 1), hi, TurboRows::NormMode::kNormMatched)) {
    if (lo > 0 && rank < d) noise_.emplace(sphere_rows(d - rank, lo, TurboRows::NormMode::kNormMatched));
  }
  int head_dim() const { return d_; }
  int rank() const { return r_; }
  size_t row_bytes() const { return (r_ > 0 ? signal_.row_bytes() : 0) + (noise_ ? noise_->row_bytes() : 0); }
  size_t param_bytes() const {
    return (mean_.size() + sigma_.size() + basis_.size()) * sizeof(float) + signal_.param_bytes() +
           (noise_ ? noise_->param_bytes() : 0);
  }

  void encode(const float* x, uint8_t* row) const {
    float z[kMaxDim];
    for (int i = 0; i < d_; ++i) {
      const float* v = basis_.data() + size_t(i) * d_;
      double s = 0;
      for (int j = 0; j < d_; ++j) s += double(v[j]) * (double(x[j]) - mean_[size_t(j)]);
      z[i] = float(s / sigma_[size_t(i)]);
    }
    if (r_ > 0) signal_.encode(z, row);
    if (noise_) noise_->encode(z + r_, row + (r_ > 0 ? signal_.row_bytes() : 0));
  }
  // The whitened coordinates z of a row.
  void decode_whitened(const uint8_t* row, float* z) const {
    if (r_ > 0) signal_.decode(row, z);
    if (noise_) {
      noise_->decode(row + (r_ > 0 ? signal_.row_bytes() : 0), z + r_);
    } else {
      std::fill(z + r_, z + d_, 0.0f);
    }
  }
  // x = mu + sum_i sigma_i z_i v_i: the plain reference.
  void decode(const uint8_t* row, float* x) const {
    float z[kMaxDim];
    decode_whitened(row, z);
    from_basis(z, 1.0f, x);
  }
  // out = mean_weight * mu + sum_i sigma_i z_i v_i.
  void from_basis(const float* z, float mean_weight, float* out) const {
    for (int j = 0; j < d_; ++j) out[j] = mean_weight * mean_[size_t(j)];
    for (int i = 0; i < d_; ++i) {
      const float c = sigma_[size_t(i)] * z[i];
      if (c == 0.0f) continue;
      const float* v = basis_.data() + size_t(i) * d_;
      for (int j = 0; j < d_; ++j) out[j] += c * v[j];
    }
  }
  // q'_i = sigma_i <v_i, q> (d floats), then <q, mu>.
  void to_basis(const float* q, float* state) const {
    double bias = 0;
    for (int j = 0; j < d_; ++j) bias += double(q[j]) * mean_[size_t(j)];
    for (int i = 0; i < d_; ++i) {
      const float* v = basis_.data() + size_t(i) * d_;
      double s = 0;
      for (int j = 0; j < d_; ++j) s += double(v[j]) * q[j];
      state[i] = float(s * sigma_[size_t(i)]);
    }
    state[d_] = float(bias);
  }

 private:
  int d_, r_;
  std::vector<float> mean_, sigma_, basis_;
  TurboRows signal_;
  std::optional<TurboRows> noise_;
};

// The rows as the fused paths read them: decoded to whitened coordinates.
struct WhitenedRows {
  const SpectralRows& rows;
  int head_dim() const { return rows.head_dim(); }
  size_t row_bytes() const { return rows.row_bytes(); }
  void decode(const uint8_t* row, float* z) const { rows.decode_whitened(row, z); }
};

class SpectralKeyCodec final : public RowBlockCodec<KeyCodec, SpectralRows> {
 public:
  using RowBlockCodec::RowBlockCodec;
  size_t query_state_floats() const override { return size_t(head_dim()) + 1; }
  void prepare_query(const float* q, float* state, Workspace&) const override { rows().to_basis(q, state); }
  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1, float* out,
              size_t out_stride, Workspace& ws) const override {
    const int d = head_dim();
    const size_t S = query_state_floats();
    decode_row_tiles(WhitenedRows{rows()}, blocks, i0, i1, ws, [&](int64_t a, int64_t n, const float* tile) {
      float_scores(states, n_q, S, tile, size_t(d), n, d, out + (a - i0), out_stride);
    });
    for (int r = 0; r < n_q; ++r) {
      const float bias = states[size_t(r) * S + size_t(d)];
      float* o = out + size_t(r) * out_stride;
      for (int64_t i = 0; i < i1 - i0; ++i) o[i] += bias;
    }
  }
};

class SpectralValueCodec final : public RowBlockCodec<ValueCodec, SpectralRows> {
 public:
  using RowBlockCodec::RowBlockCodec;
  // The whitened sum, then the sum of weights (for the mean).
  size_t accum_floats() const override { return size_t(head_dim()) + 1; }
  void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1,
                  float* acc, Workspace& ws) const override {
    const int d = head_dim();
    const size_t A = accum_floats();
    decode_row_tiles(WhitenedRows{rows()}, blocks, i0, i1, ws, [&](int64_t a, int64_t n, const float* tile) {
      float_accumulate(w + (a - i0), w_stride, n_q, tile, size_t(d), n, d, acc, A);
    });
    for (int r = 0; r < n_q; ++r) {
      const float* wr = w + size_t(r) * w_stride;
      float s = 0;
      for (int64_t i = 0; i < i1 - i0; ++i) s += wr[i];
      acc[size_t(r) * A + size_t(d)] += s;
    }
  }
  void finalize(const float* acc, int n_q, float* out) const override {
    const size_t A = accum_floats();
    for (int r = 0; r < n_q; ++r) {
      rows().from_basis(acc + size_t(r) * A, acc[size_t(r) * A + size_t(head_dim())], out + size_t(r) * head_dim());
    }
  }
};

// Bits per element of a row with signal rank r.
double row_bits(int d, int r, int hi, int lo) {
  double bytes = r > 0 ? 2.0 + double(hi) * double(plane_bytes(r)) : 0.0;
  if (lo > 0 && r < d) bytes += 2.0 + double(lo) * double(plane_bytes(d - r));
  return 8.0 * bytes / d;
}

class SpectralMethod final : public WindowedMethod {
 public:
  explicit SpectralMethod(const ParamValues& v)
      : WindowedMethod(v), hi_(param_int(v, "hi")), lo_(param_int(v, "lo")), rank_(param_int(v, "rank")) {
    VQ_CHECK(lo_ <= hi_, fmt::format("spectral: lo={} must not exceed hi={}", lo_, hi_));
  }
  bool needs_calibration() const override { return true; }
  bool per_head_codecs() const override { return true; }
  std::unique_ptr<KeyCodec> key_codec(const CodecContext& ctx) const override {
    return std::make_unique<SpectralKeyCodec>(rows(ctx, 0));
  }
  std::unique_ptr<ValueCodec> value_codec(const CodecContext& ctx) const override {
    return std::make_unique<SpectralValueCodec>(rows(ctx, 1));
  }
  double key_bits(int d) const override { return mean_bits(d, 0); }
  double value_bits(int d) const override { return mean_bits(d, 1); }

  // Bound to a calibration: the layers' ranks fix the bits per element (their mean).
  std::shared_ptr<const MethodImpl> calibrated(const Calibration& c) const override {
    auto m = std::make_shared<SpectralMethod>(*this);
    // One side may be another method's (`k=spectral,v=q8`): its rank is 0, and its bits are never
    // asked of this object.
    for (const LayerCalibration& l : c.layers) {
      VQ_CHECK_DATA(l.key_rank > 0 || l.value_rank > 0,
                    fmt::format("the calibration for '{}' holds no spectral bases", c.spec));
      m->ranks_.push_back({l.key_rank, l.value_rank});
    }
    return m;
  }

  void calibrate_keys(const LayerSamples& smp, LayerCalibration* out) const override {
    VQ_CHECK(smp.positions.size() == size_t(smp.n_tokens), "spectral calibration: samples without positions");
    const RopeTable rope(smp.head_dim, smp.rope);
    learn(smp, smp.keys, [&](int64_t t, float* y) { rope.rotate(y, smp.positions[size_t(t)], false); },
          &out->key_spectral, &out->key_rank);
  }
  void calibrate_values(const LayerSamples& smp, LayerCalibration* out) const override {
    learn(smp, smp.values, [](int64_t, float*) {}, &out->value_spectral, &out->value_rank);
  }

 private:
  static void check_dim(int d) {
    VQ_CHECK(d >= 1 && d <= kMaxDim, fmt::format("spectral: head_dim {} outside [1, {}]", d, kMaxDim));
  }

  SpectralRows rows(const CodecContext& ctx, int side) const {
    const int d = ctx.head_dim;
    check_dim(d);
    VQ_CHECK(ctx.calib != nullptr,
             "spectral needs a calibration: make one with `veloxquant calibrate --kv SPEC` and pass it with --calib FILE");
    const auto& heads = side == 0 ? ctx.calib->key_spectral : ctx.calib->value_spectral;
    const int rank = side == 0 ? ctx.calib->key_rank : ctx.calib->value_rank;
    VQ_CHECK_DATA(ctx.kv_head >= 0 && size_t(ctx.kv_head) < heads.size() && rank >= 1 && rank <= d,
                  fmt::format("the calibration of layer {} has no spectral {} basis for KV head {}", ctx.layer,
                              side == 0 ? "key" : "value", ctx.kv_head));
    const SpectralBasis& b = heads[size_t(ctx.kv_head)];
    VQ_CHECK_DATA(b.mean.size() == size_t(d) && b.sigma.size() == size_t(d) && b.basis.size() == size_t(d) * d,
                  fmt::format("the spectral basis of layer {} does not fit head size {}", ctx.layer, d));
    return SpectralRows(b, d, rank, hi_, lo_);
  }

  double mean_bits(int d, int side) const {
    if (ranks_.empty()) return row_bits(d, rank_ > 0 ? std::min(rank_, d) : 0, hi_, lo_);
    double s = 0;
    for (const auto& r : ranks_) s += row_bits(d, side == 0 ? r.first : r.second, hi_, lo_);
    return s / double(ranks_.size());
  }

  // Per KV head: the basis of (at most kMaxSamples evenly spaced) vectors after fn; the layer's
  // rank from the heads' mean participation ratio, or the spec's.
  template <typename Fn>
  void learn(const LayerSamples& smp, const std::vector<float>& all, Fn fn, std::vector<SpectralBasis>* out,
             int* rank) const {
    const int d = smp.head_dim, H = smp.n_kv_heads;
    check_dim(d);
    const int64_t m = std::min(smp.n_tokens, kMaxSamples);
    VQ_CHECK(m >= 2, "spectral calibration: at least 2 tokens are needed");
    out->assign(size_t(H), {});
    parallel_for(H, [&](int64_t h) {
      std::vector<float> rows(size_t(m) * d);
      for (int64_t i = 0; i < m; ++i) {
        const int64_t t = (i * smp.n_tokens) / m;
        float* y = rows.data() + size_t(i) * d;
        std::copy_n(all.data() + (size_t(t) * H + size_t(h)) * d, d, y);
        fn(t, y);
      }
      (*out)[size_t(h)] = spectral_basis(rows, m, d);
    });
    double pr = 0;
    for (const SpectralBasis& b : *out) pr += participation_ratio(b);
    *rank = rank_ > 0 ? std::min(rank_, d) : std::clamp(int(std::lround(pr / H)), 1, d);
  }

  int hi_, lo_, rank_;
  std::vector<std::pair<int, int>> ranks_;  // per layer (keys, values), once calibrated
};

}  // namespace

const MethodDef& spectral_method() {
  static const MethodDef def{
      {"spectral",
       "SpectralQuant: per-head calibrated eigenbasis, whitened; the strongest directions at more bits than the rest",
       windowed_method_params({
           {"hi", ParamType::kInt, 4, 1, 8, "bits per signal coordinate (the strongest directions)", {}},
           {"lo", ParamType::kInt, 2, 0, 8, "bits per noise coordinate (0: a rank-r code)", {}},
           {"rank", ParamType::kInt, 0, 0, 4096,
            "signal coordinates per vector (0: the spectrum's effective dimension, fixed by calibration)", {}},
       })},
      [](const ParamValues& v) -> std::unique_ptr<MethodImpl> { return std::make_unique<SpectralMethod>(v); }};
  return def;
}

}  // namespace vq::kv
