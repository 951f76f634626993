// QJL (Zandieh, Daliri, Han, "QJL: 1-Bit Quantized JL Transform for KV Cache Quantization with
// Zero Overhead", 2024, https://arxiv.org/abs/2406.03482; reference code github.com/amirzandieh/QJL):
//
//   qjl:m=256[,outliers=8,om=M,group=32,vbits=2,seed=S,residual=R,sink=N]
//
// Keys: each key k is stored as the signs of S k (S a seeded m x d Gaussian sketch per layer,
// qjl_sketch.h) and its norm; the score is the unbiased estimate
//   sqrt(pi/2) / m * ||k|| * <S q, sign(S k)>,
// with S q computed once per step (prepare_query) and read against the packed signs (sign_dot:
// a byte of signs selects +-1 for eight sketched-query entries). No key is ever sketched with the
// query, and the plain decode k_hat = sqrt(pi/2) / m * ||k|| * S^T sign(S k) is the estimator's
// linear form, so decode-then-dot equals the fused score.
//
// Outlier channels, as the reference code handles them: in each group of `group` tokens the
// `outliers` channels with the largest norm over the group's tokens are kept apart. A key splits
// into its inlier part (outlier channels zeroed) and its outlier part (only those channels); the
// inlier part is sketched with all m rows, the outlier part with the first `om` rows of the same
// S, each with its own norm, and the score adds the two estimates (each unbiased, and independent:
// they read disjoint columns of S). The query's inlier sketch is S q minus the outlier columns'
// share, computed once per group and query.
//
// Values: per-token quantization, as the paper's code does (it calls KIVI's value quantizer): the
// value side is KIVI's per-token codec (kivi.cpp), `vbits` bits per channel in groups of `group`
// channels with an fp16 scale and zero (at 2 and 4 bits with groups of a multiple of 16 channels,
// its integer lane kernel, which holds the weights in 16-bit fixed point: kivi_lanes.h).
//
// Deviations from the reference code: S has i.i.d. N(0, 1) entries, as in the paper (the code's
// default orthogonalizes each block of d rows, `rot=True`, which changes the scale sqrt(pi/2) to
// a d-dependent constant); one m for every layer (the code uses m = 512 with om = 128 on the
// first 15 layers); the inlier norm is stored instead of the whole key's norm (the same two fp16
// per token; the code recovers the inlier norm as sqrt(||k||^2 - ||k_out||^2), which cancels when
// the outliers hold most of the norm); norms are clamped to fp16's largest finite value; the
// fp16 window is the project's residual window (newest `residual` tokens, default 0) rather than
// the code's buffer of up to 128 tokens; channel indices widen to u16 above d = 256 (the code
// stores u8 and supports d = 128 only); om defaults to m (the code's 256 with m = 256).
//
// Keys keep tokens in the vector lanes (TurboQuant's one-bit lane layout and kernels, 16 tokens a
// sub-block) when m (and om) are multiples of 32: without outlier channels as one lane part
// (QjlLaneKeyCodec), with them as two parts per 16 tokens whose query tables are rebuilt per group
// (QjlOutlierLaneKeyCodec, when om <= 512 and group is a multiple of 16). Otherwise the rows below.
//
// Layout: a block is `group` tokens (G): `outliers` (K) channel indices (u8 for d <= 256, else
// u16), then per token fp16 inlier norm, [fp16 outlier norm], m/8 bytes of inlier signs,
// [om/8 bytes of outlier signs] (bracketed parts only when K > 0). Bits per element:
//   keys   (m + 16 + [om + 16]) / d + 8 * K * index_bytes / (G * d)
//   values vbits + 32 * ceil(d / G) / d   (KIVI's per-token groups, G capped at d)
// With K = 0 tokens are independent and enter their block one by one.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <span>
#include <vector>

#include "src/core/fp16.h"
#include "src/kv/methods/qjl/qjl_lane_kernels.h"
#include "src/kv/methods/qjl/qjl_sketch.h"
#include "src/kv/methods/turbo/turbo_lanes.h"
#include "src/kv/methods/turbo/turbo_rows.h"
#include "src/kv/outlier_channels.h"
#include "src/kv/registry.h"
#include "veloxquant/error.h"

namespace vq::kv {
namespace {

using qjl::GaussianSketch;
using qjl::kQjlScale;
using qjl::sign_dot;

uint16_t norm_f16(const float* x, int d, const uint8_t* mask, bool in_mask) {
  double ss = 0;
  for (int c = 0; c < d; ++c) {
    if (mask && (mask[c] != 0) != in_mask) continue;
    ss += double(x[c]) * x[c];
  }
  return f32_to_f16(std::min(float(std::sqrt(ss)), 65504.0f));
}

float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// A block's header: the group's K outlier channel indices, u8 for d <= 256, else u16.
class OutlierHeader {
 public:
  OutlierHeader(int d, int K) : d_(d), K_(K), ib_(d <= 256 ? 1 : 2) {}
  size_t bytes() const { return size_t(K_) * ib_; }

  // Channel k; -1 for an index outside the head (a damaged saved cache), which every reader skips.
  int index(const uint8_t* block, int k) const {
    int c = block[k];
    if (ib_ == 2) {
      uint16_t v;
      std::memcpy(&v, block + 2 * size_t(k), 2);
      c = v;
    }
    return c < d_ ? c : -1;
  }
  void read_mask(const uint8_t* block, uint8_t* mask) const {
    for (int k = 0; k < K_; ++k) {
      const int c = index(block, k);
      if (c >= 0) mask[c] = 1;
    }
  }
  // The channels read_mask marks, in stored order, each once; returns how many.
  int channels(const uint8_t* block, int* chans) const {
    int n = 0;
    for (int k = 0; k < K_; ++k) {
      const int c = index(block, k);
      if (c >= 0 && std::find(chans, chans + n, c) == chans + n) chans[n++] = c;
    }
    return n;
  }
  // The K channels of largest norm over the G keys (ties to the lower channel), written to the
  // header and marked in mask.
  void choose(const float* keys, int G, uint8_t* block, uint8_t* mask) const {
    const std::vector<int> order = top_norm_channels(keys, G, d_, K_);
    for (int k = 0; k < K_; ++k) {
      const int c = order[size_t(k)];
      mask[c] = 1;
      if (ib_ == 1) {
        block[k] = uint8_t(c);
      } else {
        const uint16_t v = uint16_t(c);
        std::memcpy(block + 2 * size_t(k), &v, 2);
      }
    }
  }

 private:
  int d_, K_, ib_;
};

class QjlKeyCodec final : public KeyCodec {
 public:
  QjlKeyCodec(int d, int m, int om, int outliers, int group, uint64_t seed)
      : d_(d), m_(m), om_(outliers > 0 ? om : 0), K_(outliers), G_(group), head_(d, outliers),
        sketch_(m, d, seed), header_(head_.bytes()),
        row_(2 + size_t(m) / 8 + (K_ > 0 ? 2 + size_t(om_) / 8 : 0)) {}
  int head_dim() const override { return d_; }
  int block_tokens() const override { return G_; }
  size_t block_bytes() const override { return header_ + size_t(G_) * row_; }
  size_t param_bytes() const override { return sketch_.bytes(); }

  void encode(const float* keys, int64_t, uint8_t* block) const override {
    std::vector<uint8_t> mask(static_cast<size_t>(d_), 0);
    if (K_ > 0) head_.choose(keys, G_, block, mask.data());
    for (int t = 0; t < G_; ++t) encode_row(keys + size_t(t) * d_, K_ > 0 ? mask.data() : nullptr, row(block, t));
  }
  // Without outliers nothing is shared between the tokens of a block.
  bool encodes_single_tokens() const override { return K_ == 0; }
  void encode_token(const float* key, int64_t, int slot, uint8_t* block) const override {
    VQ_CHECK(K_ == 0, "qjl: tokens are encoded one by one only without outlier channels");
    encode_row(key, nullptr, row(block, slot));
  }

  void decode(const uint8_t* block, int64_t, float* keys) const override {
    std::vector<uint8_t> mask(static_cast<size_t>(d_), 0);
    head_.read_mask(block, mask.data());
    const uint8_t* mk = K_ > 0 ? mask.data() : nullptr;
    for (int t = 0; t < G_; ++t) {
      const uint8_t* r = row(block, t);
      float* k = keys + size_t(t) * d_;
      std::fill_n(k, d_, 0.0f);
      sketch_.add_transposed_signs(float(kQjlScale / m_) * load_f16(r), inlier_bits(r), m_, k, mk, false);
      if (K_ > 0) sketch_.add_transposed_signs(float(kQjlScale / om_) * load_f16(r + 2), outlier_bits(r), om_, k, mk, true);
    }
  }

  // The query itself (for the outlier columns' share, per group) and its sketch S q.
  size_t query_state_floats() const override { return size_t(d_) + size_t(m_); }
  // One row is a block of one (prepare_queries below).
  void prepare_query(const float* q, float* state, Workspace& ws) const override {
    prepare_queries(q, 0, 1, state, 0, ws);
  }
  void prepare_queries(const float* q, size_t q_stride, int n, float* states, size_t state_stride,
                       Workspace&) const override {
    for (int r = 0; r < n; ++r) std::copy_n(q + size_t(r) * q_stride, d_, states + size_t(r) * state_stride);
    sketch_.project_rows(q, q_stride, n, states + d_, state_stride);
  }

  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1, float* out,
              size_t out_stride, Workspace& ws) const override {
    const size_t qs = query_state_floats();
    // Per query: the inlier sketch (m floats) and the outlier sketch (om floats) of this group,
    // the inlier sketch each query reads, and the group's outlier channels.
    float* const w_in = ws.get<float>(Workspace::kCodec0, size_t(n_q) * m_);
    float* const w_out = ws.get<float>(Workspace::kCodec1, size_t(n_q) * m_);
    const float** const w = ws.get<const float*>(Workspace::kCodec2, size_t(n_q));
    int* const chans = ws.get<int>(Workspace::kCodec3, size_t(std::max(K_, 1)));
    const float s_in = float(kQjlScale / m_), s_out = K_ > 0 ? float(kQjlScale / om_) : 0.0f;
    const int in_bytes = m_ / 8, out_bytes = om_ / 8;
    for (int64_t i = i0; i < i1;) {
      const int64_t b = i / G_;
      const int t0 = int(i % G_), t1 = int(std::min<int64_t>(G_, t0 + (i1 - i)));
      const uint8_t* block = blocks + size_t(b) * block_bytes();
      const int n_chans = head_.channels(block, chans);
      for (int r = 0; r < n_q; ++r) {
        const float* st = states + size_t(r) * qs;
        if (K_ == 0) {
          w[r] = st + d_;
          continue;
        }
        // S q_out from the outlier columns; S q_in = S q - S q_out.
        float* wo = w_out + size_t(r) * m_;
        float* wi = w_in + size_t(r) * m_;
        std::fill_n(wo, m_, 0.0f);
        for (const int c : std::span<const int>(chans, size_t(n_chans))) {
          const float qc = st[c];
          const float* col = sketch_.column(c);
          for (int j = 0; j < m_; ++j) wo[j] += qc * col[j];
        }
        for (int j = 0; j < m_; ++j) wi[j] = st[d_ + j] - wo[j];
        w[r] = wi;
      }
      for (int t = t0; t < t1; ++t) {
        const uint8_t* rw = row(block, t);
        const float n_in = s_in * load_f16(rw);
        const float n_out = K_ > 0 ? s_out * load_f16(rw + 2) : 0.0f;
        for (int r = 0; r < n_q; ++r) {
          float s = n_in * sign_dot(w[r], inlier_bits(rw), in_bytes);
          if (K_ > 0) s += n_out * sign_dot(w_out + size_t(r) * m_, outlier_bits(rw), out_bytes);
          out[size_t(r) * out_stride + size_t(i - i0 + (t - t0))] = s;
        }
      }
      i += t1 - t0;
    }
  }

 private:
  uint8_t* row(uint8_t* block, int t) const { return block + header_ + size_t(t) * row_; }
  const uint8_t* row(const uint8_t* block, int t) const { return block + header_ + size_t(t) * row_; }
  // Row: inlier norm, [outlier norm], inlier signs, [outlier signs].
  size_t in_off() const { return K_ > 0 ? 4 : 2; }
  size_t out_off() const { return 4 + size_t(m_) / 8; }
  const uint8_t* inlier_bits(const uint8_t* r) const { return r + in_off(); }
  const uint8_t* outlier_bits(const uint8_t* r) const { return r + out_off(); }
  void encode_row(const float* k, const uint8_t* mask, uint8_t* r) const {
    std::vector<float> p(static_cast<size_t>(m_));
    const uint16_t n_in = norm_f16(k, d_, mask, false);
    std::memcpy(r, &n_in, 2);
    sketch_.project(k, m_, p.data(), mask, false);
    qjl::pack_signs(p.data(), m_, r + in_off());
    if (K_ == 0) return;
    const uint16_t n_out = norm_f16(k, d_, mask, true);
    std::memcpy(r + 2, &n_out, 2);
    sketch_.project(k, om_, p.data(), mask, true);
    qjl::pack_signs(p.data(), om_, r + out_off());
  }

  int d_, m_, om_, K_, G_;
  OutlierHeader head_;
  GaussianSketch sketch_;
  size_t header_, row_;
};

// Keys without outlier channels, with tokens in the vector lanes (m a multiple of 32): the sketch
// z = S k of a key is TurboQuant's 1-bit row over m "channels" (turbo_rows.h, turbo_lanes.h) with
// the levels -sqrt(pi/2)/m, +sqrt(pi/2)/m and the fp16 norm ||k|| as its scale (the row is given z
// rescaled to length ||k||, which keeps its signs), so the lane kernel's score is
// sqrt(pi/2)/m ||k|| <S q, sign(S k)>, the estimator, with S q as its query: prepared once per step
// into the kernel's per-nibble tables (8 sketch rows a byte, one lookup and one add per 4). The
// decode is the linear form S^T of the row's decode, as the row layout's.
class QjlLaneKeyCodec final : public KeyCodec {
 public:
  QjlLaneKeyCodec(int d, int m, uint64_t seed)
      : d_(d), m_(m), sketch_(m, d, seed), rows_(make_turbo_key_codec(sketch_rows(m))) {}
  int head_dim() const override { return d_; }
  int block_tokens() const override { return rows_->block_tokens(); }
  size_t block_bytes() const override { return rows_->block_bytes(); }
  size_t param_bytes() const override { return sketch_.bytes() + rows_->param_bytes(); }
  void encode(const float* keys, int64_t pos0, uint8_t* block) const override {
    std::vector<float> z(size_t(block_tokens()) * m_);
    for (int t = 0; t < block_tokens(); ++t) sketch_of(keys + size_t(t) * d_, &z[size_t(t) * m_]);
    rows_->encode(z.data(), pos0, block);
  }
  bool encodes_single_tokens() const override { return true; }
  void encode_token(const float* key, int64_t pos, int slot, uint8_t* block) const override {
    std::vector<float> z(static_cast<size_t>(m_));
    sketch_of(key, z.data());
    rows_->encode_token(z.data(), pos, slot, block);
  }
  void decode(const uint8_t* block, int64_t pos0, float* keys) const override {
    std::vector<float> z(size_t(block_tokens()) * m_);
    rows_->decode(block, pos0, z.data());
    std::fill_n(keys, size_t(block_tokens()) * d_, 0.0f);
    for (int t = 0; t < block_tokens(); ++t) sketch_.add_transposed(&z[size_t(t) * m_], keys + size_t(t) * d_);
  }
  size_t query_state_floats() const override { return rows_->query_state_floats(); }
  // One row is a block of one (prepare_queries below).
  void prepare_query(const float* q, float* state, Workspace& ws) const override {
    prepare_queries(q, 0, 1, state, 0, ws);
  }
  void prepare_queries(const float* q, size_t q_stride, int n, float* states, size_t state_stride,
                       Workspace& ws) const override {
    static thread_local std::vector<float> sq;  // as above, kept per thread
    sq.resize(size_t(n) * size_t(m_));
    sketch_.project_rows(q, q_stride, n, sq.data(), size_t(m_));
    rows_->prepare_queries(sq.data(), size_t(m_), n, states, state_stride, ws);
  }
  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t pos0, int64_t i0, int64_t i1, float* out,
              size_t out_stride, Workspace& ws) const override {
    rows_->scores(states, n_q, blocks, pos0, i0, i1, out, out_stride, ws);
  }

 private:
  static TurboRows sketch_rows(int m) {
    const float c = float(kQjlScale / m);
    return TurboRows(
        m, 1, {-c, c},
        [m](const float* u, uint8_t* codes) {
          for (int j = 0; j < m; ++j) codes[j] = uint8_t(u[j] > 0.0f);  // pack_signs' convention
        },
        0, TurboRows::NormMode::kNorm);
  }
  // S k rescaled to length ||k||: the row stores that length as its scale and the signs.
  void sketch_of(const float* k, float* z) const {
    sketch_.project(k, m_, z);
    double kk = 0, zz = 0;
    for (int c = 0; c < d_; ++c) kk += double(k[c]) * k[c];
    for (int j = 0; j < m_; ++j) zz += double(z[j]) * z[j];
    const float f = zz > 0 ? float(std::sqrt(kk / zz)) : 0.0f;
    for (int j = 0; j < m_; ++j) z[j] *= f;
  }

  int d_, m_;
  GaussianSketch sketch_;
  std::unique_ptr<KeyCodec> rows_;
};

// Keys with outlier channels, with tokens in the vector lanes (m and om multiples of 32 up to
// kTurboLaneTableDim, group a multiple of 16): each 16 tokens of a group are two one-bit lane parts
// (turbo_lanes.h) side by side, the inlier signs of S k_in (m rows, levels -+sqrt(pi/2)/m) and the
// outlier signs of S k_out (first om rows, levels -+sqrt(pi/2)/om), each with its fp16 norm as the
// part's scale, so a part's lane score is its estimate. The query's inlier sketch S q - S q_out
// depends on the group's outlier channels: its score is read as <S q, signs> - <S q_out, signs>,
// from S q's nibble table (made once per step) and S q_out's (rebuilt per group and query,
// qjl_lane_kernels.h), which the outlier part reads too when om = m. A token costs one register
// lookup and one add per 4 rows of each table it is read against, 16 tokens at a time; one table of
// 4 m floats is written per group and query (writing two, the inlier one as a difference, measured
// slower: the stores dominated). Bytes per block are the row layout's.
class QjlOutlierLaneKeyCodec final : public KeyCodec {
 public:
  QjlOutlierLaneKeyCodec(int d, int m, int om, int outliers, int group, uint64_t seed)
      : d_(d), m_(m), om_(om), K_(outliers), G_(group), head_(d, outliers), sketch_(m, d, seed),
        c_in_(float(kQjlScale / m)), c_out_(float(kQjlScale / om)), in_(m, 1, {-c_in_, c_in_}, false),
        out_(om, 1, {-c_out_, c_out_}, false), sub_(in_.bytes() + out_.bytes()) {}
  static bool applies(int m, int om, int group) {
    return group % kTurboBlockTokens == 0 && turbo_lanes_apply(m, 1) && turbo_lanes_apply(om, 1) &&
           m <= kTurboLaneTableDim && om <= kTurboLaneTableDim;
  }
  int head_dim() const override { return d_; }
  int block_tokens() const override { return G_; }
  size_t block_bytes() const override { return head_.bytes() + size_t(G_ / kTurboBlockTokens) * sub_; }
  size_t param_bytes() const override { return sketch_.bytes(); }

  void encode(const float* keys, int64_t, uint8_t* block) const override {
    std::vector<uint8_t> mask(static_cast<size_t>(d_), 0), codes(static_cast<size_t>(m_));
    std::vector<float> p(static_cast<size_t>(m_));
    head_.choose(keys, G_, block, mask.data());
    for (int t = 0; t < G_; ++t) {
      const float* k = keys + size_t(t) * d_;
      uint8_t* sub = sub_block(block, t / kTurboBlockTokens);
      const int slot = t % kTurboBlockTokens;
      sketch_.project(k, m_, p.data(), mask.data(), false);
      for (int j = 0; j < m_; ++j) codes[size_t(j)] = uint8_t(p[size_t(j)] > 0.0f);  // pack_signs' convention
      in_.put(codes.data(), norm_f16(k, d_, mask.data(), false), slot, sub);
      sketch_.project(k, om_, p.data(), mask.data(), true);
      for (int j = 0; j < om_; ++j) codes[size_t(j)] = uint8_t(p[size_t(j)] > 0.0f);
      out_.put(codes.data(), norm_f16(k, d_, mask.data(), true), slot, sub + in_.bytes());
    }
  }

  // Each part's decode is its sketch rows times the scaled levels; S^T of that over the part's
  // channels is the estimator's linear form.
  void decode(const uint8_t* block, int64_t, float* keys) const override {
    std::vector<uint8_t> mask(static_cast<size_t>(d_), 0);
    head_.read_mask(block, mask.data());
    std::vector<float> zi(size_t(kTurboBlockTokens) * m_), zo(size_t(kTurboBlockTokens) * om_);
    std::fill_n(keys, size_t(G_) * d_, 0.0f);
    for (int s = 0; s < G_ / kTurboBlockTokens; ++s) {
      const uint8_t* sub = sub_block(block, s);
      in_.decode(sub, zi.data());
      out_.decode(sub + in_.bytes(), zo.data());
      for (int t = 0; t < kTurboBlockTokens; ++t) {
        float* k = keys + size_t(s * kTurboBlockTokens + t) * d_;
        sketch_.add_transposed(&zi[size_t(t) * m_], m_, k, mask.data(), false);
        sketch_.add_transposed(&zo[size_t(t) * om_], om_, k, mask.data(), true);
      }
    }
  }

  // The query itself (its outlier channels' coefficients, per group) and the nibble table of its
  // sketch S q with the inlier levels.
  size_t query_state_floats() const override { return size_t(d_) + 4 * size_t(m_); }
  // One row is a block of one (prepare_queries below).
  void prepare_query(const float* q, float* state, Workspace& ws) const override {
    prepare_queries(q, 0, 1, state, 0, ws);
  }
  // The rows' sketches S q several per pass over S (each with a single row's bits), then each
  // row's tables.
  void prepare_queries(const float* q, size_t q_stride, int n, float* states, size_t state_stride,
                       Workspace& ws) const override {
    float* const sq = ws.get<float>(Workspace::kCodec0, size_t(n) * m_);
    float* const scratch = ws.get<float>(Workspace::kCodec1, size_t(m_));
    sketch_.project_rows(q, q_stride, n, sq, size_t(m_));
    for (int r = 0; r < n; ++r) {
      float* state = states + size_t(r) * state_stride;
      std::copy_n(q + size_t(r) * q_stride, d_, state);
      qjl::query_tables(sq + size_t(r) * m_, m_, c_in_, state + d_, scratch);
    }
  }

  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t pos0, int64_t i0, int64_t i1, float* out,
              size_t out_stride, Workspace& ws) const override {
    if (n_q >= kKeySideRows) return scores_many_rows(states, n_q, blocks, pos0, i0, i1, out, out_stride, ws);
    const size_t qs = query_state_floats(), tc = 4 * size_t(m_), to = 4 * size_t(om_);
    float* const tab_out = ws.get<float>(Workspace::kCodec0, size_t(n_q) * to);
    float* const tab_corr = om_ == m_ ? tab_out : ws.get<float>(Workspace::kCodec1, size_t(n_q) * tc);
    const size_t corr_stride = om_ == m_ ? to : tc;
    float* const scratch = ws.get<float>(Workspace::kCodec2, 2 * size_t(m_));
    float* const part = ws.get<float>(Workspace::kCodec3, 2 * size_t(n_q) * G_);
    int* const chans = ws.get<int>(Workspace::kCodec4, size_t(std::max(K_, 1)));
    float* const coefs = ws.get<float>(Workspace::kCodec5, size_t(std::max(K_, 1)));
    const float** const cols = ws.get<const float*>(Workspace::kCodec6, size_t(std::max(K_, 1)));
    float* const corr = part + size_t(n_q) * G_;
    for (int64_t i = i0; i < i1;) {
      const int64_t b = i / G_;
      const int t0 = int(i % G_), t1 = int(std::min<int64_t>(G_, t0 + (i1 - i)));
      const uint8_t* block = blocks + size_t(b) * block_bytes();
      const uint8_t* subs = block + head_.bytes();
      const int n_chans = head_.channels(block, chans);
      for (int k = 0; k < n_chans; ++k) cols[k] = sketch_.column(chans[k]);
      for (int r = 0; r < n_q; ++r) {
        const float* st = states + size_t(r) * qs;
        for (int k = 0; k < n_chans; ++k) coefs[k] = st[chans[k]];
        qjl::outlier_group_tables(m_, om_, cols, coefs, n_chans, c_in_, c_out_, tab_corr + size_t(r) * corr_stride,
                                  tab_out + size_t(r) * to, scratch);
      }
      // inlier: <S q, signs> - <S q_out, signs>; outlier: <S q_out, outlier signs>.
      float* dst = out + (i - i0);
      in_.scores(states + d_, qs, n_q, subs, sub_, t0, t1, dst, out_stride);
      in_.scores(tab_corr, corr_stride, n_q, subs, sub_, t0, t1, corr, size_t(G_));
      out_.scores(tab_out, to, n_q, subs + in_.bytes(), sub_, t0, t1, part, size_t(G_));
      for (int r = 0; r < n_q; ++r) {
        for (int t = 0; t < t1 - t0; ++t) {
          float& s = dst[size_t(r) * out_stride + size_t(t)];
          s = (s - corr[size_t(r) * G_ + size_t(t)]) + part[size_t(r) * G_ + size_t(t)];
        }
      }
      i += t1 - t0;
    }
  }

 private:
  // From this many query rows on, the outlier channels' share of a score is taken from the keys'
  // side: per group, each token's estimate on those channels (a few columns of S against its two
  // sign vectors), which every row then reads with one product per channel, instead of two nibble
  // tables and two more table passes per row and group. The same estimator's linear form, rounded
  // in another order (the codec harness holds both to the reference); decode steps (a KV head's
  // few query rows) keep the tables, which cost less than the keys' side for few rows.
  static constexpr int kKeySideRows = 16;

  // score = <S q, signs_in>-part over every channel (the inlier table pass) + sum over the group's
  // outlier channels c of q_c * (x_out,t[c] - x_in,t[c]), where x_in,t and x_out,t are token t's
  // two parts decoded (scale * level * S^T signs over the part's rows): the inlier part's
  // estimate belongs to the other channels, the outlier part's to these.
  void scores_many_rows(const float* states, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1,
                        float* out, size_t out_stride, Workspace& ws) const {
    const size_t qs = query_state_floats();
    const int K = std::max(K_, 1);
    float* const sums = ws.get<float>(Workspace::kCodec0, 2 * size_t(K) * kTurboBlockTokens);
    float* const weights = ws.get<float>(Workspace::kCodec1, size_t(K) * G_);  // [channel][token of the group]
    float* const acc = ws.get<float>(Workspace::kCodec2, size_t(G_));
    int* const chans = ws.get<int>(Workspace::kCodec4, size_t(K));
    const float** const cols = ws.get<const float*>(Workspace::kCodec6, size_t(K));
    float* const sums_out = sums + size_t(K) * kTurboBlockTokens;
    for (int64_t i = i0; i < i1;) {
      const int64_t b = i / G_;
      const int t0 = int(i % G_), t1 = int(std::min<int64_t>(G_, t0 + (i1 - i)));
      const uint8_t* block = blocks + size_t(b) * block_bytes();
      const int n_chans = head_.channels(block, chans);
      float* dst = out + (i - i0);
      in_.scores(states + d_, qs, n_q, block + head_.bytes(), sub_, t0, t1, dst, out_stride);
      if (n_chans > 0) {
        for (int k = 0; k < n_chans; ++k) cols[k] = sketch_.column(chans[k]);
        for (int s = t0 / kTurboBlockTokens; s * kTurboBlockTokens < t1; ++s) {
          const uint8_t* sub = sub_block(block, s);
          const uint8_t* sub_out = sub + in_.bytes();
          qjl::sign_column_sums(in_.words(sub), m_, cols, n_chans, sums);
          qjl::sign_column_sums(out_.words(sub_out), om_, cols, n_chans, sums_out);
          const int u0 = s * kTurboBlockTokens;
          for (int t = std::max(t0, u0); t < std::min(t1, u0 + kTurboBlockTokens); ++t) {
            const float si = c_in_ * in_.scale(sub, t - u0), so = c_out_ * out_.scale(sub_out, t - u0);
            for (int k = 0; k < n_chans; ++k) {
              const size_t at = size_t(k) * kTurboBlockTokens + size_t(t - u0);
              weights[size_t(k) * G_ + size_t(t)] = so * sums_out[at] - si * sums[at];
            }
          }
        }
        for (int r = 0; r < n_q; ++r) {
          const float* q = states + size_t(r) * qs;  // the state begins with the query
          std::fill(acc + t0, acc + t1, 0.0f);
          for (int k = 0; k < n_chans; ++k) {
            const float qc = q[chans[k]];
            const float* w = weights + size_t(k) * G_;
            for (int t = t0; t < t1; ++t) acc[t] += qc * w[t];
          }
          float* row = dst + size_t(r) * out_stride - t0;
          for (int t = t0; t < t1; ++t) row[t] += acc[t];
        }
      }
      i += t1 - t0;
    }
  }

  uint8_t* sub_block(uint8_t* block, int s) const { return block + head_.bytes() + size_t(s) * sub_; }
  const uint8_t* sub_block(const uint8_t* block, int s) const { return block + head_.bytes() + size_t(s) * sub_; }

  int d_, m_, om_, K_, G_;
  OutlierHeader head_;
  GaussianSketch sketch_;
  float c_in_, c_out_;
  TurboLanePart in_, out_;
  size_t sub_;
};

class QjlMethod final : public WindowedMethod {
 public:
  explicit QjlMethod(const ParamValues& v)
      : WindowedMethod(v), m_(param_int(v, "m")), K_(param_int(v, "outliers")), om_(param_int(v, "om") > 0 ? param_int(v, "om") : m_),
        group_(param_int(v, "group")), seed_(uint64_t(param_int(v, "seed"))),
        values_(parse_method(fmt::format("kivi:vbits={},group={},residual=0", param_int(v, "vbits"), group_))) {
    VQ_CHECK(m_ % 8 == 0, fmt::format("qjl: m must be a multiple of 8 (whole bytes of signs), got {}", m_));
    VQ_CHECK(om_ % 8 == 0 && om_ <= m_,
             fmt::format("qjl: om must be a multiple of 8 and at most m = {}, got {}", m_, om_));
    VQ_CHECK(K_ > 0 || param_int(v, "om") == 0, "qjl: om (the outlier sketch) needs outliers > 0");
  }
  std::unique_ptr<KeyCodec> key_codec(const CodecContext& ctx) const override {
    const int d = ctx.head_dim;
    VQ_CHECK(d >= 1 && d <= 4096, fmt::format("qjl: head_dim must be in [1, 4096], got {}", d));
    VQ_CHECK(K_ < d, fmt::format("qjl: outliers={} must be below head_dim {}", K_, d));
    const uint64_t seed = qjl::sketch_seed(layer_seed(seed_, ctx.layer, 0));
    if (K_ == 0 && turbo_lanes_apply(m_, 1)) return std::make_unique<QjlLaneKeyCodec>(d, m_, seed);
    if (K_ > 0 && QjlOutlierLaneKeyCodec::applies(m_, om_, group_)) {
      return std::make_unique<QjlOutlierLaneKeyCodec>(d, m_, om_, K_, group_, seed);
    }
    return std::make_unique<QjlKeyCodec>(d, m_, om_, K_, group_, seed);
  }
  std::unique_ptr<ValueCodec> value_codec(const CodecContext& ctx) const override {
    return values_.values().value_codec(ctx);
  }
  double key_bits(int d) const override {
    const int ib = d <= 256 ? 1 : 2;
    const double per_token = m_ + 16.0 + (K_ > 0 ? om_ + 16.0 : 0.0);
    return per_token / d + 8.0 * K_ * ib / (double(group_) * d);
  }
  double value_bits(int d) const override { return values_.values().value_bits(d); }

 private:
  int m_, K_, om_, group_;
  uint64_t seed_;
  Method values_;  // KIVI's per-token value side
};

}  // namespace

const MethodDef& qjl_method() {
  static const MethodDef def{
      {"qjl",
       "QJL: keys as the signs of a Gaussian sketch + norm (unbiased inner-product estimator), outlier channels "
       "sketched apart; values per-token (KIVI)",
       windowed_method_params({
           {"m", ParamType::kInt, 256, 8, 4096, "sketch rows (sign bits per key), a multiple of 8", {}},
           {"outliers", ParamType::kInt, 8, 0, 64, "outlier channels per group of tokens, sketched apart", {}},
           {"om", ParamType::kInt, 0, 0, 4096, "sketch rows of the outlier part (0: m)", {}},
           {"group", ParamType::kInt, 32, 1, 1024, "tokens per outlier group; channels per value group", {}},
           {"vbits", ParamType::kInt, 2, 2, 4, "bits per value code (KIVI per-token)", {}},
           {"seed", ParamType::kInt, 1234, 0, 2147483647, "seed of the Gaussian sketch", {}},
       })},
      [](const ParamValues& v) -> std::unique_ptr<MethodImpl> { return std::make_unique<QjlMethod>(v); }};
  return def;
}

}  // namespace vq::kv
