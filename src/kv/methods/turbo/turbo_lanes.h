// TurboQuant rows (turbo_rows.h: an fp16 scale and a code of `bits` bits per rotated coordinate,
// read through a table of 2^bits levels) laid out with tokens in the vector lanes, and the fused
// kernels that read them (turbo_lane_kernels.cpp). The quantizer is the rows' own; only where the
// codes sit differs from the row layout, so bits per element are unchanged.
//
// A block holds 16 tokens: their 16 fp16 scales, then the code words (lane_words.h): for each
// group of 32 channels `bits` words per token, laid out [group][word m][token t]: token t's 32 codes of the group as one
// bit string over its words (code k at bits bits*k .. bits*k+bits-1, low words first; at 3 bits
// codes 10 and 21 straddle two words). One vector load gives a word of 8 or 16 tokens, and a
// channel's codes come out with a shift (two and an or when they straddle) and one register
// table lookup of the levels (vpermps/vpermps + blend at 4 bits on AVX2, vpermps on AVX-512),
// which ignores the bits of the next channels above the code.
//
//   scores:     q . x_hat = scale_t * sum_c q'_c level(code_tc); tokens in lanes, no horizontal
//               sums. At 2 to 4 bits (head_dim a multiple of 32) the prepared query and the
//               levels are 16-bit fixed point and two channels are one multiply-add of 16-bit
//               pairs (turbo_fixed_kernels.cpp; a deviation from float scores within 1/8190 of
//               each operand's largest magnitude, turbo_lane_kernels.h). Otherwise the query
//               (already rotated by the wrapper) is read chunk-major in float. At 1 bit
//               (head_dim <= 512) the prepared query is instead a table per nibble of 4 channels
//               (the 16 partial sums sum_j q'_c0+j level(bit j)), and a token costs one register
//               lookup and one add per 4 channels.
//   accumulate: acc'_c += sum_t (w_t scale_t) level(code_tc) in the rotated space; per channel
//               the lanes are summed once per run of 256 tokens. At 2 to 4 bits (head_dim a
//               multiple of 32) the weights and the levels are 16-bit fixed point and a lane holds
//               one channel of tokens t and t + 8 (turbo_fixed_kernels.cpp).
//
// The lane codecs apply when bits is 1..4, head_dim is a multiple of 32 and at most 4096;
// otherwise the row layout (RowKeyCodec / RowValueCodec) keeps serving the rows. A lane part of
// other sizes (SpectralQuant's parts) keeps the channels past the last whole group of 32 as a
// tail of bytes (lane_words.h), at 2 to 4 bits.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "src/kv/methods/turbo/turbo_rows.h"
#include "src/kv/methods/turbo/turbo_sign_lanes.h"
#include "veloxquant/kv/codec.h"

namespace vq::kv {

// One part of a block in the token-lane layout for (d, bits) (for values at one bit, the
// per-channel token planes of turbo_sign_lanes.h): its scalar put and decode, and its fused
// kernels over blocks `stride` bytes apart, the part at the same offset in each. The lane codecs
// are one part per block; TurboQuant-Prod keeps two side by side (its codes and its residual's
// sketch). Requires turbo_lane_part_applies(d, bits).
class TurboLanePart {
 public:
  // levels: the 2^bits levels a code stands for before the token's scale; values: the value layout.
  // fixed_point: at 2 to 4 bits keys score and values sum in fixed point
  // (turbo_fixed_kernels.cpp); a codec that calls the kernels for a few tokens at a time (the
  // outlier split, per group of 32) keeps float, whose preparation is a copy.
  TurboLanePart(int d, int bits, std::vector<float> levels, bool values, bool fixed_point = true);
  int d() const { return d_; }
  size_t bytes() const;
  // Token t's codes and fp16 scale (the other tokens' bytes are kept).
  void put(const uint8_t* codes, uint16_t scale, int t, uint8_t* part) const;
  // Token t's code of channel c.
  int code(const uint8_t* part, int t, int c) const;
  // The 16 tokens, x = scale * level(code), d floats each.
  void decode(const uint8_t* part, float* x) const;
  // Token t's scale, and where the code words begin, in a key part (the layout above; a codec's
  // own kernel reads them, as QJL's keys do with many query rows).
  float scale(const uint8_t* part, int t) const;
  const uint8_t* words(const uint8_t* part) const;

  // Keys: the prepared query (query_state_floats), and the scores of rows state_stride apart.
  size_t query_state_floats() const;
  void prepare_query(const float* q, float* state) const;
  void scores(const float* states, size_t state_stride, int n_q, const uint8_t* blocks, size_t stride, int64_t i0,
              int64_t i1, float* out, size_t out_stride) const;
  // The same scores added to what out holds (out + score, per token): the parts of a codec whose
  // score is a sum of parts (TurboQuant's pieces and Prod, SpectralQuant) add theirs in turn.
  void add_scores(const float* states, size_t state_stride, int n_q, const uint8_t* blocks, size_t stride, int64_t i0,
                  int64_t i1, float* out, size_t out_stride) const;
  // Values: acc rows (acc_stride apart, d floats used) += sum_t w_t scale_t level(code_t).
  void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, size_t stride, int64_t i0,
                  int64_t i1, float* acc, size_t acc_stride) const;

 private:
  void score(bool add, const float* states, size_t state_stride, int n_q, const uint8_t* blocks, size_t stride,
             int64_t i0, int64_t i1, float* out, size_t out_stride) const;
  int d_, bits_;
  bool signs_, tables_, fixed_;
  std::vector<float> levels_;
  alignas(64) std::array<float, 16> table16_;
  alignas(64) std::array<int16_t, 32> fixed_levels_{};  // the levels in fixed point (fixed_)
  float fixed_level_unit_ = 0.0f;                        // what one unit of fixed_levels_ stands for
  alignas(64) std::array<float, 64> patterns_{};
};

bool turbo_lanes_apply(int d, int bits);
// A part of d channels: turbo_lanes_apply, or d not a multiple of 32 at 2 to 4 bits (a tail).
bool turbo_lane_part_applies(int d, int bits);
// One-bit key parts up to this d score through per-nibble query tables (4 d floats of state per
// query); above it, through the query itself.
inline constexpr int kTurboLaneTableDim = 512;
// The lane codecs when turbo_lanes_apply holds (at one bit, values take the per-channel token
// planes of turbo_sign_lanes.h instead), the row codecs otherwise.
std::unique_ptr<KeyCodec> make_turbo_key_codec(TurboRows rows, bool fixed_point = true);
std::unique_ptr<ValueCodec> make_turbo_value_codec(TurboRows rows, bool fixed_point = true);

}  // namespace vq::kv
