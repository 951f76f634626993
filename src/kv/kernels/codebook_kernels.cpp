// Kernels of product vector quantizers: the Highway nearest-centroid search, and the byte
// lookup-table scores (vpermi2b on AVX-512 VBMI).
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

// The float tables of lut_u8_prepare, T[s][c] = <y_s, c> with the sub coordinates' products added
// j = 0, 1, ..., and each sub-vector's smallest entry, the widest range and the sum of the
// smallest entries. kSub: the sub-vector length known at compile time (the dot products then
// unroll), or 0.
template <int kSub>
void LutFloatTables(const float* HWY_RESTRICT ct, int n_sub, int sub_rt, const float* HWY_RESTRICT y,
                    float* HWY_RESTRICT table, float* HWY_RESTRICT lo, float* range, double* bias) {
  const DF df;
  const int N = int(hn::Lanes(df));
  const int sub = kSub ? kSub : sub_rt;
  for (int s = 0; s < n_sub; ++s) {
    const float* cs = ct + size_t(s) * sub * kLutCentroids;
    const float* ys = y + size_t(s) * sub;
    float* ts = table + size_t(s) * kLutCentroids;
    auto vmin = hn::Set(df, std::numeric_limits<float>::infinity());
    auto vmax = hn::Neg(vmin);
    for (int c = 0; c < kLutCentroids; c += N) {
      auto dot = hn::Mul(hn::Set(df, ys[0]), hn::LoadU(df, cs + c));
      for (int j = 1; j < sub; ++j) dot = hn::Add(dot, hn::Mul(hn::Set(df, ys[j]), hn::LoadU(df, cs + size_t(j) * kLutCentroids + c)));
      hn::StoreU(dot, df, ts + c);
      vmin = hn::Min(vmin, dot);
      vmax = hn::Max(vmax, dot);
    }
    lo[s] = hn::GetLane(hn::MinOfLanes(df, vmin));
    *range = std::max(*range, hn::GetLane(hn::MaxOfLanes(df, vmax)) - lo[s]);
    *bias += lo[s];
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

// See lut_u8_prepare in codebook_kernels.h. table: n_sub * 256 floats of scratch; lo: n_sub floats.
void LutU8Prepare(const float* HWY_RESTRICT ct, int n_sub, int sub, const float* HWY_RESTRICT y,
                  float* HWY_RESTRICT table, float* HWY_RESTRICT lo, float* HWY_RESTRICT state) {
  const DF df;
  const int N = int(hn::Lanes(df));
  float range = 0;
  double bias = 0;
  switch (sub) {
    case 2: LutFloatTables<2>(ct, n_sub, sub, y, table, lo, &range, &bias); break;
    case 4: LutFloatTables<4>(ct, n_sub, sub, y, table, lo, &range, &bias); break;
    case 8: LutFloatTables<8>(ct, n_sub, sub, y, table, lo, &range, &bias); break;
    default: LutFloatTables<0>(ct, n_sub, sub, y, table, lo, &range, &bias); break;
  }
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

// One block's tokens [slot, slot + m) of a group of G sub-vectors (G = 4 or 8) into their
// [centroid][row] tables, which lie kTableBytes apart from `base`: the block's index bytes first
// become byte offsets of their sums, made with vectors, so a step needs no shift to address a sum
// (and one base address keeps each table's distance a constant in the instruction's addressing:
// with a base register per table the compiler spilled them and reloaded one per step).
template <int G, size_t kTableBytes>
HWY_INLINE void ScatterBlockWeights(char* HWY_RESTRICT base, const uint8_t* HWY_RESTRICT block_idx, int slot, int m,
                                    const float* HWY_RESTRICT wk, uint16_t* HWY_RESTRICT off) {
  constexpr int B = kLutBlockTokens, kRows = 4;
  const hn::CappedTag<float, kRows> d4;  // four lanes wherever this is called (N4 == kRows)
  const hn::ScalableTag<uint16_t> d16;
  const hn::Rebind<uint8_t, decltype(d16)> d8;
  const int N16 = int(hn::Lanes(d16));
  for (int j = 0; j < G * B; j += N16) {
    hn::Store(hn::ShiftLeft<4>(hn::PromoteTo(d16, hn::LoadU(d8, block_idx + j))), d16, off + j);
  }
  const uint16_t* o = off + slot;
  for (int k = 0; k < m; ++k) {
    const auto wv = hn::Load(d4, wk + size_t(k) * kRows);
    float* p[G];
    hn::Vec<decltype(d4)> sum[G];
    // All loads before any store: no load waits behind another table's store.
    for (int u = 0; u < G; ++u) p[u] = reinterpret_cast<float*>(base + u * kTableBytes + o[k + u * B]);
    for (int u = 0; u < G; ++u) sum[u] = hn::Add(hn::Load(d4, p[u]), wv);
    for (int u = 0; u < G; ++u) hn::Store(sum[u], d4, p[u]);
  }
}

// a * b + c rounded once on every target: the targets without a fused multiply-add (the portable
// ones) take std::fma lane by lane, so all give the same bits.
template <class D>
HWY_INLINE hn::Vec<D> FusedMulAdd(D d, hn::Vec<D> a, hn::Vec<D> b, hn::Vec<D> c) {
#if HWY_NATIVE_FMA
  (void)d;
  return hn::MulAdd(a, b, c);
#else
  HWY_ALIGN float x[hn::MaxLanes(d)], y[hn::MaxLanes(d)], z[hn::MaxLanes(d)];
  hn::Store(a, d, x);
  hn::Store(b, d, y);
  hn::Store(c, d, z);
  for (size_t i = 0; i < hn::Lanes(d); ++i) z[i] = std::fma(x[i], y[i], z[i]);
  return hn::Load(d, z);
#endif
}

// Columns [j0, j0 + kCols) of one sub-vector of `sub` coordinates, for up to four rows whose
// centroid weights are a[r][c * kStep] (kStep = 4: a [centroid][row] table of sums):
// out[r * out_stride + j] += the sum over c of a[r][c * kStep] * cb[c * sub + j], as two partial
// sums, even and odd c, each in c order by fused multiply-adds, then even + odd. Each lane computes
// its column's sums in that order, so the lane count does not change the bits. Fused, the product
// takes half the operations of a multiply and an add (in attention on the 2-vCPU Xeon, the two
// forms alternated call by call, five runs: 0.7 to 2.3 us less per 4096 tokens of four rows).
template <int kCols, int kStep>
void FoldColumns(const float* const* HWY_RESTRICT a, int nr, const float* HWY_RESTRICT cb, int sub,
                 float* HWY_RESTRICT out, size_t out_stride) {
  constexpr int kRows = 4;
  const hn::CappedTag<float, kCols> dc;
  const int L = int(hn::Lanes(dc));
  for (int j0 = 0; j0 < kCols; j0 += L) {
    hn::Vec<decltype(dc)> even[kRows], odd[kRows];
    for (int r = 0; r < kRows; ++r) even[r] = odd[r] = hn::Zero(dc);
    for (int c = 0; c < kLutCentroids; c += 2) {
      const auto c0 = hn::LoadU(dc, cb + size_t(c) * sub + j0), c1 = hn::LoadU(dc, cb + size_t(c + 1) * sub + j0);
      for (int r = 0; r < kRows; ++r) {
        even[r] = FusedMulAdd(dc, hn::Set(dc, a[r][c * kStep]), c0, even[r]);
        odd[r] = FusedMulAdd(dc, hn::Set(dc, a[r][(c + 1) * kStep]), c1, odd[r]);
      }
    }
    for (int r = 0; r < nr; ++r) {
      float* o = out + size_t(r) * out_stride + j0;
      hn::StoreU(hn::Add(hn::LoadU(dc, o), hn::Add(even[r], odd[r])), dc, o);
    }
  }
}

// One sub-vector's [centroid][row] table of sums folded through its codebook cb ([c][sub]) into
// nr <= 4 rows of out (out_stride apart).
void FoldSums(const float* HWY_RESTRICT sums, int nr, const float* HWY_RESTRICT cb, int sub, float* HWY_RESTRICT out,
              size_t out_stride) {
  const float* a[4] = {sums, sums + 1, sums + 2, sums + 3};
  int j = 0;
  for (; j + 16 <= sub; j += 16) FoldColumns<16, 4>(a, nr, cb + j, sub, out + j, out_stride);
  for (; j + 8 <= sub; j += 8) FoldColumns<8, 4>(a, nr, cb + j, sub, out + j, out_stride);
  for (; j + 4 <= sub; j += 4) FoldColumns<4, 4>(a, nr, cb + j, sub, out + j, out_stride);
  for (; j < sub; ++j) FoldColumns<1, 4>(a, nr, cb + j, sub, out + j, out_stride);
}

// Short runs (prefill tiles): each token's value decoded into a row of d floats, added to each
// query row times its weight, token by token, with multiplies and adds kept apart.
void GatherAccumulate(const float* HWY_RESTRICT w, size_t w_stride, int n_q, int n_sub, int sub,
                      const float* HWY_RESTRICT codebook, const uint8_t* HWY_RESTRICT blocks, size_t bb, int64_t i0,
                      int64_t i1, float* HWY_RESTRICT acc, size_t acc_stride) {
  constexpr int B = kLutBlockTokens;
  const DF df;
  const int N = int(hn::Lanes(df));
  const int d = n_sub * sub;
  HWY_ALIGN float v[kLutMaxDim];
  for (int64_t i = i0; i < i1; ++i) {
    const uint8_t* idx = blocks + size_t(i / B) * bb + size_t(i % B);
    for (int s = 0; s < n_sub; ++s) {
      std::copy_n(codebook + (size_t(s) * kLutCentroids + idx[size_t(s) * B]) * size_t(sub), sub, v + size_t(s) * sub);
    }
    for (int r = 0; r < n_q; ++r) {
      const float wt = w[size_t(r) * w_stride + size_t(i - i0)];
      float* a = acc + size_t(r) * acc_stride;
      const auto vw = hn::Set(df, wt);
      int j = 0;
      for (; j + N <= d; j += N) hn::StoreU(hn::Add(hn::LoadU(df, a + j), hn::Mul(vw, hn::LoadU(df, v + j))), df, a + j);
      for (; j < d; ++j) a[j] = a[j] + wt * v[j];
    }
  }
}

// See lut_centroid_accumulate in codebook_kernels.h. Long runs: four rows at a time (missing rows weigh 0),
// kLutWeightRun tokens at a time, eight sub-vectors at a time: a token's four-row weight vector is
// loaded once and added to its eight sub-vectors' [centroid][row] sums, eight independent
// load-add-store steps (their tables differ, so none waits on another's store). Eight tables
// (32 KB) still leave L1 room for the weights and indices streaming past, and halve the passes
// over the run's weights against four (docs/cache.md has the measurement).
// Each sum adds its tokens in order, on every target; after each pass the group's tables are
// folded through their codebooks into the rows (FoldSums).
void LutCentroidAccumulate(const float* HWY_RESTRICT w, size_t w_stride, int n_q, int n_sub, int sub,
                           const float* HWY_RESTRICT codebook, const uint8_t* HWY_RESTRICT blocks, size_t bb,
                           int64_t i0, int64_t i1, float* HWY_RESTRICT acc, size_t acc_stride) {
  if (i1 - i0 < kLutSumsMinTokens) {
    GatherAccumulate(w, w_stride, n_q, n_sub, sub, codebook, blocks, bb, i0, i1, acc, acc_stride);
    return;
  }
  constexpr int B = kLutBlockTokens, kRows = 4, kChunk = kLutWeightRun, kGroup = 8;
  const hn::CappedTag<float, kRows> d4;  // the four rows of a sum (one lane at a time on HWY_SCALAR)
  const int N4 = int(hn::Lanes(d4));
  const DF df;
  const int N = int(hn::Lanes(df));
  HWY_ALIGN float sums[kGroup][kLutCentroids * kRows];  // [sub-vector of the group][centroid][row]
  HWY_ALIGN float wt[kChunk * kRows];                   // [token][row]
  static_assert(kLutCentroids * kRows * sizeof(float) <= 65536, "byte offsets of a sum fit 16 bits");
  static_assert(kRows * sizeof(float) == 16, "a centroid's byte offset is its index shifted left by 4");
  HWY_ALIGN uint16_t off[kGroup * B];  // [sub-vector of the group][slot]: byte offset in its sums
  char* const base = reinterpret_cast<char*>(&sums[0][0]);
  constexpr size_t kTableBytes = sizeof(sums[0]);
  for (int r0 = 0; r0 < n_q; r0 += kRows) {
    const int nr = std::min(kRows, n_q - r0);
    for (int64_t c0 = i0; c0 < i1; c0 += kChunk) {
      const int n = int(std::min<int64_t>(kChunk, i1 - c0));
      const float* wr[kRows];
      for (int r = 0; r < nr; ++r) wr[r] = w + size_t(r0 + r) * w_stride + size_t(c0 - i0);
      int t0 = 0;
      if (nr == kRows) {  // [row][token] to [token][row], N tokens at a time
        for (; t0 + N <= n; t0 += N) {
          hn::StoreInterleaved4(hn::LoadU(df, wr[0] + t0), hn::LoadU(df, wr[1] + t0), hn::LoadU(df, wr[2] + t0),
                                hn::LoadU(df, wr[3] + t0), df, wt + size_t(t0) * kRows);
        }
      }
      for (int t = t0; t < n; ++t) {
        for (int r = 0; r < kRows; ++r) wt[t * kRows + r] = r < nr ? wr[r][t] : 0.0f;
      }
      for (int s0 = 0, g = 0; s0 < n_sub; s0 += g) {
        g = n_sub - s0 >= kGroup ? kGroup : std::min(4, n_sub - s0);  // 8, then 4, then what is left
        std::fill_n(&sums[0][0], size_t(g) * kLutCentroids * kRows, 0.0f);
        for (int t = 0; t < n;) {
          const int64_t i = c0 + t, blk = i / B, slot = i % B;
          const int m = int(std::min<int64_t>(n - t, B - slot));
          const uint8_t* block_idx = blocks + size_t(blk) * bb + size_t(s0) * B;  // the group's first sub-vector
          const uint8_t* idx = block_idx + slot;
          const float* wk = wt + size_t(t) * kRows;
          if (s0 == 0) {  // the first pass asks for the block after next, all of it: later passes find it in L2
            const uint8_t* ahead = blocks + size_t(blk + 2) * bb;
            for (size_t o = 0; o < bb; o += 64) hwy::Prefetch(ahead + o);
          }
          if (g == kGroup && N4 == kRows) {
            ScatterBlockWeights<kGroup, kTableBytes>(base, block_idx, int(slot), m, wk, off);
          } else if (g == 4 && N4 == kRows) {
            ScatterBlockWeights<4, kTableBytes>(base, block_idx, int(slot), m, wk, off);
          } else {
            for (int k = 0; k < m; ++k) {
              for (int u = 0; u < g; ++u) {
                float* p = sums[u] + size_t(idx[k + u * B]) * kRows;
                const float* q = wk + size_t(k) * kRows;
                for (int j = 0; j < kRows; j += N4) hn::Store(hn::Add(hn::Load(d4, p + j), hn::Load(d4, q + j)), d4, p + j);
              }
            }
          }
          t += m;
        }
        for (int u = 0; u < g; ++u) {
          const int sv = s0 + u;
          FoldSums(sums[u], nr, codebook + size_t(sv) * kLutCentroids * size_t(sub), sub,
                   acc + size_t(r0) * acc_stride + size_t(sv) * size_t(sub), acc_stride);
        }
      }
    }
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
// the indices from memory, and a pair of rows keeps more lookups in flight behind those loads:
// scores per 4096-token item of four rows took 26-28 us in place of 31-35 us on the Zen 4 (calls
// of the two kernels interleaved in one attn-bench process, four runs). Four rows at a time
// share them further where their tables fit L1 beside the streams (LutU8QuadRowsFit).
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

// Whether four rows' tables (n_sub x 256 bytes each) take at most two thirds of L1, leaving the
// rest to the index bytes and score tiles streaming past: then a pass takes four rows per load
// of the indices instead of two. On the 2-vCPU Xeon (48 KB L1, 32 KB of tables at ksub = 4,
// d = 128), in attention with the two forms alternated call by call, two runs: 21.7 -> 18.9 and
// 22.1 -> 19.0 us per 4096 tokens of four rows. On the Zen 4 measured earlier (32 KB L1) four
// rows at that size were slower (25 us against 17-18).
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
  constexpr int B = kLutBlockTokens;
  for (int r = 0; r < n_q; ++r) {
    const float* st = states + size_t(r) * sf;
    const uint8_t* tab = lut_u8_tables(st);
    const float bias = lut_u8_bias(st), step = lut_u8_step(st);
    float* o = out + size_t(r) * out_stride;
    for (int64_t a = i0; a < i1;) {
      const int64_t blk = a / B, slot = a % B;
      const int n = int(std::min<int64_t>(i1 - a, B - slot));
      const uint8_t* idx = blocks + size_t(blk) * bb + size_t(slot);
      for (int t = 0; t < n; ++t) {
        uint32_t sum = 0;
        for (int s = 0; s < n_sub; ++s) sum += tab[size_t(s) * kLutCentroids + idx[size_t(s) * B + size_t(t)]];
        o[(a - i0) + t] = bias + step * float(sum);
      }
      a += n;
    }
  }
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
void lut_u8_prepare(const float* centroids_t, int n_sub, int sub, const float* y, float* state) {
  // Per-thread scratch kept across calls (once per step and query row, 32 KB at 32 sub-vectors).
  thread_local std::vector<float> table, lo;
  if (table.size() < size_t(n_sub) * kLutCentroids) table.resize(size_t(n_sub) * kLutCentroids);
  if (lo.size() < size_t(n_sub)) lo.resize(size_t(n_sub));
  HWY_DYNAMIC_DISPATCH(LutU8Prepare)(centroids_t, n_sub, sub, y, table.data(), lo.data(), state);
}
HWY_EXPORT(LutCentroidAccumulate);
void lut_centroid_accumulate(const float* w, size_t w_stride, int n_q, int n_sub, int sub, const float* codebook,
                             const uint8_t* blocks, size_t block_bytes, int64_t i0, int64_t i1, float* acc,
                             size_t acc_stride) {
  HWY_DYNAMIC_DISPATCH(LutCentroidAccumulate)(w, w_stride, n_q, n_sub, sub, codebook, blocks, block_bytes, i0, i1, acc,
                                              acc_stride);
}
}  // namespace vq::kv
#endif
