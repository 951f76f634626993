// KIVI's lane kernels, compiled per SIMD target: key scores and value accumulation over the
// layouts of kivi_lanes.h (the codecs that write them are in kivi_lanes.cpp).
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL  // byte dot products (VNNI) where the CPU has them
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/methods/kivi/kivi_lane_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include <algorithm>
#include <cstring>
#include <utility>

#include "hwy/highway.h"
#include "src/core/fp16.h"
#include "src/kv/kernels/byte_dot-inl.h"
#include "src/kv/kernels/fused_kernels-inl.h"
#include "src/kv/methods/kivi/kivi_lane_kernels.h"

HWY_BEFORE_NAMESPACE();
#include "src/kv/kernels/byte_dot_target.h"  // IWYU pragma: keep
namespace vq::kv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
using DU = hn::RebindToUnsigned<DF>;
using VU = hn::Vec<DU>;
constexpr int kLanes = int(hn::MaxLanes(DF()));
constexpr int kSub = 16;
constexpr int kParts = kSub / kLanes;
static_assert(kSub % kLanes == 0, "16 tokens must be whole vectors");

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

using DI = hn::RebindToSigned<DF>;
using VI = hn::Vec<DI>;
typedef int32_t AliasedI32 __attribute__((may_alias));
constexpr float kFixedOne = 127.0f * 256.0f;  // a held operand's largest magnitude maps to 32512

// Query rows per pass over a sub-block: their two planes' sums for each part of the block must
// stay in registers (4 rows x 2 planes of AVX-512's 32; 2 x 2 x 2 parts of AVX2's 16).
constexpr int kRowsPerPass = kParts >= 2 ? 2 : 4;

// Query bytes of a group (FoldGroup): chunk-major, [d/C chunks][kRows][2 planes (lo, hi)][C].
template <int kBits, int kRows>
constexpr size_t QueryBytesAt(int ch, int r, int plane) {
  return (size_t(ch) * kRows * 2 + size_t(r) * 2 + size_t(plane)) * (32 / kBits);
}

// The sums of both byte planes of kPass query rows, kParts vectors each.
template <int kPass>
HWY_INLINE void ZeroSums(VI (*lo)[kParts], VI (*hi)[kParts]) {
  for (int r = 0; r < kPass; ++r) {
    for (int p = 0; p < kParts; ++p) lo[r][p] = hi[r][p] = hn::Zero(DI());
  }
}

// Field j of every byte of x (four codes per lane, kivi_lanes.h) times four signed bytes of each
// plane, added to kPass rows' plane sums: row r's lo word is at base + 2 r kStride + at, its hi
// word kStride bytes after it.
template <int kBits, int j, int kPass, int kStride>
HWY_INLINE void DotField(const VU* x, const int8_t* HWY_RESTRICT base, int at, VI (*lo)[kParts], VI (*hi)[kParts]) {
  const DI di;
  constexpr uint32_t kMask = kBits == 2 ? 0x03030303u : 0x0F0F0F0Fu;
  VI u[kParts];
  for (int p = 0; p < kParts; ++p) {
    u[p] = hn::BitCast(di, hn::And(j == 0 ? x[p] : hn::ShiftRight<kBits * j>(x[p]), hn::Set(DU(), kMask)));
  }
  for (int r = 0; r < kPass; ++r) {
    const AliasedI32* wl = reinterpret_cast<const AliasedI32*>(base + 2 * r * kStride + at);
    const AliasedI32* wh = reinterpret_cast<const AliasedI32*>(base + (2 * r + 1) * kStride + at);
    for (int p = 0; p < kParts; ++p) {
      lo[r][p] = DotBytesWord(di, lo[r][p], u[p], wl);
      hi[r][p] = DotBytesWord(di, hi[r][p], u[p], wh);
    }
  }
}

// A lane's joined sum 256 hi + lo as a float: exact as an integer (|sum| < 2^31 for every use
// here), one rounding to float.
HWY_INLINE VF JoinedSum(VI hi, VI lo) { return hn::ConvertTo(DF(), hn::Add(hn::ShiftLeft<8>(hi), lo)); }

template <int kBits, int kRows, int kPass, size_t... J>
HWY_INLINE void ScoreChunk(const VU* x, const int8_t* qc, VI (*lo)[kParts], VI (*hi)[kParts],
                           std::index_sequence<J...>) {
  (DotField<kBits, int(J), kPass, 32 / kBits>(x, qc, 4 * int(J), lo, hi), ...);
}

// Rows r0 .. r0+kPass-1 of ScoreSub.
template <int kBits, int kRows, int kPass>
HWY_INLINE void ScoreSubPass(const int8_t* HWY_RESTRICT qi, const float* unit, const float* bias, int r0,
                             const uint32_t* words, int d, float* HWY_RESTRICT out, size_t out_stride) {
  constexpr int C = 32 / kBits;
  const DF df;
  const DU du;
  VI lo[kPass][kParts], hi[kPass][kParts];
  ZeroSums<kPass>(lo, hi);
  for (int ch = 0; ch < d / C; ++ch) {
    VU x[kParts];
    for (int p = 0; p < kParts; ++p) x[p] = hn::LoadU(du, words + size_t(ch) * kSub + p * kLanes);
    ScoreChunk<kBits, kRows, kPass>(x, qi + QueryBytesAt<kBits, kRows>(ch, r0, 0), lo, hi,
                                    std::make_index_sequence<8 / kBits>());
  }
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

// The (scale, zero) pairs of channels c .. c+N (fp16, interleaved) as two float vectors.
template <class D>
HWY_INLINE void LoadPairs(D df, const hwy::float16_t* HWY_RESTRICT sz, int c, hn::Vec<D>* s, hn::Vec<D>* z) {
  const hn::Rebind<hwy::float16_t, D> dh;
#if HWY_TARGET == HWY_SCALAR
  *s = hn::PromoteTo(df, hn::LoadU(dh, sz + 2 * c));
  *z = hn::PromoteTo(df, hn::LoadU(dh, sz + 2 * c + 1));
#else
  const int N = int(hn::Lanes(df));
  const auto a = hn::PromoteTo(df, hn::LoadU(dh, sz + 2 * c)), b = hn::PromoteTo(df, hn::LoadU(dh, sz + 2 * c + N));
  *s = hn::ConcatEven(df, b, a);
  *z = hn::ConcatOdd(df, b, a);
#endif
}

// Stores the two byte planes of T (|T| <= 32512): lo = T - 256 hi at `to`, hi = (T + 128) >> 8
// at to + C. With U = T + 128, hi is U's second byte and lo its first byte with the top bit
// flipped (adding 128 flips bit 7 of the low byte). On AVX-512 VBMI one vpermb gathers both
// planes of 16 lanes into 32 contiguous bytes (C = 16), an xor fixes lo, and one store writes
// them: two truncating stores (vpmovdb, two shuffle uops each on the Intel and AMD cores measured)
// cost twice the shuffles, and the fold and the value staging call this for every operand they
// hold. Plain AVX-512 stores lo by truncation (vpmovdb); elsewhere it is computed and both planes
// go through an exact (in-range) saturating demotion. Every form writes the same bytes.
template <int C, class D8, class VI32>
HWY_INLINE void StorePlanes(D8 d8, VI32 T, int8_t* HWY_RESTRICT to) {
#if HWY_TARGET == HWY_AVX3_DL
  if constexpr (sizeof(T.raw) == 64) {
    static_assert(C == 16, "16 lanes fill one chunk's two planes");
    // Bytes 0 (lo, flipped) and 1 (hi) of each 32-bit lane to bytes 0-15 and 16-31.
    const __m512i order = _mm512_set_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  //
                                          0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  //
                                          61, 57, 53, 49, 45, 41, 37, 33, 29, 25, 21, 17, 13, 9, 5, 1,  //
                                          60, 56, 52, 48, 44, 40, 36, 32, 28, 24, 20, 16, 12, 8, 4, 0);
    const __m512i u = _mm512_add_epi32(T.raw, _mm512_set1_epi32(128));
    const __m256i planes = _mm512_castsi512_si256(_mm512_permutexvar_epi8(order, u));
    const __m256i flip = _mm256_set_epi64x(0, 0, int64_t(0x8080808080808080ull), int64_t(0x8080808080808080ull));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(to), _mm256_xor_si256(planes, flip));
    return;
  }
#endif
  const VI32 hi = hn::ShiftRight<8>(hn::Add(T, hn::Set(hn::DFromV<VI32>(), 128)));
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  if constexpr (sizeof(T.raw) == 64) {
    _mm512_mask_cvtepi32_storeu_epi8(to, 0xFFFF, T.raw);
    _mm512_mask_cvtepi32_storeu_epi8(to + C, 0xFFFF, hi.raw);
    return;
  }
#endif
  hn::StoreU(hn::DemoteTo(d8, hn::Sub(T, hn::ShiftLeft<8>(hi))), d8, to);
  hn::StoreU(hn::DemoteTo(d8, hi), d8, to + C);
}

// max(m, |x|) for m >= 0: one vrangeps (its max-of-magnitudes form, sign cleared) on AVX-512
// instead of an and and a max; the same floats.
template <class V>
HWY_INLINE V MaxAbs(V m, V x) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  if constexpr (sizeof(x.raw) == 64) return V{_mm512_range_ps(m.raw, x.raw, 0x0B)};
  if constexpr (sizeof(x.raw) == 32) return V{_mm256_range_ps(m.raw, x.raw, 0x0B)};
#endif
  return hn::Max(m, hn::Abs(x));
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
  constexpr int C = 32 / kBits;
  const hn::CappedTag<float, C> dc;  // at most one chunk per vector
  using V = hn::Vec<decltype(dc)>;
  const int N = int(hn::Lanes(dc));
  V b[kRows], m[kRows];
  for (int r = 0; r < kRows; ++r) b[r] = m[r] = hn::Zero(dc);
  for (int c = 0; c < d; c += N) {
    V s, z;
    LoadPairs(dc, sz, c, &s, &z);
    for (int r = 0; r < kRows; ++r) {
      const V qv = hn::LoadU(dc, q + size_t(r) * qs + c);
      const V x = hn::Mul(qv, s);
      hn::StoreU(x, dc, prod + size_t(r) * d + c);
      m[r] = MaxAbs(m[r], x);
      b[r] = hn::MulAdd(qv, z, b[r]);
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
  for (int c = 0; c < d; c += N) {
    for (int r = 0; r < kRows; ++r) {
      // |T| <= 32512 up to the rounding of the products: hi and lo are in -128..127.
      const auto T = RoundToInt(hn::Mul(hn::LoadU(dc, prod + size_t(r) * d + c), inv[r]));
      StorePlanes<C>(d8, T, qi + QueryBytesAt<kBits, kRows>(c / C, r, 0) + c % C);
    }
  }
}

constexpr int kCodesAhead = 2;  // sub-blocks of codes fetched ahead of the one scored

// Scores of run tokens [i0, i1) for kRows query rows (q: rows of stride qs floats).
template <int kBits, int kRows>
void KeyScoresRows(const float* q, size_t qs, const uint8_t* blocks, size_t bb, int d, int R, int G, int64_t i0,
                   int64_t i1, float* out, size_t out_stride) {
  const size_t params = size_t(R / G) * d * 4, sub = size_t(d) / (32 / kBits) * kSub * 4;
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
  } else {
    KeyScoresT<4>(q, n_q, qs, blocks, bb, d, R, G, i0, i1, out, out_stride);
  }
}

// ---- values: accumulation -----------------------------------------------------------------
//
// Integer byte dot products again, summing over tokens inside each lane: a chunk's vector has a
// channel per lane and, after a shift and a mask, four tokens' codes as its bytes (kivi_lanes.h),
// which multiply the four tokens' weights broadcast from one word. The weights of a run of up to
// 256 tokens are held per row and value group as W = w * scale in 16-bit fixed point, T =
// round(W / unit), unit = the run's largest |W| / 32512: two signed byte planes as for the keys,
// each W within unit / 2. (A unit from the largest |w| times the largest scale, as q4 takes it,
// spares a pass but KIVI's per-token scales vary widely: on the model's activations it held the
// outputs 4 times less precisely.) Per run each channel's two integer sums are joined and turned
// to float once; the zeros' share (sum w * zero per group) is summed in float beside them.

constexpr int kRunSubs = 16;  // sub-blocks (16 tokens each) whose weights are staged at once

template <int kRows>
struct RunWeights {
  alignas(64) float w[kRunSubs][kRows][kSub];           // the weights, 0 outside the range
  alignas(64) float ws[kRunSubs][kRows][kSub];          // one group's w * scale per sub-block and row
  alignas(64) int8_t planes[kRunSubs][kRows][2][kSub];  // one group's T: [lo | hi] per sub-block and row
};

// Once per run: each row's weights of the run's sub-blocks b0 .. b0+nb-1, zero outside [i0, i1).
template <int kRows>
HWY_INLINE void LoadRunWeights(const float* w, size_t w_stride, int64_t i0, int64_t i1, int64_t b0, int nb,
                               RunWeights<kRows>* out) {
  const DF df;
  for (int bi = 0; bi < nb; ++bi) {
    const int64_t first = (b0 + bi) * kSub;
    for (int r = 0; r < kRows; ++r) {
      float* dst = out->w[bi][r];
      if (first >= i0 && first + kSub <= i1) {
        for (int p = 0; p < kParts; ++p) {
          hn::Store(hn::LoadU(df, w + size_t(r) * w_stride + size_t(first - i0) + p * kLanes), df, dst + p * kLanes);
        }
      } else {
        for (int t = 0; t < kSub; ++t) {
          const int64_t i = first + t;
          dst[t] = i >= i0 && i < i1 ? w[size_t(r) * w_stride + size_t(i - i0)] : 0.0f;
        }
      }
    }
  }
}

// Per value group g: the run's T planes for every row, the unit of T per row (factor), and each
// row's sum of w * zero added to acc[d + g].
template <int kRows>
HWY_INLINE void StageGroupWeights(const uint8_t* run, size_t bb, size_t codes, int nb, int g, int d,
                                  RunWeights<kRows>* W, float* factor, float* acc, size_t acc_stride) {
  const DF df;
  const hn::Rebind<int8_t, DF> d8;
  const auto pairs = [&](int bi) {
    return reinterpret_cast<const hwy::float16_t*>(run + size_t(bi) * bb + codes) + size_t(g) * kSub * 2;
  };
  VF m[kRows], zs[kRows];
  for (int r = 0; r < kRows; ++r) m[r] = zs[r] = hn::Zero(df);
  for (int bi = 0; bi < nb; ++bi) {
    for (int p = 0; p < kParts; ++p) {
      VF sv, zv;
      LoadPairs(df, pairs(bi), p * kLanes, &sv, &zv);
      for (int r = 0; r < kRows; ++r) {
        const VF wv = hn::Load(df, &W->w[bi][r][p * kLanes]);
        const VF x = hn::Mul(wv, sv);
        hn::Store(x, df, &W->ws[bi][r][p * kLanes]);
        m[r] = MaxAbs(m[r], x);
        zs[r] = hn::MulAdd(wv, zv, zs[r]);
      }
    }
  }
  VF inv[kRows];
  for (int r = 0; r < kRows; ++r) {
    const float mx = hn::GetLane(hn::MaxOfLanes(df, m[r]));
    factor[r] = mx / kFixedOne;
    inv[r] = hn::Set(df, mx > 0.0f ? kFixedOne / mx : 0.0f);
    acc[size_t(r) * acc_stride + size_t(d + g)] += hn::GetLane(hn::SumOfLanes(df, zs[r]));
  }
  for (int bi = 0; bi < nb; ++bi) {
    for (int p = 0; p < kParts; ++p) {
      for (int r = 0; r < kRows; ++r) {
        // |w * s| * inv <= 32512 up to rounding: hi and lo are in -128..127.
        const VF x = hn::Mul(hn::Load(df, &W->ws[bi][r][p * kLanes]), inv[r]);
        StorePlanes<kSub>(d8, RoundToInt(x), &W->planes[bi][r][0][p * kLanes]);
      }
    }
  }
}

// Query rows r0 .. r0+kPass-1, channels of chunk ch (16, in kParts vectors): acc += factor *
// (256 sum_hi + sum_lo) over the run's nb sub-blocks.
template <int kBits, int kRows, int kPass>
HWY_INLINE void AccumulateChunk(const uint8_t* HWY_RESTRICT run, size_t bb, int nb, int ch, const RunWeights<kRows>& W,
                                int r0, const float* factor, float* HWY_RESTRICT acc, size_t acc_stride) {
  constexpr int kVecs = kBits / 2;        // vectors of 16 channels per chunk and sub-block
  constexpr int kFields = 8 / kBits;      // codes per byte
  constexpr int kTokens = 4 * kFields;    // tokens per vector
  const DF df;
  const DU du;
  VI lo[kPass][kParts], hi[kPass][kParts];
  ZeroSums<kPass>(lo, hi);
  for (int bi = 0; bi < nb; ++bi) {
    const uint32_t* words = reinterpret_cast<const uint32_t*>(run + size_t(bi) * bb) + size_t(ch) * kVecs * kSub;
    const int8_t* planes = W.planes[bi][r0][0];  // the rows' words are constant offsets from it
    for (int h = 0; h < kVecs; ++h) {
      VU x[kParts];
      for (int p = 0; p < kParts; ++p) x[p] = hn::LoadU(du, words + h * kSub + p * kLanes);
      // Field j's bytes are tokens h * kTokens + 4 j .. +3.
      DotField<kBits, 0, kPass, kSub>(x, planes, h * kTokens, lo, hi);
      DotField<kBits, 1, kPass, kSub>(x, planes, h * kTokens + 4, lo, hi);
      if constexpr (kFields == 4) {
        DotField<kBits, 2, kPass, kSub>(x, planes, h * kTokens + 8, lo, hi);
        DotField<kBits, 3, kPass, kSub>(x, planes, h * kTokens + 12, lo, hi);
      }
    }
  }
  for (int r = 0; r < kPass; ++r) {
    const VF f = hn::Set(df, factor[r0 + r]);
    float* a = acc + size_t(r0 + r) * acc_stride + size_t(ch) * kSub;
    // |256 hi + lo| <= 256 tokens * 15 * 32640 < 2^31.
    for (int p = 0; p < kParts; ++p) {
      hn::StoreU(hn::MulAdd(f, JoinedSum(hi[r][p], lo[r][p]), hn::LoadU(df, a + p * kLanes)), df, a + p * kLanes);
    }
  }
}

// acc rows ([d channel sums | d/G zero sums]) += sum over run tokens [i0, i1) of w * v.
template <int kBits, int kRows>
void ValueAccumulateRows(const float* w, size_t w_stride, const uint8_t* blocks, size_t bb, int d, int G, int64_t i0,
                         int64_t i1, float* acc, size_t acc_stride) {
  constexpr int kPass = kRows < kRowsPerPass ? kRows : kRowsPerPass;
  static_assert(kRows % kPass == 0, "rows must split into whole passes");
  const size_t codes = size_t(d) * kBits * 2;  // bytes of a sub-block's codes
  RunWeights<kRows> W;
  float factor[kRows];
  for (int64_t b0 = i0 / kSub; b0 * kSub < i1; b0 += kRunSubs) {
    const int nb = int(std::min<int64_t>(kRunSubs, (i1 + kSub - 1) / kSub - b0));
    const uint8_t* run = blocks + size_t(b0) * bb;
    // The next run's bytes are asked for while this one is computed, a share per chunk pass; a
    // burst of a whole run's prefetches fills the line-fill buffers and stalls.
    const size_t run_bytes = size_t(nb) * bb;
    SpreadPrefetch next(run + run_bytes, run_bytes, size_t(d / kSub));
    if (b0 == i0 / kSub) PrefetchBytes(run, std::min<size_t>(run_bytes, 4 * bb));  // nobody asked for the first
    LoadRunWeights<kRows>(w, w_stride, i0, i1, b0, nb, &W);
    for (int g = 0; g < d / G; ++g) {
      StageGroupWeights<kRows>(run, bb, codes, nb, g, d, &W, factor, acc, acc_stride);
      for (int ch = g * (G / kSub); ch < (g + 1) * (G / kSub); ++ch) {
        next.Step();
        for (int r0 = 0; r0 < kRows; r0 += kPass) {
          AccumulateChunk<kBits, kRows, kPass>(run, bb, nb, ch, W, r0, factor, acc, acc_stride);
        }
      }
    }
  }
}

template <int kBits>
void ValueAccumulateT(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, size_t bb, int d, int G,
                      int64_t i0, int64_t i1, float* acc, size_t acc_stride) {
  int r = 0;
  for (; r + 4 <= n_q; r += 4) {
    ValueAccumulateRows<kBits, 4>(w + size_t(r) * w_stride, w_stride, blocks, bb, d, G, i0, i1, acc + size_t(r) * acc_stride,
                                  acc_stride);
  }
  for (; r < n_q; ++r) {
    ValueAccumulateRows<kBits, 1>(w + size_t(r) * w_stride, w_stride, blocks, bb, d, G, i0, i1, acc + size_t(r) * acc_stride,
                                  acc_stride);
  }
}

void KiviLanesValueAccumulate(int bits, const float* w, size_t w_stride, int n_q, const uint8_t* blocks, size_t bb,
                              int d, int G, int64_t i0, int64_t i1, float* acc, size_t acc_stride) {
  if (i1 <= i0) return;
  if (bits == 2) {
    ValueAccumulateT<2>(w, w_stride, n_q, blocks, bb, d, G, i0, i1, acc, acc_stride);
  } else {
    ValueAccumulateT<4>(w, w_stride, n_q, blocks, bb, d, G, i0, i1, acc, acc_stride);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq::kv::kivi_lanes {
HWY_EXPORT(KiviLanesKeyScores);
HWY_EXPORT(KiviLanesValueAccumulate);

void key_scores(int bits, const float* q, int n_q, size_t qs, const uint8_t* blocks, size_t bb, int d, int R, int G,
                int64_t i0, int64_t i1, float* out, size_t out_stride) {
  HWY_DYNAMIC_DISPATCH(KiviLanesKeyScores)(bits, q, n_q, qs, blocks, bb, d, R, G, i0, i1, out, out_stride);
}

void value_accumulate(int bits, const float* w, size_t w_stride, int n_q, const uint8_t* blocks, size_t bb, int d,
                      int G, int64_t i0, int64_t i1, float* acc, size_t acc_stride) {
  HWY_DYNAMIC_DISPATCH(KiviLanesValueAccumulate)(bits, w, w_stride, n_q, blocks, bb, d, G, i0, i1, acc, acc_stride);
}

}  // namespace vq::kv::kivi_lanes
#endif
