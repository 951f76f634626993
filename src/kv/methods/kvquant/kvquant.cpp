// KVQuant (Hooper et al., "KVQuant: Towards 10 Million Context Length LLM Inference with KV Cache
// Quantization", NeurIPS 2024, https://arxiv.org/abs/2401.18079).
//
//   kvquant:bits=3,outliers=0.01,sink=1[,weighted=1][,qnorm=auto]
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
// round(outliers * d) values whose removal shrinks the token's range most) are kept exactly
// (fp16) with their channel index, and the rest is normalized and quantized. Q-Norm (qnorm=auto:
// at 2 bits, as the paper uses it) rescales the levels so that dequantized calibration data keeps
// its mean and standard deviation. The first `sink` tokens stay fp16.
//
// Deliberate deviations, each for a stated reason:
// - Sensitivity is not Fisher information (this engine has no backward pass): keys are weighted
//   by the mean square of the RoPE-aligned queries that meet their channel, values by the sum
//   of their squared attention weights (calibration.h), each times the square of the vector's
//   normalization scale, so the k-means objective is the error in attention's own units.
//   weighted=0 gives the unweighted datatype for comparison.
// - Outliers sit in a fixed number of slots per token, S = round(outliers * d), with a count byte
//   for keys, instead of CSC/CSR arrays: blocks have a fixed size in this cache. Values always
//   fill their S slots. A key token with more than S out-of-range channels keeps the S farthest
//   out; the others are clipped to the range.
// - Key ranges are per channel of the layer, pooled over its KV heads (codecs are shared by the
//   heads of a layer). Gemma 3 270M has one KV head, so there it is exactly the paper's.
//
// Row layouts (16 tokens per block, a row per token):
//   key:   codes (B bit planes of ceil(d/8) bytes) | count (1) | S fp16 values | S channel indices (1 or 2 bytes)
//   value: fp16 scale | fp16 zero | codes | S fp16 values | S channel indices
// Bits per element are 8 * row bytes / d: everything stored per token counts. The per-layer
// ranges, levels and the RoPE table are the codec's parameter bytes.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "src/core/fp16.h"
#include "src/kv/calib/nuq.h"
#include "src/kv/kernels/f16_kernels.h"
#include "src/kv/kernels/lut_kernels.h"
#include "src/kv/registry.h"
#include "src/kv/rope_table.h"
#include "veloxquant/error.h"
#include "veloxquant/kv/calibration.h"

namespace vq::kv {
namespace {

constexpr int kBlockTokens = 16;
constexpr int kRun = 16;  // rows per step of the fused paths: decoded by one kernel call, 8 KB at d = 128
constexpr int kMaxHeadDim = 4096;

struct Settings {
  int bits = 3;
  double outliers = 0.01;
  bool weighted = true;
  bool qnorm = false;
};

int outlier_slots(double outliers, int d) {
  if (outliers <= 0.0) return 0;
  return std::clamp(int(std::lround(outliers * d)), 1, d / 2);
}
int index_bytes(int d) { return d <= 256 ? 1 : 2; }
size_t code_bytes(int d, int bits) { return size_t(bits) * plane_bytes(d); }  // bit planes
size_t key_row_bytes(int d, const Settings& s) {
  const int S = outlier_slots(s.outliers, d);
  return code_bytes(d, s.bits) + (S > 0 ? 1 + size_t(S) * (2 + index_bytes(d)) : 0);
}
size_t value_row_bytes(int d, const Settings& s) {
  const int S = outlier_slots(s.outliers, d);
  return 4 + code_bytes(d, s.bits) + size_t(S) * (2 + index_bytes(d));
}

void put_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
// fp16 of x, saturated to the largest finite fp16 (an exact outlier must not become infinite).
uint16_t to_f16(float x) { return f32_to_f16(std::clamp(x, -65504.0f, 65504.0f)); }
uint16_t get_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
void put_index(uint8_t* p, int ib, int c) {
  if (ib == 1) {
    *p = uint8_t(c);
  } else {
    put_u16(p, uint16_t(c));
  }
}
int get_index(const uint8_t* p, int ib) { return ib == 1 ? int(*p) : int(get_u16(p)); }

// The outlier slots of one row: S fp16 values then S indices.
struct Sparse {
  uint8_t* values;
  uint8_t* indices;
};

// The first n of a row's S outlier slots (S fp16 values, then S indices of ib bytes) written
// over x; an index outside the head (a damaged cache) is skipped.
void patch_outliers(const uint8_t* slots, int n, int S, int ib, int d, float* x) {
  const uint8_t* idx = slots + 2 * S;
  for (int i = 0; i < n; ++i) {
    const int c = get_index(idx + size_t(i) * ib, ib);
    if (c < d) x[c] = f16_to_f32(get_u16(slots + 2 * i));
  }
}

// Per token: which channels are outliers (removing them shrinks the range most) and the range of
// the rest. `order` receives the channels sorted by value.
struct TokenSplit {
  float lo, hi;
  int n_low;  // the n_low smallest and S - n_low largest values are outliers
};
TokenSplit split_token(const float* x, int d, int S, std::vector<int>* order) {
  order->resize(size_t(d));
  std::iota(order->begin(), order->end(), 0);
  std::stable_sort(order->begin(), order->end(), [x](int a, int b) { return x[a] < x[b]; });
  const auto& o = *order;
  TokenSplit best{x[o[0]], x[o[size_t(d - 1)]], 0};
  float best_range = INFINITY;
  for (int j = 0; j <= S; ++j) {
    const float lo = x[o[size_t(j)]], hi = x[o[size_t(d - 1 - (S - j))]];
    if (hi - lo < best_range) {
      best_range = hi - lo;
      best = {lo, hi, j};
    }
  }
  return best;
}

// Levels and their midpoints for the nearest-level rule.
struct Datatype {
  std::vector<float> levels, mids;
  explicit Datatype(std::vector<float> l) : levels(std::move(l)), mids(level_midpoints(levels)) {}
  uint8_t code(float u) const { return uint8_t(nearest_level(mids.data(), int(mids.size()), u)); }
};

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

class KvqKeyCodec final : public KeyCodec {
 public:
  KvqKeyCodec(const CodecContext& ctx, const Settings& s)
      : d_(ctx.head_dim), s_(s), S_(outlier_slots(s.outliers, d_)), ib_(index_bytes(d_)), cb_(code_bytes(d_, s.bits)),
        row_(key_row_bytes(d_, s)), rope_(d_, ctx.rope), type_(ctx.calib->key_levels) {
    mid_.resize(size_t(d_));
    half_.resize(size_t(d_));
    for (int c = 0; c < d_; ++c) {
      mid_[size_t(c)] = 0.5f * (ctx.calib->key_lo[size_t(c)] + ctx.calib->key_hi[size_t(c)]);
      half_[size_t(c)] = 0.5f * (ctx.calib->key_hi[size_t(c)] - ctx.calib->key_lo[size_t(c)]);
    }
  }
  int head_dim() const override { return d_; }
  int block_tokens() const override { return kBlockTokens; }
  size_t block_bytes() const override { return kBlockTokens * row_; }
  size_t param_bytes() const override {
    return (mid_.size() + half_.size() + type_.levels.size() + type_.mids.size()) * sizeof(float) + rope_.bytes();
  }

  void encode(const float* keys, int64_t pos0, uint8_t* block) const override {
    for (int t = 0; t < kBlockTokens; ++t) encode_token(keys + size_t(t) * d_, pos0 + t, t, block);
  }
  bool encodes_single_tokens() const override { return true; }
  void encode_token(const float* key, int64_t pos, int slot, uint8_t* block) const override {
    uint8_t* row = block + size_t(slot) * row_;
    std::vector<float> pre(key, key + d_);
    rope_.rotate(pre.data(), pos, /*inverse=*/true);
    std::vector<uint8_t> codes(static_cast<size_t>(d_));
    std::vector<std::pair<float, int>> out;  // (how far out, channel)
    for (int c = 0; c < d_; ++c) {
      const float m = mid_[size_t(c)], h = half_[size_t(c)], x = pre[size_t(c)];
      const float u = h > 0.0f ? (x - m) / h : 0.0f;
      codes[size_t(c)] = type_.code(u);
      if (S_ > 0 && std::fabs(x - m) > h) out.emplace_back(h > 0.0f ? (std::fabs(x - m) - h) / h : INFINITY, c);
    }
    pack_planes(codes.data(), d_, s_.bits, row);
    if (S_ == 0) return;
    // The S farthest out (ties: lower channel first), stored in channel order.
    std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    if (int(out.size()) > S_) out.resize(size_t(S_));
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
    row[cb_] = uint8_t(out.size());
    const Sparse sp = sparse(row);
    for (int i = 0; i < S_; ++i) {
      const bool used = i < int(out.size());
      put_u16(sp.values + 2 * i, used ? to_f16(pre[size_t(out[size_t(i)].second)]) : 0);
      put_index(sp.indices + size_t(i) * ib_, ib_, used ? out[size_t(i)].second : 0);
    }
  }

  void decode(const uint8_t* block, int64_t pos0, float* keys) const override {
    for (int t = 0; t < kBlockTokens; ++t) decode_row(block + size_t(t) * row_, pos0 + t, keys + size_t(t) * d_);
  }

  size_t query_state_floats() const override { return size_t(d_); }
  void prepare_query(const float* q, float* state) const override { std::copy_n(q, d_, state); }

  // RoPE on the fly from the stored pre-RoPE codes, split as R(p) = R(256 a) R(b): within one
  // segment of 256 positions the query rows are turned back by R(256 a) once, and the tokens are
  // dequantized (levels, ranges, outliers) and turned by R(b) straight from the table into a
  // scratch, then scored by the shared float kernel. No full-length key cache is built;
  // q . R(p) k is the same number as (R(256 a)^T q) . (R(b) k) up to rounding. Rows go kRun at
  // a time (tokens' rows are contiguous across blocks) through all three steps, so the scratch
  // stays in L1; kRun is a multiple of the float kernel's tokens per tile, so tokens are grouped
  // as in one call per segment and the scores have the same bits.
  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t pos0, int64_t i0, int64_t i1, float* out,
              size_t out_stride) const override {
    thread_local std::vector<float> tile, qrot;
    constexpr int64_t kSeg = RopeTable::kSegment;
    tile.resize(size_t(kRun) * d_);
    qrot.resize(size_t(n_q) * d_);
    const int half = d_ / 2;
    for (int64_t a = i0; a < i1;) {
      const int64_t p = pos0 + a;
      const int64_t b = std::min(i1, a + (kSeg - p % kSeg));
      const float* q = states;
      if (!rope_.identity()) {
        const float* hs = rope_.segment(p / kSeg);
        std::copy_n(states, size_t(n_q) * d_, qrot.begin());
        for (int r = 0; r < n_q; ++r) rope_.rotate_by(qrot.data() + size_t(r) * d_, hs, hs + half, /*inverse=*/true);
        q = qrot.data();
      }
      for (int64_t i = a; i < b; i += kRun) {
        const int n = int(std::min<int64_t>(kRun, b - i));
        decode_pre_rows(blocks + size_t(i) * row_, n, tile.data());
        rope_.rotate_low_rows(tile.data(), size_t(d_), n, int((pos0 + i) % kSeg), /*inverse=*/false);
        float_scores(q, n_q, size_t(d_), tile.data(), size_t(d_), n, d_, out + (i - i0), out_stride);
      }
      a = b;
    }
  }

 private:
  Sparse sparse(uint8_t* row) const { return {row + cb_ + 1, row + cb_ + 1 + 2 * S_}; }

  void decode_row(const uint8_t* row, int64_t pos, float* x) const {
    decode_pre(row, x);
    rope_.rotate(x, pos, /*inverse=*/false);
  }

  // The key before RoPE: levels scaled into each channel's range, outliers patched in.
  void decode_pre(const uint8_t* row, float* x) const { decode_pre_rows(row, 1, x); }
  // The same for n consecutive rows (rows + r * row_) into x + r * d.
  void decode_pre_rows(const uint8_t* rows, int n, float* x) const {
    lut_affine_planes_channels_rows(rows, row_, n, d_, s_.bits, type_.levels.data(), mid_.data(), half_.data(), x,
                                    size_t(d_));
    if (S_ == 0) return;
    for (int r = 0; r < n; ++r) {
      const uint8_t* row = rows + size_t(r) * row_;
      patch_outliers(row + cb_ + 1, std::min<int>(row[cb_], S_), S_, ib_, d_, x + size_t(r) * d_);
    }
  }

  int d_;
  Settings s_;
  int S_, ib_;
  size_t cb_, row_;
  RopeTable rope_;
  Datatype type_;
  std::vector<float> mid_, half_;
};

class KvqValueCodec final : public ValueCodec {
 public:
  KvqValueCodec(const CodecContext& ctx, const Settings& s)
      : d_(ctx.head_dim), s_(s), S_(outlier_slots(s.outliers, d_)), ib_(index_bytes(d_)), cb_(code_bytes(d_, s.bits)),
        row_(value_row_bytes(d_, s)), type_(ctx.calib->value_levels) {}
  int head_dim() const override { return d_; }
  int block_tokens() const override { return kBlockTokens; }
  size_t block_bytes() const override { return kBlockTokens * row_; }
  size_t param_bytes() const override { return (type_.levels.size() + type_.mids.size()) * sizeof(float); }

  void encode(const float* values, int64_t pos0, uint8_t* block) const override {
    for (int t = 0; t < kBlockTokens; ++t) encode_token(values + size_t(t) * d_, pos0 + t, t, block);
  }
  bool encodes_single_tokens() const override { return true; }
  void encode_token(const float* x, int64_t, int slot, uint8_t* block) const override {
    uint8_t* row = block + size_t(slot) * row_;
    std::vector<int> order;
    const TokenSplit sp = split_token(x, d_, S_, &order);
    // Stored in fp16; codes are chosen against the stored scale and zero.
    const uint16_t hs = to_f16(0.5f * (sp.hi - sp.lo)), hz = to_f16(0.5f * (sp.hi + sp.lo));
    const float scale = f16_to_f32(hs), zero = f16_to_f32(hz);
    put_u16(row, hs);
    put_u16(row + 2, hz);
    std::vector<uint8_t> codes(static_cast<size_t>(d_));
    for (int c = 0; c < d_; ++c) codes[size_t(c)] = type_.code(scale > 0.0f ? (x[c] - zero) / scale : 0.0f);
    pack_planes(codes.data(), d_, s_.bits, row + 4);
    if (S_ == 0) return;
    std::vector<int> outl;
    for (int j = 0; j < sp.n_low; ++j) outl.push_back(order[size_t(j)]);
    for (int j = 0; j < S_ - sp.n_low; ++j) outl.push_back(order[size_t(d_ - 1 - j)]);
    std::sort(outl.begin(), outl.end());
    uint8_t* vals = row + 4 + cb_;
    uint8_t* idx = vals + 2 * S_;
    for (int i = 0; i < S_; ++i) {
      put_u16(vals + 2 * i, to_f16(x[outl[size_t(i)]]));
      put_index(idx + size_t(i) * ib_, ib_, outl[size_t(i)]);
    }
  }

  void decode(const uint8_t* block, int64_t, float* values) const override {
    for (int t = 0; t < kBlockTokens; ++t) decode_row(block + size_t(t) * row_, values + size_t(t) * d_);
  }

  size_t accum_floats() const override { return size_t(d_); }
  // Tokens are dequantized (levels, scale and zero, outliers) kRun rows at a time into a scratch
  // that stays in L1 and accumulated by the shared float kernel (each accumulator still adds
  // the tokens in order, so the bits are those of one call).
  void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1,
                  float* acc) const override {
    thread_local std::vector<float> tile;
    tile.resize(size_t(kRun) * d_);
    for (int64_t i = i0; i < i1; i += kRun) {
      const int n = int(std::min<int64_t>(kRun, i1 - i));
      decode_rows(blocks + size_t(i) * row_, n, tile.data());
      float_accumulate(w + (i - i0), w_stride, n_q, tile.data(), size_t(d_), n, d_, acc, size_t(d_));
    }
  }
  void finalize(const float* acc, int n_q, float* out) const override { std::copy_n(acc, size_t(n_q) * d_, out); }

 private:
  void decode_row(const uint8_t* row, float* x) const { decode_rows(row, 1, x); }
  // n consecutive rows (rows + r * row_) into x + r * d.
  void decode_rows(const uint8_t* rows, int n, float* x) const {
    float zero[kRun], scale[kRun];
    VQ_CHECK(n <= kRun, "kvquant: more rows than one run");
    for (int r = 0; r < n; ++r) {
      const uint8_t* row = rows + size_t(r) * row_;
      scale[r] = f16_to_f32(get_u16(row));
      zero[r] = f16_to_f32(get_u16(row + 2));
    }
    lut_affine_planes_rows(rows + 4, row_, n, d_, s_.bits, type_.levels.data(), zero, scale, x, size_t(d_));
    for (int r = 0; r < n; ++r) patch_outliers(rows + size_t(r) * row_ + 4 + cb_, S_, S_, ib_, d_, x + size_t(r) * d_);
  }

  int d_;
  Settings s_;
  int S_, ib_;
  size_t cb_, row_;
  Datatype type_;
};

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
  explicit KvquantMethod(const ParamValues& v) : sinks_(param_int(v, "sink")) {
    s_.bits = param_int(v, "bits");
    s_.outliers = param_float(v, "outliers");
    s_.weighted = param_bool(v, "weighted");
    const int q = param_int(v, "qnorm");  // auto, off, on
    s_.qnorm = q == 2 || (q == 0 && s_.bits == 2);
  }
  std::unique_ptr<KeyCodec> key_codec(const CodecContext& ctx) const override {
    check_dim(ctx.head_dim);
    check_calibration(ctx, s_, true);
    return std::make_unique<KvqKeyCodec>(ctx, s_);
  }
  std::unique_ptr<ValueCodec> value_codec(const CodecContext& ctx) const override {
    check_dim(ctx.head_dim);
    check_calibration(ctx, s_, false);
    return std::make_unique<KvqValueCodec>(ctx, s_);
  }
  double key_bits(int d) const override { return 8.0 * double(key_row_bytes(d, s_)) / d; }
  double value_bits(int d) const override { return 8.0 * double(value_row_bytes(d, s_)) / d; }
  int key_keep() const override { return 0; }
  int value_keep() const override { return 0; }
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
    const int d = smp.head_dim, S = outlier_slots(s_.outliers, d);
    out->head_dim = d;
    std::vector<WeightedSample> samples;
    std::vector<int> order;
    const size_t rows = size_t(smp.n_tokens) * size_t(smp.n_kv_heads);
    for (size_t r = 0; r < rows; ++r) {
      const float* x = smp.values.data() + r * size_t(d);
      const TokenSplit sp = split_token(x, d, S, &order);
      const float scale = f16_to_f32(to_f16(0.5f * (sp.hi - sp.lo)));
      const float zero = f16_to_f32(to_f16(0.5f * (sp.hi + sp.lo)));
      if (!(scale > 0.0f)) continue;
      const double w = s_.weighted ? smp.value_token_weight[r] * double(scale) * double(scale) : 1.0;
      for (int j = sp.n_low; j < d - (S - sp.n_low); ++j) samples.push_back({(x[order[size_t(j)]] - zero) / scale, float(w)});
    }
    if (samples.empty()) samples.push_back({0.0f, 1.0f});
    out->value_levels = learn_levels(samples, s_);
  }

 private:
  static void check_dim(int d) {
    VQ_CHECK(d >= 2 && d <= kMaxHeadDim, fmt::format("kvquant: head_dim {} outside [2, {}]", d, kMaxHeadDim));
  }
  Settings s_;
  int sinks_;
};

}  // namespace

const MethodDef& kvquant_method() {
  static const MethodDef def{
      {"kvquant",
       "KVQuant: pre-RoPE per-channel keys, per-token values, calibrated nuq datatypes, dense-and-sparse outliers",
       {
           {"bits", ParamType::kInt, 3, 2, 4, "bits per code (the nuq datatype has 2^bits levels)", {}},
           {"outliers", ParamType::kFloat, 0.01, 0.0, 0.1, "fraction of each vector kept exactly (fp16 + index)", {}},
           {"sink", ParamType::kInt, 1, 0, 1 << 16, "leading tokens kept in fp16 (attention sinks)", {}},
           {"weighted", ParamType::kBool, 1, 0, 1, "sensitivity-weighted k-means (0: unweighted)", {}},
           {"qnorm", ParamType::kChoice, 0, 0, 2, "Q-Norm of the levels (auto: at 2 bits)", {"auto", "off", "on"}},
       }},
      [](const ParamValues& v) -> std::unique_ptr<MethodImpl> { return std::make_unique<KvquantMethod>(v); }};
  return def;
}

}  // namespace vq::kv
