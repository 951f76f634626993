// The entry point of KVQuant's key kernel (kvquant_lane_kernels.cpp), dispatched to the best SIMD
// target: scores straight from pre-RoPE codes in the token-lane layout (kvquant_lanes.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace vq::kv::kvquant_lanes {

// Angle columns per pair: b < 256 + 16, so that a block of 16 tokens that starts at b <= 255
// stays inside.
inline constexpr size_t kAngleColumns = 272;

// What the key kernel reads besides the blocks: the channel ranges and levels of the layer, and
// the RoPE angles of the positions in a block, by pair.
struct RopeKeys {
  int d = 0, bits = 0;
  bool neox = false;           // pairs (i, i + d/2); otherwise (2i, 2i + 1)
  // [pair][first, second channel][16]: mid_c + half_c * level(i mod 2^bits), the key before RoPE
  // for code i
  const float* tables = nullptr;
  // [pair][cos, sin][cols]: of b theta_pair for b < cols (= kAngleColumns)
  const float* angles = nullptr;
  size_t cols = 0;
  // The outlier slots after the code words (words_bytes of them): 16 counts, then S x 16 fp16
  // values, then S x 16 channel indices of ib bytes, slot-major so that a slot of 16 tokens is
  // one vector.
  size_t words_bytes = 0;
  int S = 0, ib = 1;
};

// The value blocks: 16 fp16 scales and the code words (zeros_at bytes), 16 fp16 zeros, then the
// outlier slots as the keys' without the counts (every slot is used).
struct LaneValues {
  int d = 0;
  size_t zeros_at = 0;
  int S = 0, ib = 1;
};

// out rows (out_stride apart) = for tokens [i0, i1): q_r . R(b_i) key_i, the outlier slots in
// place, for 4 query rows q (qs floats apart; fewer rows are not read past n_q). The code words
// start each block (bb bytes apart); b_i = col0 + i - 16 floor(i0 / 16), the angle column of
// token i, so col0 is the column of the first token of i0's block. Requires
// col0 + 16 * (blocks touched) <= cols.
void rope_scores(const RopeKeys& k, const float* q, int n_q, size_t qs, const uint8_t* blocks, size_t bb, int64_t i0,
                 int64_t i1, int64_t col0, float* out, size_t out_stride);

// What the values add to acc rows (acc_stride apart) beyond the levels times the scales, for
// tokens [i0, i1) with weights w (rows w_stride apart, token i0 first): sum_t w_t zero_t to
// acc[d], and w_t times each outlier slot's sparse value to its channel.
void value_extras(const LaneValues& v, const float* w, size_t w_stride, int n_q, const uint8_t* blocks, size_t bb,
                  int64_t i0, int64_t i1, float* acc, size_t acc_stride);

}  // namespace vq::kv::kvquant_lanes
