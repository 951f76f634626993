// KIVI's lane kernels for keys, compiled per SIMD target: scores over the per-channel key layout
// of kivi_lanes.h (the codecs that write it are in kivi_lanes.cpp; the value side is in
// kivi_value_kernels.cpp).
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL  // byte dot products (VNNI) where the CPU has them
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/methods/kivi/kivi_key_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include <algorithm>
#include <cstring>
#include <utility>

#include "hwy/highway.h"
#include "src/core/fp16.h"
#include "src/kv/kernels/byte_dot-inl.h"
#include "src/kv/kernels/fused_kernels-inl.h"
#include "src/kv/methods/kivi/kivi_lane_common-inl.h"
#include "src/kv/methods/kivi/kivi_lane_kernels.h"

HWY_BEFORE_NAMESPACE();
#include "src/kv/kernels/byte_dot_target.h"  // IWYU pragma: keep
namespace vq::kv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ---- keys: scores -------------------------------------------------------------------------
//
// Integer byte dot products (DotBytes: vpdpbusd with AVX-512 VNNI, 64 multiply-adds per
// instruction against an FMA's 16). Per token group, each query row's group-folded query
// q_c s_c is held in 16-bit fixed point, T_c = round(q_c s_c / unit) with unit = max_c |q_c s_c| /
// 32512, as two signed byte planes hi = (T + 128) >> 8 and lo = T - 256 hi (q4's split): within
// unit / 2 = max / 65024 of its value. (One byte plane, a 1/254 step, was too coarse: outlier
// channels set the max, and the other channels' query was then held to a few levels, an error
// as large as the 2-bit keys' own. A unit from max |q| * max s, which spares the fold a product
// per channel, was too coarse on outlier-heavy keys for the same reason.) A shift and a mask of
// a chunk's words give four channels' codes as the bytes of each token's lane, which multiply
// the matching four query bytes of each plane, broadcast from one word. The integer sums are
// exact; a score is unit * (256 sum_hi + sum_lo) + sum_c q_c z_c.


// Query bytes of a group (FoldGroup): chunk-major, [d/C chunks][kRows][2 planes (lo, hi)][C],
// C = 32 / b channels a chunk (16 at 3 bits: the chunks of the codes' 2-bit plane).
template <int kBits>
constexpr int ChunkChannels() {
  return kBits == 3 ? 16 : 32 / kBits;
}
template <int kBits, int kRows>
constexpr size_t QueryBytesAt(int ch, int r, int plane) {
  return (size_t(ch) * kRows * 2 + size_t(r) * 2 + size_t(plane)) * ChunkChannels<kBits>();
}

template <int kBits, int kRows, int kPass, size_t... J>
HWY_INLINE void ScoreChunk(const VU* x, const int8_t* qc, VI (*lo)[kParts], VI (*hi)[kParts],
                           std::index_sequence<J...>) {
  (DotField<kBits, int(J), kPass, 32 / kBits>(x, qc, 4 * int(J), lo, hi), ...);
}

// Rows r0 .. r0+kPass-1 of ScoreSub. At 3 bits a code is lo + 4 hi: chunk ch of the 2-bit plane
// (16 channels) and fields 4 (ch % 2) .. +3 of chunk ch / 2 of the 1-bit plane after it hold the
// same channels, joined into one byte a code before each dot product (DotField3).
template <int kBits, int kRows, int kPass>
HWY_INLINE void ScoreSubPass(const int8_t* HWY_RESTRICT qi, const float* unit, const float* bias, int r0,
                             const uint32_t* words, int d, float* HWY_RESTRICT out, size_t out_stride) {
  const DF df;
  const DU du;
  VI lo[kPass][kParts], hi[kPass][kParts];
  ZeroSums<kPass>(lo, hi);
  WideSums<kPass> wide;
  // Short sums are widened every `step` chunks (each chunk is kFields products a sum); wide sums
  // take all the chunks in one step.
  constexpr int kFields = kBits == 3 ? 4 : 8 / kBits;
  const int chunks = d / ChunkChannels<kBits>();
  const int step = kShortPairSums ? kShortProductsOf<kBits> / kFields : std::max(chunks, 1);
  for (int c0 = 0; c0 < chunks; c0 += step) {
    const int c1 = std::min(chunks, c0 + step);
    if constexpr (kBits == 3) {
      const uint32_t* high = words + size_t(d / 16) * kSub;
      for (int ch = c0; ch < c1; ++ch) {
        VU x2[kParts], x1[kParts];
        for (int p = 0; p < kParts; ++p) {
          x2[p] = hn::LoadU(du, words + size_t(ch) * kSub + p * kLanes);
          x1[p] = hn::LoadU(du, high + size_t(ch / 2) * kSub + p * kLanes);
        }
        DotJoinedChunk<kPass, 16>(x2, x1, ch % 2, qi + QueryBytesAt<3, kRows>(ch, r0, 0), lo, hi);
      }
    } else {
      for (int ch = c0; ch < c1; ++ch) {
        VU x[kParts];
        for (int p = 0; p < kParts; ++p) x[p] = hn::LoadU(du, words + size_t(ch) * kSub + p * kLanes);
        ScoreChunk<kBits, kRows, kPass>(x, qi + QueryBytesAt<kBits, kRows>(ch, r0, 0), lo, hi,
                                        std::make_index_sequence<8 / kBits>());
      }
    }
    if constexpr (kShortPairSums) WidenInto<kPass>(lo, hi, c0 > 0, &wide);
  }
  if constexpr (kShortPairSums) LoadWide<kPass>(wide, lo, hi);
  for (int r = 0; r < kPass; ++r) {
    const VF a = hn::Set(df, unit[r0 + r]), b = hn::Set(df, bias[r0 + r]);
    for (int p = 0; p < kParts; ++p) {
      hn::StoreU(hn::Add(hn::Mul(a, JoinedSum(hi[r][p], lo[r][p])), b), df, out + size_t(r0 + r) * out_stride + p * kLanes);
    }
  }
}

// out[r * out_stride + t] = bias_r + unit_r * sum_c T_r[c] code_c(t) for the 16 tokens of a
// sub-block. Every query word a chunk needs sits at a fixed offset from one pointer.
template <int kBits, int kRows>
HWY_INLINE void ScoreSub(const int8_t* HWY_RESTRICT qi, const float* unit, const float* bias, const uint32_t* words,
                         int d, float* HWY_RESTRICT out, size_t out_stride) {
  constexpr int kPass = kRows < kRowsPerPass ? kRows : kRowsPerPass;
  static_assert(kRows % kPass == 0, "rows must split into whole passes");
  for (int r0 = 0; r0 < kRows; r0 += kPass) ScoreSubPass<kBits, kRows, kPass>(qi, unit, bias, r0, words, d, out, out_stride);
}

// A group's scales folded into the held query: unit_r = max_c |q_r[c] s_c| / 32512 and T_r[c] =
// round(q_r[c] s_c / unit_r) (0 when unit_r is 0), stored as byte planes where ScoreSub reads
// them (QueryBytesAt); the zeros go into a bias (bias_r = sum_c q_r[c] z_c). prod is scratch of
// kRows * d floats (the products, computed once for the maximum and the rounding); d is a multiple
// of C. Every target computes the same bytes (the products, maxima and
// round-to-nearest-even are the same operations on the same floats).
template <int kBits, int kRows>
HWY_INLINE void FoldGroup(const float* HWY_RESTRICT q, size_t qs, const hwy::float16_t* HWY_RESTRICT sz, int d,
                          float* HWY_RESTRICT prod, int8_t* HWY_RESTRICT qi, float* unit, float* bias) {
  constexpr int C = ChunkChannels<kBits>();
  const hn::CappedTag<float, C> dc;  // at most one chunk per vector
  using V = hn::Vec<decltype(dc)>;
  const int N = int(hn::Lanes(dc));
  V b[kRows], m[kRows];
  for (int r = 0; r < kRows; ++r) b[r] = m[r] = hn::Zero(dc);
  constexpr int kPassRows = kRows < kStageRows ? kRows : kStageRows;
  for (int r0 = 0; r0 < kRows; r0 += kPassRows) {
    for (int c = 0; c < d; c += N) {
      V s, z;
      LoadPairs(dc, sz, c, &s, &z);
      for (int r = r0; r < r0 + kPassRows; ++r) {
        const V qv = hn::LoadU(dc, q + size_t(r) * qs + c);
        const V x = hn::Mul(qv, s);
        hn::StoreU(x, dc, prod + size_t(r) * d + c);
        m[r] = MaxAbs(m[r], x);
        b[r] = hn::MulAdd(qv, z, b[r]);
      }
    }
  }
  V inv[kRows];
  for (int r = 0; r < kRows; ++r) {
    bias[r] = hn::GetLane(hn::SumOfLanes(dc, b[r]));
    const float mx = hn::GetLane(hn::MaxOfLanes(dc, m[r]));
    unit[r] = mx / kFixedOne;
    inv[r] = hn::Set(dc, mx > 0.0f ? kFixedOne / mx : 0.0f);
  }
  const hn::Rebind<int8_t, decltype(dc)> d8;
  // |T| <= 32512 up to the rounding of the products: hi and lo are in -128..127.
  const auto T = [&](int r, int c) HWY_ATTR { return RoundToInt(hn::Mul(hn::LoadU(dc, prod + size_t(r) * d + c), inv[r])); };
  if (2 * N == C) {  // a chunk is two vectors (AVX2 at 2 and 3 bits)
    for (int c = 0; c < d; c += C) {
      for (int r = 0; r < kRows; ++r) StorePlanesOfTwo<C>(d8, T(r, c), T(r, c + N), qi + QueryBytesAt<kBits, kRows>(c / C, r, 0));
    }
  } else {
    for (int c = 0; c < d; c += N) {
      for (int r = 0; r < kRows; ++r) StorePlanes<C>(d8, T(r, c), qi + QueryBytesAt<kBits, kRows>(c / C, r, 0) + c % C);
    }
  }
}

constexpr int kCodesAhead = 2;  // sub-blocks of codes fetched ahead of the one scored

// Scores of run tokens [i0, i1) for kRows query rows (q: rows of stride qs floats).
template <int kBits, int kRows>
void KeyScoresRows(const float* q, size_t qs, const uint8_t* blocks, size_t bb, int d, int R, int G, int64_t i0,
                   int64_t i1, float* out, size_t out_stride) {
  const size_t params = size_t(R / G) * d * 4, sub = size_t(d) * kBits / 32 * kSub * 4;
  alignas(64) float prod[kRows * 4096];
  alignas(64) int8_t qi[kRows * 2 * 4096];
  float unit[kRows], bias[kRows];
  alignas(64) float tmp[kRows * kSub];
  for (int64_t i = i0; i < i1;) {
    const int64_t b = i / R;
    const int t = int(i % R), j = t / G;
    const int64_t g_end = std::min<int64_t>(i1, b * R + int64_t(j + 1) * G);
    const uint8_t* block = blocks + size_t(b) * bb;
    // The next block's scales and zeros, once per block (its codes are fetched ahead below).
    if (j == R / G - 1) PrefetchBytes(block + bb, params);
    FoldGroup<kBits, kRows>(q, qs, reinterpret_cast<const hwy::float16_t*>(block + size_t(j) * d * 4), d, prod, qi,
                            unit, bias);
    for (int64_t u = (i - b * R) / kSub; b * R + u * kSub < g_end; ++u) {
      const int64_t first = b * R + u * kSub;
      const uint32_t* words = reinterpret_cast<const uint32_t*>(block + params + size_t(u) * sub);
      // The codes kCodesAhead sub-blocks ahead; past the block's end, those of the next block,
      // behind its scales and zeros (a block past the run's end is memory never read: harmless).
      const int64_t ahead = u + kCodesAhead;
      PrefetchBytes(ahead < R / kSub ? block + params + size_t(ahead) * sub
                                     : block + bb + params + size_t(ahead - R / kSub) * sub,
                    sub);
      if (first >= i && first + kSub <= g_end) {
        ScoreSub<kBits, kRows>(qi, unit, bias, words, d, out + (first - i0), out_stride);
      } else {
        ScoreSub<kBits, kRows>(qi, unit, bias, words, d, tmp, kSub);
        const int64_t a = std::max(i, first), e = std::min(g_end, first + kSub);
        for (int r = 0; r < kRows; ++r) {
          for (int64_t x = a; x < e; ++x) out[size_t(r) * out_stride + size_t(x - i0)] = tmp[r * kSub + (x - first)];
        }
      }
    }
    i = g_end;
  }
}

template <int kBits>
void KeyScoresT(const float* q, int n_q, size_t qs, const uint8_t* blocks, size_t bb, int d, int R, int G, int64_t i0,
                int64_t i1, float* out, size_t out_stride) {
  int r = 0;
  for (; r + 4 <= n_q; r += 4) {
    KeyScoresRows<kBits, 4>(q + size_t(r) * qs, qs, blocks, bb, d, R, G, i0, i1, out + size_t(r) * out_stride, out_stride);
  }
  for (; r < n_q; ++r) {
    KeyScoresRows<kBits, 1>(q + size_t(r) * qs, qs, blocks, bb, d, R, G, i0, i1, out + size_t(r) * out_stride, out_stride);
  }
}

void KiviLanesKeyScores(int bits, const float* q, int n_q, size_t qs, const uint8_t* blocks, size_t bb, int d, int R,
                        int G, int64_t i0, int64_t i1, float* out, size_t out_stride) {
  if (i1 <= i0) return;
  if (bits == 2) {
    KeyScoresT<2>(q, n_q, qs, blocks, bb, d, R, G, i0, i1, out, out_stride);
  } else if (bits == 3) {
    KeyScoresT<3>(q, n_q, qs, blocks, bb, d, R, G, i0, i1, out, out_stride);
  } else {
    KeyScoresT<4>(q, n_q, qs, blocks, bb, d, R, G, i0, i1, out, out_stride);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq::kv::kivi_lanes {
HWY_EXPORT(KiviLanesKeyScores);

void key_scores(int bits, const float* q, int n_q, size_t qs, const uint8_t* blocks, size_t bb, int d, int R, int G,
                int64_t i0, int64_t i1, float* out, size_t out_stride) {
  HWY_DYNAMIC_DISPATCH(KiviLanesKeyScores)(bits, q, n_q, qs, blocks, bb, d, R, G, i0, i1, out, out_stride);
}
}  // namespace vq::kv::kivi_lanes
#endif
