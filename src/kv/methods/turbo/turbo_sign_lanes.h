// One-bit TurboQuant rows (turbo_rows.h with a table of two levels: TurboQuant-MSE at bits=1,
// RaBitQ's sign codes) as values, laid out as bit planes of tokens per channel, and the fused
// accumulation that reads them through tables of partial weight sums (turbo_sign_lanes.cpp).
// Keys keep the token-lane layout of turbo_lanes.h, which their nibble-table scores need; only
// the values' bytes are arranged differently, so bits per element are unchanged.
//
// A block holds 16 tokens: their 16 fp16 scales, then for each channel c a 16-bit word whose bit
// t is token t's code at c (2 + d/8 bytes per token, as the row layout).
//
//   accumulate: acc_c += sum_t (w_t scale_t) level(bit_tc). Per 4 tokens and query row, a table
//               of 16 partial sums T[i] = sum_j w_j scale_j level(bit j of i) is built once (4
//               multiply-adds); then every channel's contribution of those 4 tokens is one
//               register lookup of T by the channel's 4 token bits (channels in the lanes) and one
//               add. Per token and query row that is d/64 lookups and adds on AVX-512, against d/16
//               level lookups shared by the rows and d/16 multiply-adds per row when tokens sit in
//               the lanes: accumulation, not scoring, is where a one-bit method's time goes
//               otherwise (docs/performance.md, RaBitQ).
//
// This is the transpose of the key side's nibble tables (turbo_lanes.h, 4 channels a nibble):
// there the query is fixed and tokens vary, here the weights of 4 tokens are fixed per table and
// channels vary.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vq::kv::sign_lanes {

// The layout applies at one bit when d is a multiple of 32 and at most 4096, as the token lanes
// do (turbo_lanes_apply). TurboLanePart (turbo_lanes.h) is the way in for codecs.
bool apply(int d, int bits);
size_t block_bytes(int d);
// Token t's codes (bit 0 of each) and fp16 scale into a block; the other tokens' bits are kept.
void put(const uint8_t* codes, uint16_t scale, int t, int d, uint8_t* block);
int code(const uint8_t* block, int t, int c);
// The 4 x 16 floats the tables are built from: patterns[16 j + i] = level(bit j of i).
void make_patterns(float level0, float level1, float* patterns);
// acc rows (acc_stride apart) += sum over tokens [i0, i1) of w_t scale_t level(bit_tc); blocks are
// bb bytes apart (a part of a larger block when bb exceeds block_bytes(d)); patterns 64-byte
// aligned.
void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, size_t bb, int d, int64_t i0,
                int64_t i1, const float* patterns, float* acc, size_t acc_stride);

}  // namespace vq::kv::sign_lanes
