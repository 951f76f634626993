// RaBitQ (Gao and Long, "RaBitQ: Quantizing High-Dimensional Vectors with a Theoretical Error
// Bound for Approximate Nearest Neighbor Search", SIGMOD 2024, https://arxiv.org/abs/2405.12497)
// and, for B >= 2 bits, Extended RaBitQ (Gao, Gou, Xu, Yang, Long, Wong, "Practical and
// Asymptotically Optimal Quantization of High-Dimensional Vectors in Euclidean Space for
// Approximate Nearest Neighbor Search", SIGMOD 2025, https://arxiv.org/abs/2409.09913):
//
//   rabitq:bits=B[,seed=S,residual=R,sink=N]     B in 1..4, default 1
//
// Each key or value o is rotated by P (the project's randomized Hadamard transform, seeded per
// layer and side). Its unit direction u is coded as the grid vector y closest to it in angle
// (rabitq_codes.h: at B = 1 the sign vector, y = sign(u)/2; at B >= 2 Extended RaBitQ's search
// over rescaling factors); the quantized direction is o_bar = P^T y / |y|, with the correction
// <o_bar, o> = <y, u> / |y|. The estimator is the paper's
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
// At two to four bits the rotated query is dotted with the codes' levels, as the papers' library
// scores its extended codes (query times integer codes), through TurboQuant's lane kernels: in
// 16-bit fixed point where d is a multiple of 32 (the query within 1/8190 of its largest
// magnitude; the grid's levels, multiples of 1/2, are exact there; turbo_lanes.h), in float
// otherwise. A 4-bit query would add more error than those codes leave.
//
// Storage: the estimator and the decode use |o| and <o_bar, o> only through the factor
// |o| / (|y| <o_bar, o>), so a token is that factor (fp16) and its codes (rabitq_layout.h):
// TurboQuant's rows with the grid's levels (turbo_rows.h, whose kInnerUnbiased scale is this
// factor), with tokens in the vector lanes (turbo_lanes.h) where d is a multiple of 32. One-bit
// popcounts then run on 8 or 16 tokens at once (rabitq_lanes.h); two to four bits score through
// TurboQuant's lane kernel; values accumulate the linear decode through it in the rotated space
// (at one bit through its per-channel token planes, turbo_sign_lanes.h) and are rotated back once
// per step.
//
// Deviations from the papers, all deliberate:
// - Centroid 0: there is no calibration (no clustering), so each vector is coded around the
//   origin and its norm is stored; the papers code the residual to an IVF cluster centroid.
// - The rotation is the randomized Hadamard transform H D / sqrt(d) (one seeded sign diagonal per
//   layer and side), not a Haar-random orthogonal matrix: O(d log d) and shared with the other
//   rotated methods. The papers' unbiasedness and error bound are proven for Haar rotations; the
//   tests measure both with this one. Other head sizes (Phi-3's 96) take the dense Haar-random
//   rotation the other rotated methods use there, as the papers do; head_dim in [8, 1024] or a
//   power of two up to 4096.
// - The one per-vector scalar is the factor, fp16 (the papers keep |o| and <o_bar, o> apart, in
//   float32); it saturates at 65504 as turbo's norm does.
// - The query's random rounding offsets r_i are drawn from a generator seeded by the codec's
//   seed and the query's bits, so the same query always gives the same state (determinism);
//   the paper draws them fresh.
// - B >= 2 scores use the float rotated query (the library's choice, not the paper's bit-plane
//   form), so they equal the reference decode-then-dot to float rounding. No FastScan batch
//   layout (SIMD lookup tables over 32 codes) at one bit: the paper's "single" mode of popcounts,
//   run on a vector of tokens at once.
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
#include "src/kv/kernels/lut_kernels.h"
#include "src/kv/methods/rabitq/rabitq_codes.h"
#include "src/kv/methods/rabitq/rabitq_lanes.h"
#include "src/kv/methods/rabitq/rabitq_layout.h"
#include "src/kv/methods/turbo/turbo_lanes.h"
#include "src/kv/methods/turbo/turbo_rows.h"
#include "src/kv/registry.h"
#include "src/kv/rotation.h"
#include "veloxquant/error.h"

namespace vq::kv {
namespace {

using rabitq::kBlockTokens;
using rabitq::kQueryBits;
using rabitq::QueryState;

constexpr int kMaxWords = 4096 / 64;
static_assert(kBlockTokens == kTurboBlockTokens, "one bit uses TurboQuant's blocks");

// TurboQuant's rows with the grid's levels y = c - (2^B - 1)/2, codes from the grid search (the
// sign vector at one bit) and the kInnerUnbiased scale |o| / <u, y> = |o| / (|y| <o_bar, o>):
// RaBitQ's factor, so that the rows' decode is the estimator's linear form.
TurboRows grid_rows(int d, int bits) {
  std::vector<float> levels;
  for (int c = 0; c < (1 << bits); ++c) levels.push_back(float(c) - 0.5f * float((1 << bits) - 1));
  const size_t param_bytes = levels.size() * sizeof(float);
  return TurboRows(
      d, bits, std::move(levels),
      [d, bits](const float* u, uint8_t* codes) { rabitq::best_grid_code(u, d, bits, codes); },
      param_bytes, TurboRows::NormMode::kInnerUnbiased);
}

// The paper's randomized uniform scalar quantization of the rotated query, 4 bits.
void quantize_query(const float* q, int d, uint64_t dither_seed, float* state) {
  std::fill_n(state, QueryState::floats(d), 0.0f);
  const float lo = *std::min_element(q, q + d), hi = *std::max_element(q, q + d);
  const float delta = (hi - lo) / float((1 << kQueryBits) - 1);
  // Offsets seeded by the query's own bits: the same query gives the same state, different
  // queries draw independent offsets.
  uint64_t h = dither_seed;
  for (int j = 0; j < d; ++j) {
    h ^= f32_bits(q[j]);
    h = splitmix64(h);
  }
  Rng rng(h);
  uint64_t planes[kQueryBits][kMaxWords] = {};
  int64_t sum = 0;
  for (int j = 0; j < d; ++j) {
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
    std::memcpy(state + QueryState::plane_offset(d, b), planes[b], QueryState::words(d) * 8);
  }
}

// <x_b, q_u> = sum_j 2^j popcount(x_b AND q_u^(j)), then 2 <y, q_bar> = delta (2 <x_b, q_u> -
// sum q_u) + v_l (2 popcount(x_b) - d), all integer but the last step; one token at a time, for
// the row layout (d below 32: at most one word per plane).
void popcount_row_scores(const float* states, int n_q, const uint8_t* blocks, int d, int64_t i0,
                         int64_t i1, float* out, size_t out_stride) {
  const size_t qs = QueryState::floats(d), row = rabitq::row_bytes(d, 1);
  for (int64_t i = i0; i < i1; ++i) {
    const uint8_t* r = blocks + size_t(i) * row;  // blocks of 16 rows follow one another
    uint64_t x = 0;
    std::memcpy(&x, r + rabitq::scalar_bytes(), plane_bytes(d));
    const int64_t ones = std::popcount(x);
    uint16_t h;
    std::memcpy(&h, r, 2);
    const double f = f16_to_f32(h);
    for (int q = 0; q < n_q; ++q) {
      const float* s = states + q * qs;
      int64_t dot = 0;
      for (int j = 0; j < kQueryBits; ++j) {
        uint64_t w;
        std::memcpy(&w, s + QueryState::plane_offset(d, j), 8);
        dot += int64_t(std::popcount(x & w)) << j;
      }
      const double two_yq =
          double(QueryState::delta(s)) * double(2 * dot - int64_t(QueryState::code_sum(s))) +
          double(QueryState::lower(s)) * double(2 * ones - d);
      out[size_t(q) * out_stride + size_t(i - i0)] = float(0.5 * f * two_yq);
    }
  }
}

// One-bit keys: stored and decoded as TurboQuant's sign rows; scored by the paper's popcounts
// against the 4-bit query (on the lane layout 8 or 16 tokens at a time).
class RabitqSignKeyCodec final : public KeyCodec {
 public:
  RabitqSignKeyCodec(int d, uint64_t dither_seed)
      : d_(d), rows_(make_turbo_key_codec(grid_rows(d, 1))), lanes_(turbo_lanes_apply(d, 1)),
        dither_seed_(dither_seed) {}
  int head_dim() const override { return d_; }
  int block_tokens() const override { return kBlockTokens; }
  size_t block_bytes() const override { return rows_->block_bytes(); }
  size_t param_bytes() const override { return rows_->param_bytes(); }
  void encode(const float* keys, int64_t pos0, uint8_t* block) const override {
    rows_->encode(keys, pos0, block);
  }
  bool encodes_single_tokens() const override { return true; }
  void encode_token(const float* key, int64_t pos, int slot, uint8_t* block) const override {
    rows_->encode_token(key, pos, slot, block);
  }
  void decode(const uint8_t* block, int64_t pos0, float* keys) const override {
    rows_->decode(block, pos0, keys);
  }
  size_t query_state_floats() const override { return QueryState::floats(d_); }
  void prepare_query(const float* q, float* state, Workspace&) const override {
    quantize_query(q, d_, dither_seed_, state);
  }
  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1,
              float* out, size_t out_stride, Workspace&) const override {
    if (lanes_) {
      rabitq_sign_scores_lanes(states, n_q, QueryState::floats(d_), blocks, block_bytes(), d_, i0,
                               i1, out, out_stride);
    } else {
      popcount_row_scores(states, n_q, blocks, d_, i0, i1, out, out_stride);
    }
  }

 private:
  int d_;
  std::unique_ptr<KeyCodec> rows_;
  bool lanes_;
  uint64_t dither_seed_;
};

class RabitqMethod final : public RotatedMethod {
 public:
  explicit RabitqMethod(const ParamValues& v)
      : RotatedMethod(v), bits_(param_int(v, "bits")) {}
  std::unique_ptr<KeyCodec> key_codec(const CodecContext& ctx) const override {
    check(ctx.head_dim);
    const uint64_t rot = rotation_seed(ctx.layer, 0);
    uint64_t dither = rot ^ 0x51ab17c0de5eed5bull;  // the query offsets' own stream
    if (bits_ == 1) {
      return rotate_keys(std::make_unique<RabitqSignKeyCodec>(ctx.head_dim, splitmix64(dither)),
                         rot);
    }
    return rotate_keys(make_turbo_key_codec(grid_rows(ctx.head_dim, bits_)), rot);
  }
  std::unique_ptr<ValueCodec> value_codec(const CodecContext& ctx) const override {
    check(ctx.head_dim);
    const uint64_t rot = rotation_seed(ctx.layer, 1);
    return rotate_values(make_turbo_value_codec(grid_rows(ctx.head_dim, bits_)), rot);
  }
  double key_bits(int d) const override { return bits(d); }
  double value_bits(int d) const override { return bits(d); }

 private:
  double bits(int d) const { return bits_ + 8.0 * double(rabitq::scalar_bytes()) / d; }
  static void check(int d) {
    check_rotation_dim("rabitq", d, 8);
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
