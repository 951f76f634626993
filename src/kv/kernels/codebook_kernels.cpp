// Kernels of product vector quantizers, key side: the Highway nearest-centroid search, and the
// byte lookup-table scores (vpermi2b on AVX-512 VBMI). The value side (sums of weights per
// centroid, folded through the codebook) is in centroid_accumulate_kernels.cpp.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL  // vpermi2b (AVX512_VBMI) where the CPU has it
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/kernels/codebook_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "src/core/simd.h"
#include "src/kv/kernels/codebook_kernels.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

HWY_BEFORE_NAMESPACE();
namespace vq::kv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;

int NearestCentroid(const float* HWY_RESTRICT ct, const float* HWY_RESTRICT norms, int k, int sub,
                    const float* HWY_RESTRICT x) {
  const DF df;
  const DI di;
  const int N = int(hn::Lanes(df));
  auto best = hn::Set(df, std::numeric_limits<float>::infinity());
  auto best_idx = hn::Zero(di);
  const auto lane = hn::Iota(di, 0);
  int c = 0;
  for (; c + N <= k; c += N) {
    auto dot = hn::Zero(df);
    for (int j = 0; j < sub; ++j) dot = hn::MulAdd(hn::Set(df, x[j]), hn::LoadU(df, ct + size_t(j) * k + c), dot);
    const auto dist = hn::NegMulAdd(hn::Set(df, 2.0f), dot, hn::LoadU(df, norms + c));
    const auto closer = hn::Lt(dist, best);  // strict: a lane keeps its first index on ties
    best = hn::IfThenElse(closer, dist, best);
    best_idx = hn::IfThenElse(hn::RebindMask(di, closer), hn::Add(lane, hn::Set(di, c)), best_idx);
  }
  HWY_ALIGN float bd[hn::MaxLanes(DF())];
  HWY_ALIGN int32_t bi[hn::MaxLanes(DI())];
  hn::Store(best, df, bd);
  hn::Store(best_idx, di, bi);
  float m = std::numeric_limits<float>::infinity();
  int idx = 0;
  for (int i = 0; i < N && c > 0; ++i) {
    if (bd[i] < m || (bd[i] == m && bi[i] < idx)) {
      m = bd[i];
      idx = bi[i];
    }
  }
  for (; c < k; ++c) {  // k not a multiple of the lanes (portable targets)
    float dot = 0;
    for (int j = 0; j < sub; ++j) dot += x[j] * ct[size_t(j) * k + c];
    const float dist = norms[c] - 2.0f * dot;
    if (dist < m) {
      m = dist;
      idx = c;
    }
  }
  return idx;
}

// The float tables of lut_u8_prepare for X rows y_x (y_stride apart), T[s][c] = <y_s, c> with the
// sub coordinates' products added j = 0, 1, ..., into X tables (n_sub * 256 floats apart); and per
// row each sub-vector's smallest entry (X lo arrays, n_sub apart), the widest range and the sum of
// the smallest entries. Each centroid vector loads once for all X rows; every row's results are
// those of X = 1. kSub: the sub-vector length known at compile time (the dot products then
// unroll), or 0.
template <int kSub, int X>
void LutFloatTablesMulti(const float* HWY_RESTRICT ct, int n_sub, int sub_rt, const float* HWY_RESTRICT y,
                         size_t y_stride, float* HWY_RESTRICT table, float* HWY_RESTRICT lo, float* range,
                         double* bias) {
  const DF df;
  const int N = int(hn::Lanes(df));
  const int sub = kSub ? kSub : sub_rt;
  const size_t tab = size_t(n_sub) * kLutCentroids;
  for (int s = 0; s < n_sub; ++s) {
    const float* cs = ct + size_t(s) * sub * kLutCentroids;
    hn::Vec<DF> vmin[X], vmax[X];
    for (int x = 0; x < X; ++x) {
      vmin[x] = hn::Set(df, std::numeric_limits<float>::infinity());
      vmax[x] = hn::Neg(vmin[x]);
    }
    for (int c = 0; c < kLutCentroids; c += N) {
      hn::Vec<DF> dot[X];
      const auto c0 = hn::LoadU(df, cs + c);
      for (int x = 0; x < X; ++x) dot[x] = hn::Mul(hn::Set(df, y[size_t(x) * y_stride + size_t(s) * sub]), c0);
      for (int j = 1; j < sub; ++j) {
        const auto cj = hn::LoadU(df, cs + size_t(j) * kLutCentroids + c);
        for (int x = 0; x < X; ++x) {
          dot[x] = hn::Add(dot[x], hn::Mul(hn::Set(df, y[size_t(x) * y_stride + size_t(s) * sub + size_t(j)]), cj));
        }
      }
      for (int x = 0; x < X; ++x) {
        hn::StoreU(dot[x], df, table + size_t(x) * tab + size_t(s) * kLutCentroids + c);
        vmin[x] = hn::Min(vmin[x], dot[x]);
        vmax[x] = hn::Max(vmax[x], dot[x]);
      }
    }
    for (int x = 0; x < X; ++x) {
      lo[size_t(x) * n_sub + s] = hn::GetLane(hn::MinOfLanes(df, vmin[x]));
      range[x] = std::max(range[x], hn::GetLane(hn::MaxOfLanes(df, vmax[x])) - lo[size_t(x) * n_sub + s]);
      bias[x] += lo[size_t(x) * n_sub + s];
    }
  }
}

// The bytes of N floats that are whole numbers in [0, 255]. On AVX-512 a truncating conversion
// and one saturating narrowing (vpmovusdb); elsewhere Highway's conversion and demotion, which
// also guard against values out of range that cannot occur here. The same bytes either way.
template <class D8>
HWY_INLINE void StoreWholeBytes(hn::Vec<DF> v, D8 du8, uint8_t* HWY_RESTRICT p) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  (void)du8;
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtusepi32_epi8(_mm512_cvttps_epi32(v.raw)));
#else
  hn::StoreU(hn::DemoteTo(du8, hn::ConvertTo(DI(), v)), du8, p);
#endif
}

// A row's float table to the state's bytes, bias and step.
void LutBytes(int n_sub, const float* HWY_RESTRICT table, const float* HWY_RESTRICT lo, float range, double bias,
              float* HWY_RESTRICT state) {
  const DF df;
  const int N = int(hn::Lanes(df));
  const float inv = range > 0 ? 255.0f / range : 0.0f;
  const hn::Rebind<uint8_t, DI> du8;
  uint8_t* u = reinterpret_cast<uint8_t*>(state + kLutHeaderFloats);
  const auto zero = hn::Zero(df), top = hn::Set(df, 255.0f), vinv = hn::Set(df, inv);
  for (int s = 0; s < n_sub; ++s) {
    const auto vlo = hn::Set(df, lo[s]);
    for (int c = 0; c < kLutCentroids; c += N) {
      const size_t at = size_t(s) * kLutCentroids + size_t(c);
      const auto x = hn::Round(hn::Mul(hn::Sub(hn::LoadU(df, table + at), vlo), vinv));
      const auto v = hn::Min(hn::Max(hn::IfThenElseZero(hn::Eq(x, x), x), zero), top);  // NaN (a NaN query) -> 0
      StoreWholeBytes(v, du8, u + at);
    }
  }
  std::fill_n(state, kLutHeaderFloats, 0.0f);
  state[0] = float(bias);
  state[1] = range / 255.0f;
}

// lut_u8_prepare for n rows (y_stride apart) into states (state_stride apart): four rows per pass
// over the centroids where their tables fit the scratch, each row's state with LutU8Prepare's bits.
// table: 4 n_sub * 256 floats of scratch; lo: 4 n_sub floats.
template <int X>
HWY_INLINE void LutU8PrepareBlock(const float* HWY_RESTRICT ct, int n_sub, int sub, const float* HWY_RESTRICT ys,
                                  size_t y_stride, float* HWY_RESTRICT table, float* HWY_RESTRICT lo,
                                  float* HWY_RESTRICT states, size_t state_stride) {
  float range[X] = {};
  double bias[X] = {};
  switch (sub) {
    case 2: LutFloatTablesMulti<2, X>(ct, n_sub, sub, ys, y_stride, table, lo, range, bias); break;
    case 4: LutFloatTablesMulti<4, X>(ct, n_sub, sub, ys, y_stride, table, lo, range, bias); break;
    case 8: LutFloatTablesMulti<8, X>(ct, n_sub, sub, ys, y_stride, table, lo, range, bias); break;
    default: LutFloatTablesMulti<0, X>(ct, n_sub, sub, ys, y_stride, table, lo, range, bias); break;
  }
  for (int x = 0; x < X; ++x) {
    LutBytes(n_sub, table + size_t(x) * n_sub * kLutCentroids, lo + size_t(x) * n_sub, range[x], bias[x],
             states + size_t(x) * state_stride);
  }
}

// See lut_u8_prepare in codebook_kernels.h. table: n_sub * 256 floats of scratch; lo: n_sub floats.
void LutU8Prepare(const float* HWY_RESTRICT ct, int n_sub, int sub, const float* HWY_RESTRICT y,
                  float* HWY_RESTRICT table, float* HWY_RESTRICT lo, float* HWY_RESTRICT state) {
  LutU8PrepareBlock<1>(ct, n_sub, sub, y, 0, table, lo, state, 0);
}

void LutU8PrepareRows(const float* HWY_RESTRICT ct, int n_sub, int sub, const float* HWY_RESTRICT ys, size_t y_stride,
                      int n, float* HWY_RESTRICT table, float* HWY_RESTRICT lo, float* HWY_RESTRICT states,
                      size_t state_stride) {
  int r = 0;
  for (; r + 4 <= n; r += 4) {
    LutU8PrepareBlock<4>(ct, n_sub, sub, ys + size_t(r) * y_stride, y_stride, table, lo, states + size_t(r) * state_stride,
                         state_stride);
  }
  for (; r < n; ++r) {
    LutU8PrepareBlock<1>(ct, n_sub, sub, ys + size_t(r) * y_stride, y_stride, table, lo, states + size_t(r) * state_stride,
                         state_stride);
  }
}

#if HWY_TARGET == HWY_AVX3_DL
// Rows r .. r + NR - 1 of lut_u8_scores (NR = 1, 2 or 4), 64 tokens per vector. A sub-vector's
// 256-byte table is four registers; vpermi2b looks up entries 0-127 and 128-255 by the low 7 bits
// of each index byte, and the index's top bit picks between them. The looked-up bytes are summed
// as 16-bit lanes without widening (FAISS's fast-scan trick): `all` adds the vector as 16-bit
// words (even token + 256 * odd token, wrapping) and `odd` adds it shifted right by 8, so even =
// all - 256 * odd exactly while the even sum stays below 2^16 (at most 256 sub-vectors of 255
// each). Batches of 256 sub-vectors add in 32 bits.
//
// Rows share each index load and its top-bit mask. In attention the first pass over a run pulls
// the indices from memory, and a pair of rows keeps more lookups in flight behind those loads
// (docs/performance.md, VecInfer). Four rows at a time share them further where their tables fit
// L1 beside the streams (LutU8QuadRowsFit).
// `fetch`: this pass is the first over the run, so it asks for the indices ahead (later passes find
// them in L2). kByteShuffles: each 128-entry half is two vpermb (64 entries) and a blend by the
// index's bit 6 instead of one vpermi2b (lut_u8_scores_use_vpermb); the same bytes.
template <int NR, bool kByteShuffles>
void LutU8ScoresRows(const float* HWY_RESTRICT states, size_t sf, int n_sub, const uint8_t* HWY_RESTRICT blocks,
                     size_t bb, int64_t i0, int64_t i1, bool fetch, float* HWY_RESTRICT out, size_t out_stride) {
  constexpr int B = kLutBlockTokens;
  const uint8_t* tab[NR];
  __m512 vb[NR], vs[NR];
  for (int r = 0; r < NR; ++r) {
    const float* st = states + size_t(r) * sf;
    tab[r] = lut_u8_tables(st);
    vb[r] = _mm512_set1_ps(lut_u8_bias(st));
    vs[r] = _mm512_set1_ps(lut_u8_step(st));
  }
  for (int64_t a = i0; a < i1;) {
    const int64_t blk = a / B, slot = a % B;
    const int n = int(std::min<int64_t>(i1 - a, B - slot));
    const uint8_t* idx = blocks + size_t(blk) * bb + size_t(slot);
    const __mmask64 m = n == B ? ~__mmask64{0} : (__mmask64{1} << n) - 1;
    __m512i sum[NR][4];
    for (int r = 0; r < NR; ++r) {
      for (int k = 0; k < 4; ++k) sum[r][k] = _mm512_setzero_si512();
    }
    for (int s0 = 0; s0 < n_sub; s0 += 256) {
      const int s1 = std::min(n_sub, s0 + 256);
      __m512i all[NR], odd[NR];
      for (int r = 0; r < NR; ++r) all[r] = odd[r] = _mm512_setzero_si512();
      for (int s = s0; s < s1; ++s) {
        // The block after next.
        if (fetch) _mm_prefetch(reinterpret_cast<const char*>(idx + 2 * bb + size_t(s) * B), _MM_HINT_T0);
        const __m512i x = _mm512_maskz_loadu_epi8(m, idx + size_t(s) * B);
        const __mmask64 top = _mm512_movepi8_mask(x);
        const __mmask64 b6 = kByteShuffles ? _mm512_test_epi8_mask(x, _mm512_set1_epi8(64)) : 0;
        for (int r = 0; r < NR; ++r) {
          const uint8_t* t = tab[r] + size_t(s) * kLutCentroids;
          __m512i low, high;
          if constexpr (kByteShuffles) {
            low = _mm512_mask_blend_epi8(b6, _mm512_permutexvar_epi8(x, _mm512_loadu_si512(t)),
                                         _mm512_permutexvar_epi8(x, _mm512_loadu_si512(t + 64)));
            high = _mm512_mask_blend_epi8(b6, _mm512_permutexvar_epi8(x, _mm512_loadu_si512(t + 128)),
                                          _mm512_permutexvar_epi8(x, _mm512_loadu_si512(t + 192)));
          } else {
            low = _mm512_permutex2var_epi8(_mm512_loadu_si512(t), x, _mm512_loadu_si512(t + 64));
            high = _mm512_permutex2var_epi8(_mm512_loadu_si512(t + 128), x, _mm512_loadu_si512(t + 192));
          }
          const __m512i v = _mm512_mask_blend_epi8(top, low, high);
          all[r] = _mm512_add_epi16(all[r], v);
          odd[r] = _mm512_add_epi16(odd[r], _mm512_srli_epi16(v, 8));
        }
      }
      for (int r = 0; r < NR; ++r) {
        const __m512i even = _mm512_sub_epi16(all[r], _mm512_slli_epi16(odd[r], 8));
        // Within each 128-bit lane, unpack gives tokens 16k..16k+7 (lo) and 16k+8..16k+15 (hi);
        // the qword permutes put them in token order, [lo_k hi_k] for lanes k = 0, 1 and 2, 3.
        const __m512i lo = _mm512_unpacklo_epi16(even, odd[r]), hi = _mm512_unpackhi_epi16(even, odd[r]);
        const __m512i t01 = _mm512_permutex2var_epi64(lo, _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0), hi);
        const __m512i t23 = _mm512_permutex2var_epi64(lo, _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4), hi);
        sum[r][0] = _mm512_add_epi32(sum[r][0], _mm512_cvtepu16_epi32(_mm512_castsi512_si256(t01)));
        sum[r][1] = _mm512_add_epi32(sum[r][1], _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(t01, 1)));
        sum[r][2] = _mm512_add_epi32(sum[r][2], _mm512_cvtepu16_epi32(_mm512_castsi512_si256(t23)));
        sum[r][3] = _mm512_add_epi32(sum[r][3], _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(t23, 1)));
      }
    }
    for (int r = 0; r < NR; ++r) {
      float* oa = out + size_t(r) * out_stride + (a - i0);
      for (int k = 0; k < 4; ++k) {
        const __mmask16 mk = __mmask16(m >> (16 * k));
        if (mk == 0) break;
        const __m512 f = _mm512_add_ps(vb[r], _mm512_mul_ps(vs[r], _mm512_cvtepi32_ps(sum[r][k])));
        _mm512_mask_storeu_ps(oa + 16 * k, mk, f);
      }
    }
    a += n;
  }
}
#endif

#if HWY_TARGET == HWY_AVX2
// 32 tokens of NR rows of lut_u8_scores (idx: the first token's byte of sub-vector 0; sub-vector
// s's bytes kLutBlockTokens further each) by 16-byte shuffles. A sub-vector's table is 16 slices
// of 16 entries: vpshufb looks every token's low nibble up in each slice (broadcast to both
// halves), and a blend keeps it where the token's high nibble names that slice. The bytes are
// summed as 16-bit lanes as in LutU8ScoresRows (even = all - 256 odd), the same integer sums.
template <int NR>
HWY_INLINE void LutU8Scores32(const uint8_t* const* tab, const float* bias, const float* step, int n_sub,
                              const uint8_t* HWY_RESTRICT idx, float* HWY_RESTRICT out, size_t out_stride) {
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  __m256i sum[NR][4];  // 32-bit sums of tokens 0-7, 8-15, 16-23, 24-31
  for (int r = 0; r < NR; ++r) {
    for (int k = 0; k < 4; ++k) sum[r][k] = _mm256_setzero_si256();
  }
  for (int s0 = 0; s0 < n_sub; s0 += 256) {  // at most 256 bytes of 255 in each 16-bit even sum
    __m256i all[NR], odd[NR];
    for (int r = 0; r < NR; ++r) all[r] = odd[r] = _mm256_setzero_si256();
    for (int s = s0; s < std::min(n_sub, s0 + 256); ++s) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(idx + size_t(s) * kLutBlockTokens));
      const __m256i lo = _mm256_and_si256(x, nibble), hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), nibble);
      __m256i v[NR];
      for (int r = 0; r < NR; ++r) v[r] = _mm256_setzero_si256();
      for (int h = 0; h < 16; ++h) {
        const __m256i here = _mm256_cmpeq_epi8(hi, _mm256_set1_epi8(char(h)));
        for (int r = 0; r < NR; ++r) {
          const __m128i slice =
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(tab[r] + size_t(s) * kLutCentroids + 16 * h));
          v[r] = _mm256_blendv_epi8(v[r], _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(slice), lo), here);
        }
      }
      for (int r = 0; r < NR; ++r) {
        all[r] = _mm256_add_epi16(all[r], v[r]);
        odd[r] = _mm256_add_epi16(odd[r], _mm256_srli_epi16(v[r], 8));
      }
    }
    for (int r = 0; r < NR; ++r) {
      const __m256i even = _mm256_sub_epi16(all[r], _mm256_slli_epi16(odd[r], 8));
      // 16-bit tokens: lo = [0-7 | 16-23], hi = [8-15 | 24-31].
      const __m256i lo = _mm256_unpacklo_epi16(even, odd[r]), hi = _mm256_unpackhi_epi16(even, odd[r]);
      const __m128i eight[4] = {_mm256_castsi256_si128(lo), _mm256_castsi256_si128(hi),
                                _mm256_extracti128_si256(lo, 1), _mm256_extracti128_si256(hi, 1)};
      for (int k = 0; k < 4; ++k) sum[r][k] = _mm256_add_epi32(sum[r][k], _mm256_cvtepu16_epi32(eight[k]));
    }
  }
  for (int r = 0; r < NR; ++r) {
    for (int k = 0; k < 4; ++k) {
      const __m256 f = _mm256_cvtepi32_ps(sum[r][k]);
      _mm256_storeu_ps(out + size_t(r) * out_stride + 8 * k,
                       _mm256_add_ps(_mm256_set1_ps(bias[r]), _mm256_mul_ps(_mm256_set1_ps(step[r]), f)));
    }
  }
}
#endif

#if HWY_TARGET == HWY_AVX3
// LutU8Scores32's shuffles on AVX-512 without VBMI (no vpermb): 64 tokens, a whole block, a vector;
// the slice kept under a mask where the high nibble names it. The same integer sums.
template <int NR>
HWY_INLINE void LutU8Scores64(const uint8_t* const* tab, const float* bias, const float* step, int n_sub,
                              const uint8_t* HWY_RESTRICT idx, float* HWY_RESTRICT out, size_t out_stride) {
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  __m512i sum[NR][4];  // 32-bit sums of tokens 16k .. 16k + 15
  for (int r = 0; r < NR; ++r) {
    for (int k = 0; k < 4; ++k) sum[r][k] = _mm512_setzero_si512();
  }
  for (int s0 = 0; s0 < n_sub; s0 += 256) {  // at most 256 bytes of 255 in each 16-bit even sum
    __m512i all[NR], odd[NR];
    for (int r = 0; r < NR; ++r) all[r] = odd[r] = _mm512_setzero_si512();
    for (int s = s0; s < std::min(n_sub, s0 + 256); ++s) {
      const __m512i x = _mm512_loadu_si512(idx + size_t(s) * kLutBlockTokens);
      const __m512i lo = _mm512_and_si512(x, nibble), hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), nibble);
      __m512i v[NR];
      for (int r = 0; r < NR; ++r) v[r] = _mm512_setzero_si512();
      for (int h = 0; h < 16; ++h) {
        const __mmask64 here = _mm512_cmpeq_epi8_mask(hi, _mm512_set1_epi8(char(h)));
        for (int r = 0; r < NR; ++r) {
          const __m128i slice =
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(tab[r] + size_t(s) * kLutCentroids + 16 * h));
          v[r] = _mm512_mask_shuffle_epi8(v[r], here, _mm512_broadcast_i32x4(slice), lo);
        }
      }
      for (int r = 0; r < NR; ++r) {
        all[r] = _mm512_add_epi16(all[r], v[r]);
        odd[r] = _mm512_add_epi16(odd[r], _mm512_srli_epi16(v[r], 8));
      }
    }
    for (int r = 0; r < NR; ++r) {
      const __m512i even = _mm512_sub_epi16(all[r], _mm512_slli_epi16(odd[r], 8));
      // Within each 128-bit lane k, unpack gives tokens 16k .. 16k + 7 (lo) and 16k + 8 .. (hi).
      const __m512i lo = _mm512_unpacklo_epi16(even, odd[r]), hi = _mm512_unpackhi_epi16(even, odd[r]);
      // (The lane index of an extract must be a constant at every optimization level.)
      const __m256i tokens[4] = {
          _mm256_set_m128i(_mm512_extracti32x4_epi32(hi, 0), _mm512_extracti32x4_epi32(lo, 0)),
          _mm256_set_m128i(_mm512_extracti32x4_epi32(hi, 1), _mm512_extracti32x4_epi32(lo, 1)),
          _mm256_set_m128i(_mm512_extracti32x4_epi32(hi, 2), _mm512_extracti32x4_epi32(lo, 2)),
          _mm256_set_m128i(_mm512_extracti32x4_epi32(hi, 3), _mm512_extracti32x4_epi32(lo, 3))};
      for (int k = 0; k < 4; ++k) sum[r][k] = _mm512_add_epi32(sum[r][k], _mm512_cvtepu16_epi32(tokens[k]));
    }
  }
  for (int r = 0; r < NR; ++r) {
    for (int k = 0; k < 4; ++k) {
      const __m512 f = _mm512_cvtepi32_ps(sum[r][k]);
      _mm512_storeu_ps(out + size_t(r) * out_stride + 16 * k,
                       _mm512_add_ps(_mm512_set1_ps(bias[r]), _mm512_mul_ps(_mm512_set1_ps(step[r]), f)));
    }
  }
}
#endif

#if HWY_TARGET != HWY_AVX3_DL
// Rows r .. r + NR - 1 of lut_u8_scores (NR = 1 or 2) without byte permutes: four tokens at a
// time, their index bytes of a sub-vector read as one word that serves every row, so that the
// NR x 4 sums are independent chains (one token's sum alone is a chain of n_sub dependent adds).
// The same integer sums as LutU8ScoresRows, so the same scores.
template <int NR>
void LutU8ScoresLoop(const float* HWY_RESTRICT states, size_t sf, int n_sub, const uint8_t* HWY_RESTRICT blocks,
                     size_t bb, int64_t i0, int64_t i1, float* HWY_RESTRICT out, size_t out_stride) {
  constexpr int B = kLutBlockTokens;
  const uint8_t* tab[NR];
  float bias[NR], step[NR];
  for (int r = 0; r < NR; ++r) {
    const float* st = states + size_t(r) * sf;
    tab[r] = lut_u8_tables(st);
    bias[r] = lut_u8_bias(st);
    step[r] = lut_u8_step(st);
  }
  for (int64_t a = i0; a < i1;) {
    const int64_t blk = a / B, slot = a % B;
    const int n = int(std::min<int64_t>(i1 - a, B - slot));
    const uint8_t* idx = blocks + size_t(blk) * bb + size_t(slot);
    int t = 0;
#if HWY_TARGET == HWY_AVX2
    for (; t + 32 <= n; t += 32) LutU8Scores32<NR>(tab, bias, step, n_sub, idx + t, out + (a - i0 + t), out_stride);
#elif HWY_TARGET == HWY_AVX3
    if (n == kLutBlockTokens) {
      LutU8Scores64<NR>(tab, bias, step, n_sub, idx, out + (a - i0), out_stride);
      t = n;
    }
#endif
    for (; t + 4 <= n; t += 4) {
      uint32_t sum[NR][4] = {};
      for (int s = 0; s < n_sub; ++s) {
        uint32_t w;
        std::memcpy(&w, idx + size_t(s) * B + size_t(t), 4);
        for (int r = 0; r < NR; ++r) {
          const uint8_t* ts = tab[r] + size_t(s) * kLutCentroids;
          sum[r][0] += ts[w & 0xFF];
          sum[r][1] += ts[(w >> 8) & 0xFF];
          sum[r][2] += ts[(w >> 16) & 0xFF];
          sum[r][3] += ts[w >> 24];
          // The empty asm keeps each sum in a general register: GCC would otherwise gather the
          // four looked-up bytes into a vector (a chain of shifts and ors through one register)
          // to add them as one, which serializes the lookups. It emits no code.
          __asm__("" : "+r"(sum[r][0]), "+r"(sum[r][1]), "+r"(sum[r][2]), "+r"(sum[r][3]));
        }
      }
      for (int r = 0; r < NR; ++r) {
        for (int k = 0; k < 4; ++k) out[size_t(r) * out_stride + size_t(a - i0 + t + k)] = bias[r] + step[r] * float(sum[r][k]);
      }
    }
    for (; t < n; ++t) {
      for (int r = 0; r < NR; ++r) {
        uint32_t sum = 0;
        for (int s = 0; s < n_sub; ++s) sum += tab[r][size_t(s) * kLutCentroids + idx[size_t(s) * B + size_t(t)]];
        out[size_t(r) * out_stride + size_t(a - i0 + t)] = bias[r] + step[r] * float(sum);
      }
    }
    a += n;
  }
}
#endif

// Whether four rows' tables (n_sub x 256 bytes each) take at most two thirds of L1, leaving the
// rest to the index bytes and score tiles streaming past: then a pass takes four rows per load
// of the indices instead of two. Where the tables crowd L1 out of the streams' way, four rows are
// slower than two (docs/performance.md, VecInfer, has both machines' figures).
bool LutU8QuadRowsFit(int n_sub) {
  return size_t(4) * size_t(n_sub) * kLutCentroids * 3 <= 2 * l1_data_cache_bytes();
}

// See lut_u8_scores in codebook_kernels.h.
void LutU8Scores(const float* HWY_RESTRICT states, size_t sf, int n_q, int n_sub, const uint8_t* HWY_RESTRICT blocks,
                 size_t bb, int64_t i0, int64_t i1, float* HWY_RESTRICT out, size_t out_stride) {
#if HWY_TARGET == HWY_AVX3_DL
  const bool vpermb = lut_u8_scores_uses_vpermb();
  const auto rows = vpermb ? &LutU8ScoresRows<2, true> : &LutU8ScoresRows<2, false>;
  const auto row = vpermb ? &LutU8ScoresRows<1, true> : &LutU8ScoresRows<1, false>;
  int r = 0;
  if (LutU8QuadRowsFit(n_sub)) {
    const auto quad = vpermb ? &LutU8ScoresRows<4, true> : &LutU8ScoresRows<4, false>;
    for (; r + 4 <= n_q; r += 4) {
      quad(states + size_t(r) * sf, sf, n_sub, blocks, bb, i0, i1, r == 0, out + size_t(r) * out_stride, out_stride);
    }
  }
  for (; r + 2 <= n_q; r += 2) {
    rows(states + size_t(r) * sf, sf, n_sub, blocks, bb, i0, i1, r == 0, out + size_t(r) * out_stride, out_stride);
  }
  if (r < n_q) row(states + size_t(r) * sf, sf, n_sub, blocks, bb, i0, i1, r == 0, out + size_t(r) * out_stride, out_stride);
#else
  int r = 0;
  for (; r + 2 <= n_q; r += 2) {
    LutU8ScoresLoop<2>(states + size_t(r) * sf, sf, n_sub, blocks, bb, i0, i1, out + size_t(r) * out_stride, out_stride);
  }
  if (r < n_q) LutU8ScoresLoop<1>(states + size_t(r) * sf, sf, n_sub, blocks, bb, i0, i1, out + size_t(r) * out_stride, out_stride);
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq::kv {
namespace {
std::atomic<bool>& use_vpermb() {
  static std::atomic<bool> on{cpu_is_intel()};
  return on;
}
}  // namespace
void lut_u8_scores_use_vpermb(bool on) { use_vpermb().store(on, std::memory_order_relaxed); }
bool lut_u8_scores_uses_vpermb() { return use_vpermb().load(std::memory_order_relaxed); }

HWY_EXPORT(NearestCentroid);
int nearest_centroid(const float* centroids_t, const float* norms, int k, int sub, const float* x) {
  return HWY_DYNAMIC_DISPATCH(NearestCentroid)(centroids_t, norms, k, sub, x);
}
HWY_EXPORT(LutU8Scores);
void lut_u8_scores(const float* states, size_t state_floats, int n_q, int n_sub, const uint8_t* blocks,
                   size_t block_bytes, int64_t i0, int64_t i1, float* out, size_t out_stride) {
  HWY_DYNAMIC_DISPATCH(LutU8Scores)(states, state_floats, n_q, n_sub, blocks, block_bytes, i0, i1, out, out_stride);
}

HWY_EXPORT(LutU8Prepare);
void lut_u8_prepare(const float* centroids_t, int n_sub, int sub, const float* y, float* state, Workspace& ws) {
  // The float table is 32 KB at 32 sub-vectors, built once per step and query row.
  float* const table = ws.get<float>(Workspace::kLutTable, size_t(n_sub) * kLutCentroids);
  float* const lo = ws.get<float>(Workspace::kLutLow, size_t(n_sub));
  HWY_DYNAMIC_DISPATCH(LutU8Prepare)(centroids_t, n_sub, sub, y, table, lo, state);
}

HWY_EXPORT(LutU8PrepareRows);
void lut_u8_prepare_rows(const float* centroids_t, int n_sub, int sub, const float* ys, size_t y_stride, int n,
                         float* states, size_t state_stride, Workspace& ws) {
  float* const table = ws.get<float>(Workspace::kLutTable, size_t(4) * n_sub * kLutCentroids);
  float* const lo = ws.get<float>(Workspace::kLutLow, size_t(4) * n_sub);
  HWY_DYNAMIC_DISPATCH(LutU8PrepareRows)(centroids_t, n_sub, sub, ys, y_stride, n, table, lo, states, state_stride);
}
}  // namespace vq::kv
#endif
