// RaBitQ's one-bit scores by AND and popcount over the lane layout of turbo_lanes.h at one bit
// (a block of 16 tokens: their 16 fp16 factors, then per group of 32 channels one 32-bit word of
// signs per token, laid out [group][token]). Tokens sit in the vector lanes: a group's word of 8
// or 16 tokens is one load, ANDed with each bit plane of the 4-bit query (one broadcast 32-bit
// word) and counted per lane (vpopcntd on AVX-512 with VPOPCNTDQ), so a token's popcounts never
// need a horizontal sum. Per token and query it is the paper's formula (rabitq.cpp):
//   <x_b, q_u> = sum_j 2^j popcount(x_b AND q_u^(j)),
//   score = factor / 2 * (delta (2 <x_b, q_u> - sum q_u) + v_l (2 popcount(x_b) - d)),
// integer until the last line, whose multiplies and adds are kept apart: every SIMD target and
// the scalar fallback give the same bits.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vq::kv {

// out[r * out_stride + (i - i0)] for queries r < n_q (prepared states of `qs` floats each, laid
// out as rabitq::QueryState) and tokens i in [i0, i1) of a run of blocks of `bb` bytes. d is a
// multiple of 32 and at most 4096.
void rabitq_sign_scores_lanes(const float* states, int n_q, size_t qs, const uint8_t* blocks,
                              size_t bb, int d, int64_t i0, int64_t i1, float* out,
                              size_t out_stride);

}  // namespace vq::kv
