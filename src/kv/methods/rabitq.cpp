// RaBitQ (Gao and Long, "RaBitQ: Quantizing High-Dimensional Vectors with a Theoretical Error
// Bound for Approximate Nearest Neighbor Search", SIGMOD 2024, https://arxiv.org/abs/2405.12497)
// and, for B >= 2 bits, Extended RaBitQ (Gao, Gou, Xu, Yang, Long, Wong, "Practical and
// Asymptotically Optimal Quantization of High-Dimensional Vectors in Euclidean Space for
// Approximate Nearest Neighbor Search", SIGMOD 2025, https://arxiv.org/abs/2409.09913):
//
//   rabitq:bits=B[,seed=S,residual=R,sink=N]     B in 1..4, default 1
//
// Each key or value o is stored as its norm |o| and its direction, rotated by P (the project's
// randomized Hadamard transform, seeded per layer and side). The rotated unit direction u is
// coded as the grid vector y closest to it in angle (rabitq_codes.h: at B = 1 the sign vector,
// y = sign(u)/2; at B >= 2 Extended RaBitQ's search over rescaling factors); the quantized
// direction is o_bar = P^T y / |y|, and the correction <o_bar, o> = <y, u> / |y| is stored with
// it (layout in rabitq_layout.h). The estimator is the paper's
//
//   <o, q> ~ |o| <o_bar, q> / <o_bar, o> = |o| / (|y| <o_bar, o>) * <y, P q>,
//
// unbiased over the rotation, with error at most |o||q| sqrt(1 - <o_bar,o>^2) / <o_bar,o> *
// eps0 / sqrt(d - 1) with high probability (eps0 = 1.9 in the papers). Its linear form is the
// plain reference decode, o_hat = |o| o_bar / <o_bar, o>: decode-then-dot with the exact query is
// the estimator with an unquantized query.
//
// At one bit, scores work by bit operations against a quantized query, as the paper's: once per
// step the rotated query q' is quantized to B_q = 4 bits by randomized uniform scalar
// quantization (lower bound v_l = min q'_i, step delta = (max q'_i - v_l) / 15, q_u[i] =
// floor((q'_i - v_l) / delta + r_i) with r_i uniform in [0, 1), so the held query is unbiased)
// and kept as 4 bit planes; per token, with the signs x_b as one bit plane,
//   <x_b, q_u> = sum_{j<4} 2^j popcount(x_b AND q_u^(j)),
//   2 <y, q_bar> = delta (2 <x_b, q_u> - sum q_u) + v_l (2 popcount(x_b) - d)
// (the paper's formula for <x_bar, q_bar> with x_bar = 2y/sqrt(d)), integer until the last line.
// At two to four bits the rotated query stays in float and each tile of tokens is decoded
// (factor * y) into the shared float kernel, as the papers' library scores its extended codes
// (float query times integer codes): a 4-bit query would add more error than those codes leave.
// Values accumulate the linear decode in the rotated space (a tile of tokens decoded into L1,
// then the shared float kernel) and are rotated back once per step.
//
// Deviations from the papers, all deliberate:
// - Centroid 0: there is no calibration (no clustering), so each vector is coded around the
//   origin and its norm is stored; the papers code the residual to an IVF cluster centroid.
// - The rotation is the randomized Hadamard transform H D / sqrt(d) (one seeded sign diagonal per
//   layer and side), not a Haar-random orthogonal matrix: O(d log d) and shared with the other
//   rotated methods. The papers' unbiasedness and error bound are proven for Haar rotations; the
//   tests measure both with this one. head_dim must be a power of two in [8, 4096].
// - The per-vector scalars are fp16 (the papers keep float32); |o| saturates at 65504 as in
//   turbo. B >= 2 also stores |y| (fp16), which B = 1 does not need (it is sqrt(d)/2).
// - The query's random rounding offsets r_i are drawn from a generator seeded by the codec's
//   seed and the query's bits, so the same query always gives the same state (determinism);
//   the paper draws them fresh.
// - B >= 2 scores use the float rotated query (the library's choice, not the paper's bit-plane
//   form), so they equal the reference decode-then-dot to float rounding. No FastScan batch
//   layout (SIMD lookup tables over 32 codes) at one bit: one token at a time with popcounts,
//   the paper's "single" mode.
// - Codes are chosen by the exact search over all critical rescaling factors, not the pruned one.
// - The papers estimate inner products only; accumulating values with the estimator's linear
//   decode |v| o_bar / <o_bar, v> is this project's use of it.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "src/core/fp16.h"
#include "src/core/hadamard.h"
#include "src/core/rng.h"
#include "src/kv/decode_tiles.h"
#include "src/kv/f16_kernels.h"
#include "src/kv/lut_kernels.h"
#include "src/kv/methods/rabitq_codes.h"
#include "src/kv/methods/rabitq_layout.h"
#include "src/kv/registry.h"
#include "src/kv/rotation.h"
#include "veloxquant/error.h"

namespace vq::kv {
namespace {

using rabitq::kBlockTokens;
using rabitq::kQueryBits;
using rabitq::QueryState;

constexpr int kMaxWords = 4096 / 64;

// The per-token part shared by keys and values: norm, correction and codes of the (already
// rotated) vector.
class RabitqRows {
 public:
  RabitqRows(int d, int bits) : d_(d), bits_(bits), row_(rabitq::row_bytes(d, bits)) {
    const float mid = 0.5f * float((1 << bits) - 1);
    for (int c = 0; c < (1 << bits); ++c) levels_.push_back(float(c) - mid);  // y = c - (2^B - 1)/2
  }
  int bits() const { return bits_; }
  size_t row_bytes() const { return row_; }
  size_t param_bytes() const { return levels_.size() * sizeof(float); }

  void encode(const float* x, uint8_t* row) const {
    double ss = 0;
    for (int j = 0; j < d_; ++j) ss += double(x[j]) * x[j];
    const double norm = std::sqrt(ss);
    uint8_t codes[4096];
    const rabitq::GridCode g = rabitq::best_grid_code(x, d_, bits_, codes);
    // A zero vector has no direction: any code, cosine 1, and the zero norm makes it decode to 0.
    const double cosine = norm > 0 ? std::min(1.0, g.ip / (g.ynorm * norm)) : 1.0;
    const uint16_t h[3] = {f32_to_f16(float(std::min(norm, 65504.0))), f32_to_f16(float(cosine)),
                           f32_to_f16(float(g.ynorm))};
    std::memcpy(row, h, rabitq::scalar_bytes(bits_));
    pack_planes(codes, d_, bits_, row + rabitq::scalar_bytes(bits_));
  }
  // |o| / (|y| <o_bar, o>): what <y, .> is multiplied by, in the estimator and in the decode.
  float factor(const uint8_t* row) const {
    const rabitq::RowScalars s = rabitq::read_scalars(row, d_, bits_);
    return s.norm / (s.ynorm * s.cosine);
  }
  void decode(const uint8_t* row, float* x) const {
    lut_affine_planes(rabitq::row_planes(row, bits_), d_, bits_, levels_.data(), 0.0f, factor(row),
                      x);
  }
  const uint8_t* row(const uint8_t* blocks, int64_t i) const {
    return blocks + size_t(i / kBlockTokens) * kBlockTokens * row_ +
           size_t(i % kBlockTokens) * row_;
  }
  template <typename Fn>
  void tiles(const uint8_t* blocks, int64_t i0, int64_t i1, Fn fn) const {
    decode_tiles(
        i0, i1, d_, [&](int64_t i, float* x) { decode(row(blocks, i), x); }, fn);
  }

 private:
  int d_, bits_;
  size_t row_;
  std::vector<float> levels_;
};

// Keys. One bit: the paper's scoring by popcounts against the 4-bit query. Two to four bits: the
// rotated query kept in float and the codes decoded a tile at a time (o_hat = factor * y, the
// reference decode) into the shared float kernel, as the papers' library scores its extended
// codes (float query times integer codes); a 4-bit query there would add more error than the
// codes leave (docs/cache.md has the measurement).
class RabitqKeyCodec final : public KeyCodec {
 public:
  RabitqKeyCodec(int d, int bits, uint64_t dither_seed)
      : d_(d), rows_(d, bits), dither_seed_(dither_seed) {}
  int head_dim() const override { return d_; }
  int block_tokens() const override { return kBlockTokens; }
  size_t block_bytes() const override { return kBlockTokens * rows_.row_bytes(); }
  size_t param_bytes() const override { return rows_.param_bytes(); }
  void encode(const float* keys, int64_t, uint8_t* block) const override {
    for (int t = 0; t < kBlockTokens; ++t)
      rows_.encode(keys + size_t(t) * d_, block + size_t(t) * rows_.row_bytes());
  }
  bool encodes_single_tokens() const override { return true; }
  void encode_token(const float* key, int64_t, int slot, uint8_t* block) const override {
    rows_.encode(key, block + size_t(slot) * rows_.row_bytes());
  }
  void decode(const uint8_t* block, int64_t, float* keys) const override {
    for (int t = 0; t < kBlockTokens; ++t)
      rows_.decode(block + size_t(t) * rows_.row_bytes(), keys + size_t(t) * d_);
  }
  size_t query_state_floats() const override {
    return rows_.bits() == 1 ? QueryState::floats(d_) : size_t(d_);
  }
  void prepare_query(const float* q, float* state) const override {
    if (rows_.bits() == 1) {
      quantize_query(q, state);
    } else {
      std::copy_n(q, d_, state);
    }
  }
  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1,
              float* out, size_t out_stride) const override {
    if (rows_.bits() == 1) {
      popcount_scores(states, n_q, blocks, i0, i1, out, out_stride);
      return;
    }
    rows_.tiles(blocks, i0, i1, [&](int64_t a, int64_t n, const float* tile) {
      float_scores(states, n_q, size_t(d_), tile, size_t(d_), n, d_, out + (a - i0), out_stride);
    });
  }

 private:
  void quantize_query(const float* q, float* state) const;
  void popcount_scores(const float* states, int n_q, const uint8_t* blocks, int64_t i0, int64_t i1,
                       float* out, size_t out_stride) const;
  int d_;
  RabitqRows rows_;
  uint64_t dither_seed_;
};

// The paper's randomized uniform scalar quantization of the rotated query, 4 bits.
void RabitqKeyCodec::quantize_query(const float* q, float* state) const {
  std::fill_n(state, QueryState::floats(d_), 0.0f);
  const float lo = *std::min_element(q, q + d_), hi = *std::max_element(q, q + d_);
  const float delta = (hi - lo) / float((1 << kQueryBits) - 1);
  // Offsets seeded by the query's own bits: the same query gives the same state, different
  // queries draw independent offsets.
  uint64_t h = dither_seed_;
  for (int j = 0; j < d_; ++j) {
    h ^= f32_bits(q[j]);
    h = splitmix64(h);
  }
  Rng rng(h);
  uint64_t planes[kQueryBits][kMaxWords] = {};
  int64_t sum = 0;
  for (int j = 0; j < d_; ++j) {
    int code = 0;
    if (delta > 0.0f) {
      const double u = (double(q[j]) - lo) / delta + rng.uniform();
      code = std::clamp(int(std::floor(u)), 0, (1 << kQueryBits) - 1);
    }
    sum += code;
    for (int b = 0; b < kQueryBits; ++b) planes[b][j / 64] |= uint64_t((code >> b) & 1) << (j % 64);
  }
  state[0] = delta;
  state[1] = lo;
  state[2] = float(sum);  // at most 15 * 4096: exact
  for (int b = 0; b < kQueryBits; ++b) {
    std::memcpy(state + QueryState::plane_offset(d_, b), planes[b], QueryState::words(d_) * 8);
  }
}

// <x_b, q_u> = sum_j 2^j popcount(x_b AND q_u^(j)), then 2 <y, q_bar> = delta (2 <x_b, q_u> -
// sum q_u) + v_l (2 popcount(x_b) - d), all integer but the last step.
void RabitqKeyCodec::popcount_scores(const float* states, int n_q, const uint8_t* blocks,
                                     int64_t i0, int64_t i1, float* out, size_t out_stride) const {
  const size_t W = QueryState::words(d_), qs = QueryState::floats(d_);
  std::vector<uint64_t> qw(size_t(n_q) * kQueryBits *
                           W);  // the queries' planes as words, once per call
  for (int r = 0; r < n_q; ++r) {
    for (int b = 0; b < kQueryBits; ++b) {
      std::memcpy(&qw[(size_t(r) * kQueryBits + b) * W],
                  states + r * qs + QueryState::plane_offset(d_, b), W * 8);
    }
  }
  uint64_t x[kMaxWords];
  for (int64_t i = i0; i < i1; ++i) {
    const uint8_t* row = rows_.row(blocks, i);
    x[W - 1] = 0;  // a plane shorter than a word (d < 64) is zero-padded, like the query's
    std::memcpy(x, rabitq::row_planes(row, 1), plane_bytes(d_));
    int64_t ones = 0;
    for (size_t w = 0; w < W; ++w) ones += std::popcount(x[w]);
    const double f = rows_.factor(row);
    for (int r = 0; r < n_q; ++r) {
      const uint64_t* q = &qw[size_t(r) * kQueryBits * W];
      int64_t dot = 0;
      for (int j = 0; j < kQueryBits; ++j) {
        int64_t c = 0;
        for (size_t w = 0; w < W; ++w) c += std::popcount(x[w] & q[j * W + w]);
        dot += c << j;
      }
      const float* s = states + r * qs;
      const double two_yq =
          double(QueryState::delta(s)) * double(2 * dot - int64_t(QueryState::code_sum(s))) +
          double(QueryState::lower(s)) * double(2 * ones - d_);
      out[size_t(r) * out_stride + size_t(i - i0)] = float(0.5 * f * two_yq);
    }
  }
}

class RabitqValueCodec final : public ValueCodec {
 public:
  RabitqValueCodec(int d, int bits) : d_(d), rows_(d, bits) {}
  int head_dim() const override { return d_; }
  int block_tokens() const override { return kBlockTokens; }
  size_t block_bytes() const override { return kBlockTokens * rows_.row_bytes(); }
  size_t param_bytes() const override { return rows_.param_bytes(); }
  void encode(const float* values, int64_t, uint8_t* block) const override {
    for (int t = 0; t < kBlockTokens; ++t)
      rows_.encode(values + size_t(t) * d_, block + size_t(t) * rows_.row_bytes());
  }
  bool encodes_single_tokens() const override { return true; }
  void encode_token(const float* value, int64_t, int slot, uint8_t* block) const override {
    rows_.encode(value, block + size_t(slot) * rows_.row_bytes());
  }
  void decode(const uint8_t* block, int64_t, float* values) const override {
    for (int t = 0; t < kBlockTokens; ++t)
      rows_.decode(block + size_t(t) * rows_.row_bytes(), values + size_t(t) * d_);
  }
  size_t accum_floats() const override { return size_t(d_); }
  void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, int64_t,
                  int64_t i0, int64_t i1, float* acc) const override {
    rows_.tiles(blocks, i0, i1, [&](int64_t a, int64_t n, const float* tile) {
      float_accumulate(w + (a - i0), w_stride, n_q, tile, size_t(d_), n, d_, acc, size_t(d_));
    });
  }
  void finalize(const float* acc, int n_q, float* out) const override {
    std::copy_n(acc, size_t(n_q) * d_, out);
  }

 private:
  int d_;
  RabitqRows rows_;
};

class RabitqMethod final : public RotatedMethod {
 public:
  explicit RabitqMethod(const ParamValues& v)
      : RotatedMethod(v), bits_(param_int(v, "bits")) {}
  std::unique_ptr<KeyCodec> key_codec(const CodecContext& ctx) const override {
    check(ctx.head_dim);
    const uint64_t rot = rotation_seed(ctx.layer, 0);
    uint64_t dither = rot ^ 0x51ab17c0de5eed5bull;  // the query offsets' own stream
    return rotate_keys(std::make_unique<RabitqKeyCodec>(ctx.head_dim, bits_, splitmix64(dither)),
                       rot);
  }
  std::unique_ptr<ValueCodec> value_codec(const CodecContext& ctx) const override {
    check(ctx.head_dim);
    return rotate_values(std::make_unique<RabitqValueCodec>(ctx.head_dim, bits_),
                         rotation_seed(ctx.layer, 1));
  }
  double key_bits(int d) const override { return bits(d); }
  double value_bits(int d) const override { return bits(d); }

 private:
  double bits(int d) const { return bits_ + 8.0 * double(rabitq::scalar_bytes(bits_)) / d; }
  static void check(int d) {
    check_hadamard_dim("rabitq", d, 8);
  }
  int bits_;
};

}  // namespace

const MethodDef& rabitq_method() {
  static const MethodDef def{
      {"rabitq",
       "RaBitQ (1 bit) / Extended RaBitQ (2-4 bits): norm + randomized Hadamard rotation + grid "
       "codes "
       "with the <o_bar,o> correction",
       rotated_method_params({{"bits", ParamType::kInt, 1, 1, 4, "bits per coordinate", {}}})},
      [](const ParamValues& v) -> std::unique_ptr<MethodImpl> {
        return std::make_unique<RabitqMethod>(v);
      }};
  return def;
}

}  // namespace vq::kv
