// KVQuant (Hooper et al., "KVQuant: Towards 10 Million Context Length LLM Inference with KV Cache
// Quantization", NeurIPS 2024, https://arxiv.org/abs/2401.18079).
//
//   kvquant:bits=3,outliers=0.01,sink=1[,weighted=1][,qnorm=auto][,residual=N]
//
// Keys are quantized per channel before RoPE: the codec takes the model's (rotated) keys, turns
// each back to its pre-RoPE form, and applies the rotation again, by position, when it scores.
// Each channel is normalized to [-1, 1] with a range calibrated offline (mid and half-width from
// the calibration's per-channel thresholds), so every token is quantized on its own and no fp16
// window is needed. Values are quantized per token with a range computed online from the token
// itself. Both use nuqB: a per-layer datatype of 2^B levels learned offline by sensitivity-
// weighted k-means on normalized calibration activations (src/kv/calib/nuq.h).
//
// Dense-and-sparse: per vector, the values outside the thresholds (per channel for keys,
// calibrated at the outliers/2 and 1 - outliers/2 quantiles; per token for values, the
// round(outliers * d) values whose removal shrinks the token's range most) are kept in fp16 with
// their channel index, and the rest is normalized and quantized. Q-Norm (qnorm=auto:
// at 2 bits, as the paper uses it) rescales the levels so that dequantized calibration data keeps
// its mean and standard deviation. The first `sink` tokens stay fp16.
//
// residual=N (default 0, not in the paper: KIVI's fp16 residual window) keeps the N newest tokens
// in fp16 as well; they are quantized as they leave the window. KVQuant itself needs no window
// (every token is quantized on its own); the window trades its fp16 bytes for the error of the
// tokens that attention weighs most, as in KIVI.
//
// Deliberate deviations, each for a stated reason:
// - Sensitivity is not Fisher information (this engine has no backward pass): keys are weighted
//   by the mean square of the RoPE-aligned queries that meet their channel, values by the sum
//   of their squared attention weights (calibration.h), each times the square of the vector's
//   normalization scale, so the k-means objective is the error in attention's own units.
//   weighted=0 gives the unweighted datatype for comparison.
// - Outliers sit in a fixed number of slots per token, S = round(outliers * d), with a count byte
//   for keys, instead of CSC/CSR arrays: blocks have a fixed size in this cache. A slot holds the
//   value minus its dense decode (the clipped code's level), so dense + sparse is the value (to
//   fp16 on the difference); the fused paths add it without decoding the dense code. Values always
//   fill their S slots. A key token with more than S out-of-range channels keeps the S farthest
//   out; the others are clipped to the range.
// - Key ranges are per channel of the layer, pooled over its KV heads (codecs are shared by the
//   heads of a layer). Gemma 3 270M has one KV head, so there it is exactly the paper's.
//
// Layouts (16 tokens per block): tokens in the vector lanes where the head size allows
// (kvquant_lanes.cpp), else a row per token (kvquant_codecs.cpp):
//   key:   codes (B bit planes of ceil(d/8) bytes) | count (1) | S fp16 values | S channel indices (1 or 2 bytes)
//   value: fp16 scale | fp16 zero | codes | S fp16 values | S channel indices
// Both store those bytes per token. Bits per element are 8 * row bytes / d: everything stored per
// token counts. The per-layer
// ranges, levels and the RoPE table are the codec's parameter bytes.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "src/kv/calib/nuq.h"
#include "src/kv/methods/kvquant/kvquant_rows.h"
#include "src/kv/registry.h"
#include "veloxquant/error.h"
#include "veloxquant/kv/calibration.h"

namespace vq::kv {
namespace {

using kvquant::Settings;
using kvquant::TokenSplit;

void check_calibration(const CodecContext& ctx, const Settings& s, bool keys) {
  VQ_CHECK(ctx.calib != nullptr,
           "kvquant needs a calibration: make one with `veloxquant calibrate --kv SPEC` and pass it with --calib FILE");
  const LayerCalibration& c = *ctx.calib;
  const size_t levels = size_t(1) << s.bits;
  VQ_CHECK_DATA((keys ? c.key_levels : c.value_levels).size() == levels,
                fmt::format("the calibration of layer {} has {} {} levels, kvquant:bits={} needs {}", ctx.layer,
                            (keys ? c.key_levels : c.value_levels).size(), keys ? "key" : "value", s.bits, levels));
  if (keys) {
    VQ_CHECK_DATA(int(c.key_lo.size()) == ctx.head_dim && int(c.key_hi.size()) == ctx.head_dim,
                  fmt::format("the calibration of layer {} has no key ranges for head size {}", ctx.layer, ctx.head_dim));
  }
}

// ---- Calibration -------------------------------------------------------------------------------

constexpr size_t kMaxSamples = size_t(1) << 22;  // per layer and side; beyond, a strided subset

std::vector<float> learn_levels(std::vector<WeightedSample>& samples, const Settings& s) {
  VQ_CHECK(!samples.empty(), "kvquant calibration: no samples");
  if (samples.size() > kMaxSamples) {  // a deterministic, evenly strided subset
    const size_t step = (samples.size() + kMaxSamples - 1) / kMaxSamples;
    size_t k = 0;
    for (size_t i = 0; i < samples.size(); i += step) samples[k++] = samples[i];
    samples.resize(k);
  }
  std::vector<WeightedSample> copy = samples;
  std::vector<float> levels = weighted_kmeans_1d(copy, 1 << s.bits);
  if (s.qnorm) levels = qnorm_levels(levels, samples);
  return levels;
}

class KvquantMethod final : public MethodImpl {
 public:
  explicit KvquantMethod(const ParamValues& v) : sinks_(param_int(v, "sink")), residual_(param_int(v, "residual")) {
    s_.bits = param_int(v, "bits");
    s_.outliers = param_float(v, "outliers");
    s_.weighted = param_bool(v, "weighted");
    const int q = param_int(v, "qnorm");  // auto, off, on
    s_.qnorm = q == 2 || (q == 0 && s_.bits == 2);
  }
  std::unique_ptr<KeyCodec> key_codec(const CodecContext& ctx) const override {
    check_dim(ctx.head_dim);
    check_calibration(ctx, s_, true);
    return kvquant::make_key_codec(ctx, s_);
  }
  std::unique_ptr<ValueCodec> value_codec(const CodecContext& ctx) const override {
    check_dim(ctx.head_dim);
    check_calibration(ctx, s_, false);
    return kvquant::make_value_codec(ctx, s_);
  }
  double key_bits(int d) const override { return 8.0 * double(kvquant::key_row_bytes(d, s_)) / d; }
  double value_bits(int d) const override { return 8.0 * double(kvquant::value_row_bytes(d, s_)) / d; }
  int key_keep() const override { return residual_; }
  int value_keep() const override { return residual_; }
  int sink_tokens() const override { return sinks_; }
  bool needs_calibration() const override { return true; }

  // Per channel (pooled over heads): thresholds at the outliers/2 and 1 - outliers/2 quantiles
  // (min and max without outliers); then the datatype from the normalized inliers, each weighted
  // by its channel's query second moment times the channel's half-width squared.
  void calibrate_keys(const LayerSamples& smp, LayerCalibration* out) const override {
    const int d = smp.head_dim;
    const size_t per_channel = size_t(smp.n_tokens) * size_t(smp.n_kv_heads);
    VQ_CHECK(per_channel > 0, "kvquant calibration: no tokens");
    out->head_dim = d;
    out->key_lo.assign(size_t(d), 0.0f);
    out->key_hi.assign(size_t(d), 0.0f);
    std::vector<WeightedSample> samples;
    std::vector<float> col(per_channel);
    for (int c = 0; c < d; ++c) {
      for (size_t i = 0; i < per_channel; ++i) col[i] = smp.keys[i * size_t(d) + size_t(c)];
      std::sort(col.begin(), col.end());
      const double f = 0.5 * s_.outliers;
      const size_t lo_i = std::min(per_channel - 1, size_t(std::floor(f * double(per_channel - 1))));
      const size_t hi_i = std::max(lo_i, per_channel - 1 - lo_i);
      // Stored ranges stay inside fp16 (the checked file refuses others).
      const float lo = std::clamp(col[lo_i], -65504.0f, 65504.0f), hi = std::clamp(col[hi_i], -65504.0f, 65504.0f);
      out->key_lo[size_t(c)] = lo;
      out->key_hi[size_t(c)] = hi;
      const float m = 0.5f * (lo + hi), h = 0.5f * (hi - lo);
      if (!(h > 0.0f)) continue;
      const double w = s_.weighted ? smp.key_channel_weight[size_t(c)] * double(h) * double(h) : 1.0;
      for (size_t i = lo_i; i <= hi_i; ++i) samples.push_back({(col[i] - m) / h, float(w)});
    }
    if (samples.empty()) samples.push_back({0.0f, 1.0f});
    out->key_levels = learn_levels(samples, s_);
  }

  // Per token: the outliers split off and the rest normalized as the codec does; weighted by the
  // token's attention weight (squared, summed over queries) times its scale squared.
  void calibrate_values(const LayerSamples& smp, LayerCalibration* out) const override {
    const int d = smp.head_dim, S = kvquant::outlier_slots(s_.outliers, d);
    out->head_dim = d;
    std::vector<WeightedSample> samples;
    std::vector<int> order;
    const size_t rows = size_t(smp.n_tokens) * size_t(smp.n_kv_heads);
    for (size_t r = 0; r < rows; ++r) {
      const float* x = smp.values.data() + r * size_t(d);
      const TokenSplit sp = kvquant::split_token(x, d, S, &order);
      const float scale = f16_to_f32(kvquant::to_f16(0.5f * (sp.hi - sp.lo)));
      const float zero = f16_to_f32(kvquant::to_f16(0.5f * (sp.hi + sp.lo)));
      if (!(scale > 0.0f)) continue;
      const double w = s_.weighted ? smp.value_token_weight[r] * double(scale) * double(scale) : 1.0;
      for (int j = sp.n_low; j < d - (S - sp.n_low); ++j) samples.push_back({(x[order[size_t(j)]] - zero) / scale, float(w)});
    }
    if (samples.empty()) samples.push_back({0.0f, 1.0f});
    out->value_levels = learn_levels(samples, s_);
  }

 private:
  static void check_dim(int d) {
    VQ_CHECK(d >= 2 && d <= kvquant::kMaxHeadDim, fmt::format("kvquant: head_dim {} outside [2, {}]", d, kvquant::kMaxHeadDim));
  }
  Settings s_;
  int sinks_, residual_;
};

}  // namespace

const MethodDef& kvquant_method() {
  static const MethodDef def{
      {"kvquant",
       "KVQuant: pre-RoPE per-channel keys, per-token values, calibrated nuq datatypes, dense-and-sparse outliers",
       {
           {"bits", ParamType::kInt, 3, 2, 4, "bits per code (the nuq datatype has 2^bits levels)", {}},
           {"outliers", ParamType::kFloat, 0.01, 0.0, 0.1, "fraction of each vector kept as fp16 sparse values (+ index)", {}},
           {"sink", ParamType::kInt, 1, 0, 1 << 16, "leading tokens kept in fp16 (attention sinks)", {}},
           {"weighted", ParamType::kBool, 1, 0, 1, "sensitivity-weighted k-means (0: unweighted)", {}},
           {"qnorm", ParamType::kChoice, 0, 0, 2, "Q-Norm of the levels (auto: at 2 bits)", {"auto", "off", "on"}},
           {"residual", ParamType::kInt, 0, 0, 1 << 20, "newest tokens kept in fp16 (KIVI's window; not in the paper)", {}},
       }},
      [](const ParamValues& v) -> std::unique_ptr<MethodImpl> { return std::make_unique<KvquantMethod>(v); }};
  return def;
}

}  // namespace vq::kv
