// The entry points of TurboQuant's lane kernels (turbo_lane_kernels.cpp), dispatched to the best
// SIMD target; the layout they read is described in turbo_lanes.h. TurboLanePart is the way in for
// codecs.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vq::kv::turbo_lanes {

// The scores of tokens [i0, i1) against n_q queries (qs floats apart) into out rows (out_stride
// apart): written, or with add, added as out + score. Codes of `bits` bits read through table16
// (the levels, 16 floats); blocks bb bytes apart.
void scores(int bits, bool add, const float* q, int n_q, size_t qs, const uint8_t* blocks, size_t bb, int d,
            int64_t i0, int64_t i1, const float* table16, float* out, size_t out_stride);
// The same at one bit from the queries' nibble tables (states, qs floats apart; n_words = d / 32).
void table_scores(bool add, const float* states, int n_q, size_t qs, const uint8_t* blocks, size_t bb, int n_words,
                  int64_t i0, int64_t i1, float* out, size_t out_stride);
// A query row's preparation (TurboLanePart::prepare_query), with its scalar form's bits: the
// nibble tables at one bit (tab: 4 d floats); max |q| over d values, or NaN when one is not
// finite; out[c] = int16(lrint(q[c] * scale)) for |q[c] * scale| < 2^15.
void nibble_tables(const float* q, int d, const float* table16, float* tab);
float abs_max_if_finite(const float* q, int d);
void to_fixed16(const float* q, int d, float scale, int16_t* out);

// Keys at 2 to 4 bits with d a multiple of 32 score in 16-bit fixed point
// (turbo_fixed_kernels.cpp). A query row's state is d / 2 words, one per pair of channels (pair p
// of group g at word 16 g + p: the query at channel 32 g + pair_lo(bits, p) in its low 16 bits,
// at 32 g + pair_hi(bits, p) in its high 16 bits, each round(q * kFixedQuery / max |q|)), then one
// float, the row's unit (max |q| / kFixedQuery times the levels' unit). The levels are
// round(level * kFixedLevel / max |level|). A run of kFixedFlushChannels products of at most
// kFixedQuery * kFixedLevel each sums exactly in 32-bit integers; the runs are added in float.
// Each operand is within half a unit of its exact value (1/8190 of its largest magnitude).
inline constexpr int kFixedQuery = 4095;
inline constexpr int kFixedLevel = 4095;
inline constexpr int kFixedFlushChannels = 128;
static_assert(int64_t(kFixedFlushChannels) * kFixedQuery * kFixedLevel < (int64_t(1) << 31),
              "a run of products must sum exactly in 32 bits");
// The channels (of a group of 32) whose levels share a token's 32-bit lane as pair p: the two
// halves of a 32-bit code word hold them at the same offsets at 2 and 4 bits; at 3 bits the
// halves do not line up with the codes and channel p pairs with p + 16.
constexpr int pair_lo(int bits, int p) {
  return bits == 3 ? p : (p / (16 / bits)) * (32 / bits) + p % (16 / bits);
}
constexpr int pair_hi(int bits, int p) { return bits == 3 ? p + 16 : pair_lo(bits, p) + 16 / bits; }
inline bool fixed_scores_apply(int d, int bits) { return bits >= 2 && bits <= 4 && d % 32 == 0; }
// Values at 2 to 4 bits (d a multiple of 32) sum in fixed point too: per run of kFixedWeightRun
// tokens a query row's weights (times the tokens' scales) take a unit that keeps each within
// kFixedWeight and the sum of their magnitudes within kFixedWeightSum units (plus half a unit of
// rounding per token), so that a channel's sum over the run, and every partial sum, is exact in
// 32-bit integers; the runs are added in float.
inline constexpr int kFixedWeight = 32767;
inline constexpr int kFixedWeightRun = 256;
inline constexpr int kFixedWeightSum = int(((int64_t(1) << 31) - 1) / kFixedLevel) - kFixedWeightRun;
static_assert((int64_t(kFixedWeightSum) + kFixedWeightRun / 2) * kFixedLevel < (int64_t(1) << 31),
              "a run's sum must be exact in 32 bits");
// The scores of scores() from fixed-point states; levels32: the fixed levels, level(i mod 2^bits).
void fixed_scores(int bits, bool add, const float* states, int n_q, size_t qs, const uint8_t* blocks, size_t bb, int d,
                  int64_t i0, int64_t i1, const int16_t* levels32, float* out, size_t out_stride);
// accumulate() in fixed point; level_unit: what one unit of levels32 stands for.
void fixed_accumulate(int bits, const float* w, size_t w_stride, int n_q, const uint8_t* blocks, size_t bb, int d,
                      int64_t i0, int64_t i1, const int16_t* levels32, float level_unit, float* acc, size_t acc_stride);
// acc rows (acc_stride apart) += sum over tokens [i0, i1) of w_t scale_t level(code_t).
void accumulate(int bits, const float* w, size_t w_stride, int n_q, const uint8_t* blocks, size_t bb, int d,
                int64_t i0, int64_t i1, const float* table16, float* acc, size_t acc_stride);

}  // namespace vq::kv::turbo_lanes
