// q4's fused key kernel, compiled per SIMD target: scores as integer byte dot products over the
// layout of q4_layout.h (why they are integer, and the fixed point they hold: q4.cpp; the value
// kernel is in q4_value_kernels.cpp).
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL  // byte dot products (VNNI) where the CPU has them
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/methods/baseline/q4_key_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include <cstring>
#include <type_traits>

#include "hwy/highway.h"
#include "src/kv/kernels/byte_dot-inl.h"
#include "src/kv/kernels/fused_kernels-inl.h"
#include "src/kv/methods/baseline/q4_common-inl.h"
#include "src/kv/methods/baseline/q4_kernels.h"
#include "src/kv/methods/baseline/q4_layout.h"

HWY_BEFORE_NAMESPACE();
#include "src/kv/kernels/byte_dot_target.h"  // IWYU pragma: keep
namespace vq::kv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Scores are exact integer dot products of the 4-bit codes with the query held in 16-bit fixed
// point per group of 32 channels (q4_layout.h, QueryState): per chunk, the codes of even and of
// odd channels are masked out as bytes, each 32-bit lane one token, and multiplied by the
// matching query bytes, once per query byte plane. A group's products (two per chunk and plane,
// eight at most) are added as short pair sums (byte_dot-inl.h) and widened once. Per group, the
// two planes' integer sums are joined (high * 256 + low: exact below 2^24) and turned to float
// once.


// One group's kChunks chunks (4, or fewer in a ragged last group) of the block for kPass query rows:
// the joined integer sums per row, stored at joined[r] (16 tokens). A compile-time trip count lets
// the chunk loop unroll with the sums fixed in registers; the float arithmetic is left to a second
// pass (ScoreBlock) to keep them there.
template <int kPass, int kChunks>
HWY_INLINE void ScoreGroup(const float* HWY_RESTRICT q, size_t qs, const uint32_t* HWY_RESTRICT words, int g,
                           int32_t (*HWY_RESTRICT joined)[q4::kBlockTokens]) {
  static_assert(2 * kChunks <= kMaxShortProducts, "a group's products per plane must fit the short sums");
  const DU du;
  const DI di;
  const VU low_nibbles = hn::Set(du, 0x0F0F0F0Fu);
  VI sum[kPass][2][kParts];  // per row, byte plane (hi, lo) and part
  for (int r = 0; r < kPass; ++r) {
    for (int p = 0; p < kParts; ++p) sum[r][0][p] = sum[r][1][p] = hn::Zero(di);
  }
  const int c0 = g * (q4::kGroup / q4::kChunk);
  HWY_UNROLL(4)  // whole, so that the sums are registers rather than an array in memory
  for (int i = 0; i < kChunks; ++i) {
    const int c = c0 + i;
    VI codes[2][kParts];  // even and odd channels' codes, a byte each
    for (int p = 0; p < kParts; ++p) {
      const VU x = hn::LoadU(du, words + c * q4::kBlockTokens + p * kLanes);
      codes[0][p] = hn::BitCast(di, hn::And(x, low_nibbles));
      codes[1][p] = hn::BitCast(di, hn::And(hn::ShiftRight<4>(x), low_nibbles));
    }
    for (int r = 0; r < kPass; ++r) {
      // hi even, hi odd, lo even, lo odd: bits kept in the float state array, read through a
      // may_alias type so that each becomes one broadcast load
      const AliasedI32* w = reinterpret_cast<const AliasedI32*>(q + size_t(r) * qs + q4::QueryState::chunk_word(c, 0));
      for (int k = 0; k < 4; ++k) {
        for (int p = 0; p < kParts; ++p) sum[r][k / 2][p] = DotBytesShortWord(di, sum[r][k / 2][p], codes[k % 2][p], w + k);
      }
    }
  }
  for (int r = 0; r < kPass; ++r) {
    for (int p = 0; p < kParts; ++p) {  // exact: |joined| < 2^24
      const VI j = JoinPlanes(WidenShortSums(di, sum[r][0][p]), WidenShortSums(di, sum[r][1][p]));
      hn::Store(j, di, joined[r] + p * kLanes);
    }
  }
}

template <int kRows>
HWY_INLINE void ScoreBlock(const float* HWY_RESTRICT q, size_t qs, const uint8_t* HWY_RESTRICT blk, int d,
                           float* HWY_RESTRICT out, size_t out_stride) {
  const DF df;
  const DI di;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const int C = q4::n_chunks(d), G = q4::n_groups(d);
  const uint32_t* words = reinterpret_cast<const uint32_t*>(blk);
  const hwy::float16_t* scales = reinterpret_cast<const hwy::float16_t*>(blk + q4::codes_bytes(d));
  constexpr int kPerGroup = q4::kGroup / q4::kChunk;
  static_assert(kRows % kPassRows<kRows> == 0, "whole passes");
  const int full = C / kPerGroup;
  alignas(64) int32_t joined[q4::kMaxGroups][kRows][q4::kBlockTokens];
  for (int r0 = 0; r0 < kRows; r0 += kPassRows<kRows>) {
    const float* qr = q + size_t(r0) * qs;
    for (int g = 0; g < full; ++g) ScoreGroup<kPassRows<kRows>, kPerGroup>(qr, qs, words, g, joined[g] + r0);
    switch (C % kPerGroup) {
      case 1: ScoreGroup<kPassRows<kRows>, 1>(qr, qs, words, full, joined[full] + r0); break;
      case 2: ScoreGroup<kPassRows<kRows>, 2>(qr, qs, words, full, joined[full] + r0); break;
      case 3: ScoreGroup<kPassRows<kRows>, 3>(qr, qs, words, full, joined[full] + r0); break;
      default: break;
    }
  }
  // Per group: scaled by the query's group scale, offset by -8 * (the group's query sum), and
  // weighted by the tokens' fp16 scales.
  for (int p = 0; p < kParts; ++p) {
    VF acc[kRows];
    for (int r = 0; r < kRows; ++r) acc[r] = hn::Zero(df);
    for (int g = 0; g < G; ++g) {
      const VF s = hn::PromoteTo(df, hn::LoadU(dh, scales + g * q4::kBlockTokens + p * kLanes));
      for (int r = 0; r < kRows; ++r) {
        const float* f = q + size_t(r) * qs + q4::QueryState::group_word(C, g);
        const VF part = hn::MulAdd(hn::ConvertTo(df, hn::Load(di, joined[g][r] + p * kLanes)), hn::Set(df, f[0]),
                                   hn::Set(df, f[1]));
        acc[r] = hn::MulAdd(s, part, acc[r]);
      }
    }
    for (int r = 0; r < kRows; ++r) hn::StoreU(acc[r], df, out + size_t(r) * out_stride + p * kLanes);
  }
}

template <int kRows>
void ScoreRows(const float* q, size_t qs, const uint8_t* blocks, int64_t i0, int64_t i1, int d, float* out,
               size_t out_stride) {
  const size_t bb = q4::block_bytes(d);
  alignas(64) float tmp[kRows * q4::kBlockTokens];
  for (int64_t b = i0 / q4::kBlockTokens; b * q4::kBlockTokens < i1; ++b) {
    const uint8_t* blk = blocks + size_t(b) * bb;
    PrefetchBytes(blk + 6 * bb, bb);
    const int64_t first = b * q4::kBlockTokens;
    if (first >= i0 && first + q4::kBlockTokens <= i1) {  // whole block in range: straight to out
      ScoreBlock<kRows>(q, qs, blk, d, out + size_t(first - i0), out_stride);
      continue;
    }
    ScoreBlock<kRows>(q, qs, blk, d, tmp, q4::kBlockTokens);
    const int64_t t0 = std::max(i0, b * q4::kBlockTokens), t1 = std::min(i1, (b + 1) * q4::kBlockTokens);
    for (int r = 0; r < kRows; ++r) {
      for (int64_t i = t0; i < t1; ++i) out[size_t(r) * out_stride + size_t(i - i0)] = tmp[r * q4::kBlockTokens + (i - b * q4::kBlockTokens)];
    }
  }
}

void Q4Scores(const float* q, int n_q, size_t qs, const uint8_t* blocks, int64_t i0, int64_t i1, int d, float* out,
              size_t out_stride) {
  if (i1 <= i0) return;
  int r = 0;
  for (; r + 4 <= n_q; r += 4) ScoreRows<4>(q + size_t(r) * qs, qs, blocks, i0, i1, d, out + size_t(r) * out_stride, out_stride);
  for (; r < n_q; ++r) ScoreRows<1>(q + size_t(r) * qs, qs, blocks, i0, i1, d, out + size_t(r) * out_stride, out_stride);
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq::kv::q4 {
HWY_EXPORT(Q4Scores);
void scores(const float* q, int n_q, size_t qs, const uint8_t* blocks, int64_t i0, int64_t i1, int d, float* out,
            size_t out_stride) {
  HWY_DYNAMIC_DISPATCH(Q4Scores)(q, n_q, qs, blocks, i0, i1, d, out, out_stride);
}
}  // namespace vq::kv::q4
#endif
