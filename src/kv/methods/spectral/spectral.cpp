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
// <q, mu>; a token's score is then bias + sum_i q'_i z_i, read from its codes. Values accumulate
// attention weight times z (and the weight itself, for the mean) and leave the basis once per step
// in `finalize`.
//
// Choices of this implementation, stated (the method has no reference paper to follow line by
// line): whitening (so a part's one scale and one codebook fit all its coordinates), the
// participation ratio as the effective dimension, one rank per layer (the codecs of a layer's
// heads must agree on block bytes), deviations floored at 1e-3 of the largest, and TurboQuant's
// sphere codebooks for the parts.
//
// Layout: 16 tokens per block. When both parts fit TurboQuant's token-lane layout (lanes_apply:
// codes of 2 to 4 bits, or 1 bit over a multiple of 32 coordinates), the block is the signal
// part's lane part, then the noise part's (turbo_lanes.h; a part's last n mod 32 coordinates are
// a tail of bytes, lane_words.h), read by the fused lane kernels. Otherwise a row per token: the
// signal part (fp16 scale, hi bit planes of ceil(r/8) bytes), then the noise part (fp16 scale, lo
// bit planes of ceil((d-r)/8) bytes) when lo > 0 and r < d, decoded a tile at a time for the float
// kernels. Bits per element: a token's bytes over d, so rounding counts.
// The bases (mean, deviations, d x d vectors per head) are codec parameters, counted in the
// cache's memory. Before calibration fixes r, `methods` reports the bits of r = 0 (the floor).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "src/core/threads.h"
#include "src/kv/calib/spectral_basis.h"
#include "src/kv/kernels/f16_kernels.h"
#include "src/kv/methods/spectral/spectral_kernels.h"
#include "src/kv/methods/turbo/turbo_lanes.h"
#include "src/kv/methods/turbo/turbo_rows.h"
#include "src/kv/registry.h"
#include "src/kv/rope_table.h"
#include "veloxquant/error.h"
#include "veloxquant/kv/calibration.h"

namespace vq::kv {
namespace {

constexpr int kMaxDim = TurboRows::kMaxDim;
constexpr int64_t kMaxSamples = 16384;  // vectors per head and side the basis is learned from

// The sum of term(i) over i < n in 16 interleaved partial sums (a vector the compiler keeps),
// added up in a fixed order: the same sum for the same n.
template <typename Term>
float sum16(int64_t n, Term term) {
  float part[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) part[j] += term(i + j);
  }
  for (int j = 0; i < n; ++i, ++j) part[j] += term(i);
  float s = 0;
  for (float p : part) s += p;
  return s;
}


// What both key codecs add to every score: the bias <q, mu>, kept at state[bias_at] of each row.
void add_bias(const float* states, size_t state_floats, size_t bias_at, int n_q, int64_t n, float* out,
              size_t out_stride) {
  for (int r = 0; r < n_q; ++r) {
    const float bias = states[size_t(r) * state_floats + bias_at];
    float* o = out + size_t(r) * out_stride;
    for (int64_t t = 0; t < n; ++t) o[t] += bias;
  }
}

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

  const TurboRows& signal() const { return signal_; }
  const TurboRows* noise() const { return noise_ ? &*noise_ : nullptr; }

  // z_i = <v_i, x - mu> / sigma_i. Every token the cache takes pays these d^2 multiply-adds, so
  // they run as 16 independent float sums (spectral_kernels.h) rather than one chain; the order
  // of the sum is fixed, so the codes are the same on every target.
  void whiten(const float* x, float* z) const {
    float xm[kMaxDim];
    for (int j = 0; j < d_; ++j) xm[j] = x[j] - mean_[size_t(j)];
    spectral::dot16_rows(basis_.data(), d_, xm, d_, z);
    for (int i = 0; i < d_; ++i) z[i] /= sigma_[size_t(i)];
  }
  // whiten for n rows (x and z: n x d), several per pass over the basis, each with whiten's bits.
  // xm: n x d floats of scratch.
  void whiten_rows(const float* x, int n, float* xm, float* z) const {
    for (int r = 0; r < n; ++r) {
      for (int j = 0; j < d_; ++j) xm[size_t(r) * d_ + j] = x[size_t(r) * d_ + j] - mean_[size_t(j)];
    }
    spectral::dot16_rows_multi(basis_.data(), d_, xm, size_t(d_), n, d_, z, size_t(d_));
    for (int r = 0; r < n; ++r) {
      for (int i = 0; i < d_; ++i) z[size_t(r) * d_ + i] /= sigma_[size_t(i)];
    }
  }
  void encode(const float* x, uint8_t* row) const {
    float z[kMaxDim];
    whiten(x, z);
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
  void from_basis(const float* z, float mean_weight, float* out) const { from_basis_rows(z, 0, &mean_weight, 0, 1, out); }
  // from_basis for n rows z (z_stride apart) with their mean weights (w_stride apart) into out
  // (d floats apart), several rows per pass over the basis, each with from_basis's bits.
  void from_basis_rows(const float* z, size_t z_stride, const float* weights, size_t w_stride, int n, float* out) const {
    static thread_local std::vector<float> c;  // finalize runs once per work item; kept per thread
    c.resize(size_t(n) * size_t(d_));
    for (int r = 0; r < n; ++r) {
      const float* zr = z + size_t(r) * z_stride;
      float* o = out + size_t(r) * d_;
      for (int j = 0; j < d_; ++j) o[j] = weights[size_t(r) * w_stride] * mean_[size_t(j)];
      for (int i = 0; i < d_; ++i) c[size_t(r) * d_ + size_t(i)] = sigma_[size_t(i)] * zr[i];
    }
    spectral::add_scaled_rows_multi(basis_.data(), d_, c.data(), size_t(d_), n, d_, out, size_t(d_));
  }
  // q'_i = sigma_i <v_i, q> (d floats), then <q, mu>: d^2 multiply-adds per query row and step,
  // in float vectors (spectral_kernels.h; performance.md, SpectralQuant).
  void to_basis(const float* q, float* state) const { to_basis_rows(q, 0, 1, state, 0); }
  // The same for n rows (q_stride apart) into states (state_stride apart): each pass over the
  // basis serves several rows, and every row's state has the bits of to_basis.
  void to_basis_rows(const float* q, size_t q_stride, int n, float* state, size_t state_stride) const {
    spectral::dot16_rows_multi(basis_.data(), d_, q, q_stride, n, d_, state, state_stride);
    for (int r = 0; r < n; ++r) {
      float* st = state + size_t(r) * state_stride;
      for (int i = 0; i < d_; ++i) st[i] *= sigma_[size_t(i)];
      spectral::dot16_rows(mean_.data(), 1, q + size_t(r) * q_stride, d_, st + d_);
    }
  }
  // Both value codecs' accumulators: d whitened sums, then the sum of the weights (for the
  // mean's share). add_weight_sums adds a call's weights to the last float of each row.
  static void add_weight_sums(const float* w, size_t w_stride, int n_q, int64_t n, float* acc, size_t acc_floats) {
    for (int r = 0; r < n_q; ++r) {
      const float* wr = w + size_t(r) * w_stride;
      acc[size_t(r) * acc_floats + acc_floats - 1] += sum16(n, [&](int64_t i) { return wr[i]; });
    }
  }
  void finalize(const float* acc, int n_q, float* out) const {
    const size_t A = size_t(d_) + 1;
    from_basis_rows(acc, A, acc + d_, A, n_q, out);
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
  void prepare_queries(const float* q, size_t q_stride, int n, float* states, size_t state_stride,
                       Workspace&) const override {
    rows().to_basis_rows(q, q_stride, n, states, state_stride);
  }
  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1, float* out,
              size_t out_stride, Workspace& ws) const override {
    const int d = head_dim();
    const size_t S = query_state_floats();
    decode_row_tiles(WhitenedRows{rows()}, blocks, i0, i1, ws, [&](int64_t a, int64_t n, const float* tile) {
      float_scores(states, n_q, S, tile, size_t(d), n, d, out + (a - i0), out_stride);
    });
    add_bias(states, S, size_t(d), n_q, i1 - i0, out, out_stride);
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
    SpectralRows::add_weight_sums(w, w_stride, n_q, i1 - i0, acc, A);
  }
  void finalize(const float* acc, int n_q, float* out) const override { rows().finalize(acc, n_q, out); }
};

// The rows in the token-lane layout (turbo_lanes.h) when both parts fit it (codes of 2 to 4
// bits, or 1 bit over a multiple of 32 coordinates): a block of 16 tokens is the signal part's
// lane part (r coordinates at hi bits), then the noise part's (d - r at lo bits). Scores read the
// codes through the fused lane kernels against the query in the basis; values accumulate w * z
// there, as the row path does, without decoding tiles.
bool lanes_apply(int d, int r, int hi, int lo) {
  return turbo_lane_part_applies(r, hi) && (lo == 0 || r == d || turbo_lane_part_applies(d - r, lo));
}

template <typename Base>
class SpectralLaneCodec : public Base {
 public:
  SpectralLaneCodec(SpectralRows rows, bool values)
      : rows_(std::move(rows)),
        signal_(rows_.rank(), rows_.signal().bits(), rows_.signal().table(), values) {
    if (const TurboRows* n = rows_.noise()) noise_.emplace(rows_.head_dim() - rows_.rank(), n->bits(), n->table(), values);
  }
  int head_dim() const override { return rows_.head_dim(); }
  int block_tokens() const override { return kTurboBlockTokens; }
  size_t block_bytes() const override { return signal_.bytes() + (noise_ ? noise_->bytes() : 0); }
  size_t param_bytes() const override { return rows_.param_bytes(); }
  void encode(const float* x, int64_t, uint8_t* block) const override {
    for (int t = 0; t < kTurboBlockTokens; ++t) encode_token(x + size_t(t) * head_dim(), 0, t, block);
  }
  bool encodes_single_tokens() const override { return true; }
  void encode_token(const float* x, int64_t, int slot, uint8_t* block) const override {
    float z[kMaxDim];
    rows_.whiten(x, z);
    put_whitened(z, slot, block);
  }
  // The tokens whitened several per pass over the basis (whiten's bits), then put one by one.
  void encode_tokens(const float* x, int64_t, int slot, int n, uint8_t* block) const override {
    const size_t d = size_t(head_dim());
    std::vector<float> xm(size_t(n) * d), z(size_t(n) * d);
    rows_.whiten_rows(x, n, xm.data(), z.data());
    for (int t = 0; t < n; ++t) put_whitened(z.data() + size_t(t) * d, slot + t, block);
  }
  // The plain reference: each part's z = scale * level(code), then out of the basis.
  void decode(const uint8_t* block, int64_t, float* x) const override {
    const int d = head_dim(), r = rank();
    std::vector<float> zs(size_t(kTurboBlockTokens) * r), zn(size_t(kTurboBlockTokens) * (d - r));
    signal_.decode(block, zs.data());
    if (noise_) noise_->decode(block + signal_.bytes(), zn.data());
    float z[kMaxDim];
    for (int t = 0; t < kTurboBlockTokens; ++t) {
      std::copy_n(zs.data() + size_t(t) * r, r, z);
      for (int i = r; i < d; ++i) z[i] = noise_ ? zn[size_t(t) * (d - r) + size_t(i - r)] : 0.0f;
      rows_.from_basis(z, 1.0f, x + size_t(t) * d);
    }
  }

 protected:
  int rank() const { return rows_.rank(); }
  const SpectralRows& rows() const { return rows_; }
  const TurboLanePart& signal() const { return signal_; }
  const std::optional<TurboLanePart>& noise() const { return noise_; }

 private:
  void put_whitened(const float* z, int slot, uint8_t* block) const {
    uint8_t codes[kMaxDim];
    signal_.put(codes, rows_.signal().quantize(z, codes), slot, block);
    if (noise_) noise_->put(codes, rows_.noise()->quantize(z + rank(), codes), slot, block + signal_.bytes());
  }
  SpectralRows rows_;
  TurboLanePart signal_;
  std::optional<TurboLanePart> noise_;
};

// Keys: the state is the signal part's prepared query, the noise part's, then <q, mu>.
class SpectralLaneKeyCodec final : public SpectralLaneCodec<KeyCodec> {
 public:
  explicit SpectralLaneKeyCodec(SpectralRows rows) : SpectralLaneCodec(std::move(rows), false) {}
  size_t query_state_floats() const override { return signal_floats() + noise_floats() + 1; }
  // One row is a block of one (prepare_queries below).
  void prepare_query(const float* q, float* state, Workspace& ws) const override {
    prepare_queries(q, 0, 1, state, 0, ws);
  }
  void prepare_queries(const float* q, size_t q_stride, int n, float* states, size_t state_stride,
                       Workspace& ws) const override {
    const size_t B = size_t(head_dim()) + 1;
    float* const b = ws.get<float>(Workspace::kCodec0, size_t(n) * B);
    rows().to_basis_rows(q, q_stride, n, b, B);
    for (int r = 0; r < n; ++r) {
      const float* br = b + size_t(r) * B;
      float* state = states + size_t(r) * state_stride;
      signal().prepare_query(br, state);
      if (noise()) noise()->prepare_query(br + rank(), state + signal_floats());
      state[signal_floats() + noise_floats()] = br[head_dim()];
    }
  }
  // The signal part writes the scores; the noise part's and the bias are added, in that order.
  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1, float* out,
              size_t out_stride, Workspace&) const override {
    const size_t S = query_state_floats();
    signal().scores(states, S, n_q, blocks, block_bytes(), i0, i1, out, out_stride);
    if (noise()) {
      noise()->add_scores(states + signal_floats(), S, n_q, blocks + signal().bytes(), block_bytes(), i0, i1, out,
                          out_stride);
    }
    add_bias(states, S, signal_floats() + noise_floats(), n_q, i1 - i0, out, out_stride);
  }

 private:
  size_t signal_floats() const { return signal().query_state_floats(); }
  size_t noise_floats() const { return noise() ? noise()->query_state_floats() : 0; }
};

// Values: the whitened sum (signal coordinates, then noise), then the sum of weights.
class SpectralLaneValueCodec final : public SpectralLaneCodec<ValueCodec> {
 public:
  explicit SpectralLaneValueCodec(SpectralRows rows) : SpectralLaneCodec(std::move(rows), true) {}
  size_t accum_floats() const override { return size_t(head_dim()) + 1; }
  void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1,
                  float* acc, Workspace&) const override {
    const size_t A = accum_floats();
    signal().accumulate(w, w_stride, n_q, blocks, block_bytes(), i0, i1, acc, A);
    if (noise()) noise()->accumulate(w, w_stride, n_q, blocks + signal().bytes(), block_bytes(), i0, i1, acc + rank(), A);
    SpectralRows::add_weight_sums(w, w_stride, n_q, i1 - i0, acc, A);
  }
  void finalize(const float* acc, int n_q, float* out) const override { rows().finalize(acc, n_q, out); }
};

// Bytes a token's part of n coordinates at b bits takes: its fp16 scale and the codes, as bit
// planes (rows) or as one bit string (lanes).
double part_bytes(int n, int b, bool lanes) {
  return 2.0 + (lanes ? double((n * b + 7) / 8) : double(b) * double(plane_bytes(n)));
}

// Bits per element of a row with signal rank r.
double row_bits(int d, int r, int hi, int lo) {
  const bool lanes = r > 0 && lanes_apply(d, r, hi, lo);
  double bytes = r > 0 ? part_bytes(r, hi, lanes) : 0.0;
  if (lo > 0 && r < d) bytes += part_bytes(d - r, lo, lanes);
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
    SpectralRows r = rows(ctx, 0);
    if (lanes_apply(r.head_dim(), r.rank(), hi_, lo_)) return std::make_unique<SpectralLaneKeyCodec>(std::move(r));
    return std::make_unique<SpectralKeyCodec>(std::move(r));
  }
  std::unique_ptr<ValueCodec> value_codec(const CodecContext& ctx) const override {
    SpectralRows r = rows(ctx, 1);
    if (lanes_apply(r.head_dim(), r.rank(), hi_, lo_)) return std::make_unique<SpectralLaneValueCodec>(std::move(r));
    return std::make_unique<SpectralValueCodec>(std::move(r));
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
