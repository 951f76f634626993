// TurboQuant's lane scores and sums at 2 to 4 bits in 16-bit fixed point, compiled per SIMD
// target (the layout is turbo_lanes.h's; the operands' units and bounds are in
// turbo_lane_kernels.h). Scores pair two channels of a token in a lane, sums two tokens of a
// channel (docs/cache.md, "TurboQuant layout").
//
// A pair of channels (turbo_lanes::pair_lo, pair_hi) is one 32-bit lane per token: the two
// channels' levels as 16-bit integers, low and high half. One multiply-add of 16-bit pairs
// (vpdpwssd on AVX-512 VNNI, vpmaddwd and an add elsewhere) against the query's two fixed-point
// values then does two channels of 16 tokens, where the float kernel spends one multiply-add per
// channel. On AVX-512 the pair's codes come out of the words with one 16-bit shift at 2 and 4
// bits (a word's two 16-bit halves hold the pair's channels at the same offsets), or two 32-bit
// shifts and a blend at 3 bits, and one vpermw reads both levels from a 32-entry table that
// repeats every 2^bits entries, so the bits above a code are ignored. AVX2 looks up each
// channel's level as a 32-bit lane and joins the two halves with a blend; other targets multiply
// the halves in 32-bit lanes. Every form adds the same integer products exactly, so every target
// gives the same scores.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL  // 16-bit pair dot products (vpdpwssd, VNNI) where the CPU has them
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/methods/turbo/turbo_fixed_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

#include "hwy/highway.h"
#include "src/kv/kernels/byte_dot-inl.h"
#include "src/kv/kernels/fused_kernels-inl.h"
#include "src/kv/methods/turbo/lane_codes-inl.h"
#include "src/kv/methods/turbo/turbo_lane_kernels.h"

HWY_BEFORE_NAMESPACE();
#include "src/kv/kernels/byte_dot_target.h"  // IWYU pragma: keep (RoundToInt's target options)
namespace vq::kv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace fixed_lanes {

using lane_codes::CodeBits;
using lane_codes::DF;
using lane_codes::DU;
using lane_codes::ForRowPasses;
using lane_codes::kLanes;
using VF = hn::Vec<DF>;
using VU = hn::Vec<DU>;
using DI = hn::RebindToSigned<DF>;
using VI = hn::Vec<DI>;
typedef int32_t AliasedI32 __attribute__((may_alias));

constexpr int kSub = 16;    // tokens per block
constexpr int kGroup = 32;  // channels per group of words
constexpr int kPairs = kGroup / 2;
constexpr int kParts = kSub / kLanes;
constexpr size_t kScaleBytes = kSub * 2;
constexpr int kFlushGroups = turbo_lanes::kFixedFlushChannels / kGroup;
constexpr int kSets = 2;  // accumulator sets, alternating by pair, so that latency never limits

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
struct FixedLevels {
  __m512i t;  // 32 levels as int16, level(i mod 2^bits)
};
HWY_INLINE FixedLevels LoadFixedLevels(const int16_t* levels32) { return {_mm512_loadu_si512(levels32)}; }

// The pair's two levels, low and high half of each token's lane.
template <int kBits, int p>
HWY_INLINE VI PairLevels(const FixedLevels& L, const VU* w) {
  __m512i idx;
  if constexpr (kBits != 3) {
    constexpr int per_word = 16 / kBits, m = p / per_word, s = p % per_word;
    idx = s == 0 ? w[m].raw : _mm512_srli_epi16(w[m].raw, kBits * s);
  } else {
    const __m512i lo = CodeBits<3, turbo_lanes::pair_lo(3, p)>(w).raw;
    constexpr int j = turbo_lanes::pair_hi(3, p), o = 3 * j, m = o / 32, s = o % 32;
    __m512i hi;
    if constexpr (s + 3 > 32) {
      hi = _mm512_slli_epi32(CodeBits<3, j>(w).raw, 16);
    } else if constexpr (s <= 16) {
      hi = _mm512_slli_epi32(w[m].raw, 16 - s);
    } else {
      hi = _mm512_srli_epi32(w[m].raw, s - 16);
    }
    idx = _mm512_mask_blend_epi16(0xAAAAAAAAu, lo, hi);
  }
  return VI{_mm512_permutexvar_epi16(idx, L.t)};
}

// acc + lo * q.lo + hi * q.hi per lane, q the pair word at `word`.
HWY_INLINE VI DotPair(VI acc, VI v, const AliasedI32* word) {
#if HWY_TARGET == HWY_AVX3_DL
  // The word is an embedded broadcast operand (no register); written out because Highway 1.0's
  // AVX3_DL target string does not enable the VNNI intrinsics under GCC.
  __m512i r = acc.raw;
  __asm__("vpdpwssd %[s]%{1to16%}, %[u], %[r]" : [r] "+v"(r) : [u] "v"(v.raw), [s] "m"(*word));
  return VI{r};
#else
  return VI{_mm512_add_epi32(acc.raw, _mm512_madd_epi16(v.raw, _mm512_set1_epi32(*word)))};
#endif
}

// ---- values: a lane holds one channel of tokens t and t + 8 (two blocks a vector) ----------

constexpr int kPairBlocks = 2;  // blocks a step: lanes 0-7 pair block a's tokens, 8-15 block b's

// The 16-bit words of two vectors of 32-bit lanes (one per token of blocks a and b) that lane L
// takes: the low halves of tokens L and L + 8 of a (L < 8), of b (L >= 8).
HWY_INLINE __m512i TokenPairs(__m512i a, __m512i b) {
  const __m512i order = _mm512_set_epi16(62, 46, 60, 44, 58, 42, 56, 40, 54, 38, 52, 36, 50, 34, 48, 32,  //
                                         30, 14, 28, 12, 26, 10, 24, 8, 22, 6, 20, 4, 18, 2, 16, 0);
  return _mm512_permutex2var_epi16(a, order, b);
}

// Channel k's levels of the step's token pairs (the bits above each code are ignored).
template <int kBits, int k>
HWY_INLINE VI StepLevels(const FixedLevels& L, const VU* a, const VU* b) {
  return VI{_mm512_permutexvar_epi16(TokenPairs(CodeBits<kBits, k>(a).raw, CodeBits<kBits, k>(b).raw), L.t)};
}

// The levels of channels k0 .. k0 + n - 1 of the step's token pairs. At 2 and 4 bits the n
// channels lie in one 16-bit half of a word (n = 4: 8 or 16 bits): that half is paired once and
// each channel is one 16-bit shift and one lookup; at 3 bits each channel is paired on its own.
template <int kBits, int k0, int n>
HWY_INLINE void StepLevelsN(const FixedLevels& L, const VU* a, const VU* b, VI* v) {
  if constexpr (kBits == 3) {
    [&]<size_t... K>(std::index_sequence<K...>) {
      ((v[K] = StepLevels<kBits, k0 + int(K)>(L, a, b)), ...);
    }(std::make_index_sequence<n>());
  } else {
    constexpr int o = kBits * k0, m = o / 32, half = (o % 32) / 16;
    static_assert((o % 16) + kBits * n <= 16, "the channels share one half of a word");
    const __m512i pa = half ? _mm512_srli_epi32(a[m].raw, 16) : a[m].raw;
    const __m512i pb = half ? _mm512_srli_epi32(b[m].raw, 16) : b[m].raw;
    const __m512i pairs = TokenPairs(pa, pb);
    [&]<size_t... K>(std::index_sequence<K...>) {
      ((v[K] = VI{_mm512_permutexvar_epi16(
            (o % 16) + kBits * int(K) == 0 ? pairs : _mm512_srli_epi16(pairs, (o % 16) + kBits * int(K)), L.t)}),
       ...);
    }(std::make_index_sequence<n>());
  }
}

// The step's weights (two blocks of 16 fixed-point weights as 32-bit lanes) as token pairs.
HWY_INLINE VI StepWeights(const int32_t* fa, const int32_t* fb) {
  return VI{TokenPairs(_mm512_loadu_si512(fa), _mm512_loadu_si512(fb))};
}

// acc + lo * w.lo + hi * w.hi per lane, w 16 pairs in memory (64-byte aligned).
HWY_INLINE VI DotPairs(VI acc, VI v, const int32_t* w) {
#if HWY_TARGET == HWY_AVX3_DL
  __m512i r = acc.raw;
  __asm__("vpdpwssd %[s], %[u], %[r]" : [r] "+v"(r) : [u] "v"(v.raw), [s] "m"(*reinterpret_cast<const __m512i*>(w)));
  return VI{r};
#else
  return VI{_mm512_add_epi32(acc.raw, _mm512_madd_epi16(v.raw, _mm512_load_si512(w)))};
#endif
}

#elif HWY_TARGET == HWY_AVX2
struct FixedLevels {
  __m256i lo, hi;  // level(i) as int32 for i = 0 .. 7 and 8 .. 15
};
HWY_INLINE FixedLevels LoadFixedLevels(const int16_t* levels32) {
  alignas(32) int32_t t[16];
  for (int i = 0; i < 16; ++i) t[i] = levels32[i];
  return {_mm256_load_si256(reinterpret_cast<const __m256i*>(t)), _mm256_load_si256(reinterpret_cast<const __m256i*>(t + 8))};
}

// level(low kBits bits of each lane) as int32 (bits above are ignored).
template <int kBits>
HWY_INLINE __m256i LookupInt(const FixedLevels& L, __m256i idx) {
  const __m256i lo = _mm256_permutevar8x32_epi32(L.lo, idx);
  if constexpr (kBits < 4) {
    return lo;
  } else {
    const __m256i hi = _mm256_permutevar8x32_epi32(L.hi, idx);
    return _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(lo), _mm256_castsi256_ps(hi),
                                                _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28))));
  }
}

template <int kBits, int p>
HWY_INLINE VI PairLevels(const FixedLevels& L, const VU* w) {
  const __m256i lo = LookupInt<kBits>(L, CodeBits<kBits, turbo_lanes::pair_lo(kBits, p)>(w).raw);
  const __m256i hi = LookupInt<kBits>(L, CodeBits<kBits, turbo_lanes::pair_hi(kBits, p)>(w).raw);
  return VI{_mm256_blend_epi16(lo, _mm256_slli_epi32(hi, 16), 0xAA)};
}

HWY_INLINE VI DotPair(VI acc, VI v, const AliasedI32* word) {
  return VI{_mm256_add_epi32(acc.raw, _mm256_madd_epi16(v.raw, _mm256_set1_epi32(*word)))};
}

// ---- values: a lane holds one channel of tokens t and t + 8 of one block ------------------

constexpr int kPairBlocks = 1;

template <int kBits, int k>
HWY_INLINE VI StepLevels(const FixedLevels& L, const VU* a, const VU* b) {
  const __m256i lo = LookupInt<kBits>(L, CodeBits<kBits, k>(a).raw);
  const __m256i hi = LookupInt<kBits>(L, CodeBits<kBits, k>(b).raw);
  return VI{_mm256_blend_epi16(lo, _mm256_slli_epi32(hi, 16), 0xAA)};
}

HWY_INLINE VI StepWeights(const int32_t* fa, const int32_t* fb) {
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(fa));
  const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(fb));
  return VI{_mm256_blend_epi16(lo, _mm256_slli_epi32(hi, 16), 0xAA)};
}

HWY_INLINE VI DotPairs(VI acc, VI v, const int32_t* w) {
  return VI{_mm256_add_epi32(acc.raw, _mm256_madd_epi16(v.raw, _mm256_load_si256(reinterpret_cast<const __m256i*>(w))))};
}

#else
struct FixedLevels {
  int32_t t[16];  // level(i) as int32
};
HWY_INLINE FixedLevels LoadFixedLevels(const int16_t* levels32) {
  FixedLevels L;
  for (int i = 0; i < 16; ++i) L.t[i] = levels32[i];
  return L;
}

template <int kBits, int p>
HWY_INLINE VI PairLevels(const FixedLevels& L, const VU* w) {
  const DI di;
  const VU mask = hn::Set(DU(), (1u << kBits) - 1);
  const VI lo = hn::GatherIndex(di, L.t, hn::BitCast(di, hn::And(CodeBits<kBits, turbo_lanes::pair_lo(kBits, p)>(w), mask)));
  const VI hi = hn::GatherIndex(di, L.t, hn::BitCast(di, hn::And(CodeBits<kBits, turbo_lanes::pair_hi(kBits, p)>(w), mask)));
  return hn::Or(hn::And(lo, hn::Set(di, 0xFFFF)), hn::ShiftLeft<16>(hi));
}

HWY_INLINE VI DotPair(VI acc, VI v, const AliasedI32* word) {
  const DI di;
  const int32_t q = *word;
  const VI lo = hn::ShiftRight<16>(hn::ShiftLeft<16>(v)), hi = hn::ShiftRight<16>(v);
  const VI p = hn::Add(hn::Mul(lo, hn::Set(di, int32_t(int16_t(q & 0xFFFF)))), hn::Mul(hi, hn::Set(di, q >> 16)));
  return hn::Add(acc, p);
}

// ---- values: a lane holds one channel of tokens t and t + 8 of one block ------------------

constexpr int kPairBlocks = 1;

template <int kBits, int k>
HWY_INLINE VI StepLevels(const FixedLevels& L, const VU* a, const VU* b) {
  const DI di;
  const VU mask = hn::Set(DU(), (1u << kBits) - 1);
  const VI lo = hn::GatherIndex(di, L.t, hn::BitCast(di, hn::And(CodeBits<kBits, k>(a), mask)));
  const VI hi = hn::GatherIndex(di, L.t, hn::BitCast(di, hn::And(CodeBits<kBits, k>(b), mask)));
  return hn::Or(hn::And(lo, hn::Set(di, 0xFFFF)), hn::ShiftLeft<16>(hi));
}

HWY_INLINE VI StepWeights(const int32_t* fa, const int32_t* fb) {
  const DI di;
  return hn::Or(hn::And(hn::LoadU(di, fa), hn::Set(di, 0xFFFF)), hn::ShiftLeft<16>(hn::LoadU(di, fb)));
}

HWY_INLINE VI DotPairs(VI acc, VI v, const int32_t* wp) {
  const VI w = hn::Load(DI(), wp);
  const VI lo = hn::ShiftRight<16>(hn::ShiftLeft<16>(v)), hi = hn::ShiftRight<16>(v);
  const VI wlo = hn::ShiftRight<16>(hn::ShiftLeft<16>(w)), whi = hn::ShiftRight<16>(w);
  return hn::Add(acc, hn::Add(hn::Mul(lo, wlo), hn::Mul(hi, whi)));
}
#endif

#if !(HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL)
// The levels of channels k0 .. k0 + n - 1 of the step's token pairs, each paired on its own.
template <int kBits, int k0, int n>
HWY_INLINE void StepLevelsN(const FixedLevels& L, const VU* a, const VU* b, VI* v) {
  [&]<size_t... K>(std::index_sequence<K...>) {
    ((v[K] = StepLevels<kBits, k0 + int(K)>(L, a, b)), ...);
  }(std::make_index_sequence<n>());
}
#endif

template <int kBits, int kRows, int p>
HWY_INLINE void ScorePair(const FixedLevels& L, const VU* w, const AliasedI32* const* q, int g, VI (*acc)[kRows]) {
  const VI v = PairLevels<kBits, p>(L, w);
  for (int r = 0; r < kRows; ++r) acc[p % kSets][r] = DotPair(acc[p % kSets][r], v, q[r] + g * kPairs + p);
}

template <int kBits, int kRows, size_t... P>
HWY_INLINE void ScoreGroup(const FixedLevels& L, const VU* w, const AliasedI32* const* q, int g, VI (*acc)[kRows],
                           std::index_sequence<P...>) {
  (ScorePair<kBits, kRows, int(P)>(L, w, q, g, acc), ...);
}

// out[r * out_stride + t] = scale_t * unit_r * sum_c q_r[c] level(code_tc), the sum in integers
// over each run of kFlushGroups groups and in float over the runs, in order.
template <int kBits, int kRows, bool kAdd>
HWY_INLINE void ScoreBlock(const FixedLevels& L, const AliasedI32* const* q, const float* unit,
                           const uint8_t* HWY_RESTRICT blk, int n_groups, float* HWY_RESTRICT out, size_t out_stride) {
  const DF df;
  const DU du;
  const DI di;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const uint32_t* words = reinterpret_cast<const uint32_t*>(blk + kScaleBytes);
  const hwy::float16_t* scales = reinterpret_cast<const hwy::float16_t*>(blk);
  for (int part = 0; part < kParts; ++part) {
    VF sum[kRows];  // from zero: an integer's conversion is never -0, so 0 + f is f
    for (int r = 0; r < kRows; ++r) sum[r] = hn::Zero(df);
    for (int g0 = 0; g0 < n_groups; g0 += kFlushGroups) {
      VI acc[kSets][kRows];
      for (int e = 0; e < kSets; ++e) {
        for (int r = 0; r < kRows; ++r) acc[e][r] = hn::Zero(di);
      }
      const int g1 = std::min(n_groups, g0 + kFlushGroups);
      for (int g = g0; g < g1; ++g) {
        VU w[kBits];
        for (int m = 0; m < kBits; ++m) w[m] = hn::LoadU(du, words + size_t(g * kBits + m) * kSub + part * kLanes);
        ScoreGroup<kBits, kRows>(L, w, q, g, acc, std::make_index_sequence<kPairs>());
      }
      for (int r = 0; r < kRows; ++r) {
        const VF f = hn::ConvertTo(df, hn::Add(acc[0][r], acc[1][r]));
        sum[r] = hn::Add(sum[r], f);
      }
    }
    const VF s = hn::PromoteTo(df, hn::LoadU(dh, scales + part * kLanes));
    for (int r = 0; r < kRows; ++r) {
      VF v = hn::Mul(hn::Mul(sum[r], hn::Set(df, unit[r])), s);
      float* dst = out + size_t(r) * out_stride + part * kLanes;
      if constexpr (kAdd) v = hn::Add(hn::LoadU(df, dst), v);
      hn::StoreU(v, df, dst);
    }
  }
}

template <int kBits, int kRows, bool kAdd>
void ScoreRows(const float* states, size_t qs, const uint8_t* blocks, size_t bb, int d, int64_t i0, int64_t i1,
               const FixedLevels& L, float* out, size_t out_stride) {
  const AliasedI32* q[kRows];
  float unit[kRows];
  for (int r = 0; r < kRows; ++r) {
    q[r] = reinterpret_cast<const AliasedI32*>(states + size_t(r) * qs);
    unit[r] = states[size_t(r) * qs + size_t(d / 2)];
  }
  const int n_groups = d / kGroup;
  ScoreLaneBlocks<kRows, kSub, kAdd>(blocks, bb, i0, i1, out, out_stride,
                                     [&](const uint8_t* blk, float* dst, size_t stride, auto... add) {
                                       ScoreBlock<kBits, kRows, (false || ... || add())>(L, q, unit, blk, n_groups, dst,
                                                                                         stride);
                                     });
}

template <int kBits, bool kAdd>
void ScoresT(const float* states, int n_q, size_t qs, const uint8_t* blocks, size_t bb, int d, int64_t i0, int64_t i1,
             const int16_t* levels32, float* out, size_t out_stride) {
  const FixedLevels L = LoadFixedLevels(levels32);
  ForRowPasses(n_q, [&](auto rows, int r) {
    ScoreRows<kBits, rows(), kAdd>(states + size_t(r) * qs, qs, blocks, bb, d, i0, i1, L,
                                   out + size_t(r) * out_stride, out_stride);
  });
}

// ---- values ---------------------------------------------------------------------------------

constexpr int kBatch = 16;  // blocks a run: 256 tokens, turbo_lanes::kFixedWeightRun
static_assert(kBatch * kSub == turbo_lanes::kFixedWeightRun, "the weights' bound is per run");
constexpr int kQuad = kParts == 1 ? 4 : 2;  // channels a pass: kRows x kQuad accumulators in registers
// A step takes kPairBlocks blocks and gives kStepVecs vectors of token pairs per channel.
constexpr int kStepVecs = kParts == 1 ? 1 : kParts / 2;
constexpr int kStepLanes = kStepVecs * kLanes;  // pairs a step and row: 16 (two blocks) or 8

// acc rows (channels kQuad h .. of the group accg starts) += wunit_r * the run's integer sums of
// the steps' weight pairs WP[step][r] against the same channel's levels of the step's tokens.
template <int kBits, int kRows, int h>
HWY_INLINE void AccumulateQuadRun(const FixedLevels& L, const uint8_t* HWY_RESTRICT words0, size_t wstride, int nb,
                                  int g, const int32_t* HWY_RESTRICT WP, const float* wunit, const float* wunit4,
                                  float* HWY_RESTRICT accg, size_t acc_stride, const uint8_t* next, size_t share,
                                  size_t next_bytes) {
  // This pass's share of the next run's bytes, as the float kernel asks for them.
  const size_t p0 = size_t(g * (kGroup / kQuad) + h) * share;
  if (p0 < next_bytes) PrefetchBytes(next + p0, std::min(share, next_bytes - p0));
  const DI di;
  const DU du;
  VI A[kRows][kQuad];
  for (int r = 0; r < kRows; ++r) {
    for (int kk = 0; kk < kQuad; ++kk) A[r][kk] = hn::Zero(di);
  }
  const auto step = [&](const VU* a, const VU* b, const int32_t* wp) {
    VI v[kQuad];
    StepLevelsN<kBits, kQuad * h, kQuad>(L, a, b, v);
    for (int kk = 0; kk < kQuad; ++kk) {
      for (int r = 0; r < kRows; ++r) A[r][kk] = DotPairs(A[r][kk], v[kk], wp + r * kStepLanes);
    }
  };
  for (int bi = 0, st = 0; bi < nb; bi += kPairBlocks, ++st) {
    VU a[kBits], b[kBits];  // the words these channels do not touch are never loaded (dead loads)
    const uint32_t* wa = reinterpret_cast<const uint32_t*>(words0 + size_t(bi) * wstride);
    if constexpr (kPairBlocks == 2) {
      // An odd last block pairs with itself; its pair's weights are zero.
      const uint32_t* wb = reinterpret_cast<const uint32_t*>(words0 + size_t(std::min(bi + 1, nb - 1)) * wstride);
      for (int m = 0; m < kBits; ++m) {
        a[m] = hn::LoadU(du, wa + m * kSub);
        b[m] = hn::LoadU(du, wb + m * kSub);
      }
      step(a, b, WP + size_t(st) * kRows * kStepLanes);
    } else {
      for (int q = 0; q < kStepVecs; ++q) {
        for (int m = 0; m < kBits; ++m) {
          a[m] = hn::LoadU(du, wa + m * kSub + q * kLanes);
          b[m] = hn::LoadU(du, wa + m * kSub + (q + kParts / 2) * kLanes);
        }
        step(a, b, WP + size_t(st) * kRows * kStepLanes + q * kLanes);
      }
    }
  }
  (void)wunit4;
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  if constexpr (kRows == 4 && kQuad == 4) {
    // The 16 sums out of one interleave tree, exact in integers: block r of `sums` holds row r's
    // four channels; wunit4 holds each row's unit in its block.
    const DF df;
    const VI sums = SumOfLanes16(di, A);
    alignas(64) float blocks[16];
    hn::Store(hn::Mul(hn::ConvertTo(df, sums), hn::Load(df, wunit4)), df, blocks);
    const hn::CappedTag<float, 4> d4;
    for (int r = 0; r < 4; ++r) {
      float* o = accg + size_t(r) * acc_stride + size_t(kQuad * h);
      hn::StoreU(hn::Add(hn::LoadU(d4, o), hn::Load(d4, blocks + 4 * r)), d4, o);
    }
    return;
  }
#endif
  for (int r = 0; r < kRows; ++r) {
    alignas(16) int32_t sums[4];
    if constexpr (kQuad == 4) {
      // Exact: no partial sum overflows (turbo_lane_kernels.h), so the order does not matter.
      SumOfLanes4(di, A[r][0], A[r][1], A[r][2], A[r][3], sums);
    } else {
      for (int kk = 0; kk < kQuad; ++kk) sums[kk] = hn::GetLane(hn::SumOfLanes(di, A[r][kk]));
    }
    for (int kk = 0; kk < kQuad; ++kk) accg[size_t(r) * acc_stride + size_t(kQuad * h + kk)] += float(sums[kk]) * wunit[r];
  }
}

template <int kBits, int kRows, size_t... H>
HWY_INLINE void AccumulateGroup(const FixedLevels& L, const uint8_t* words0, size_t wstride, int nb, int g,
                                const int32_t* WP, const float* wunit, const float* wunit4, float* accg,
                                size_t acc_stride, const uint8_t* next, size_t share, size_t next_bytes,
                                std::index_sequence<H...>) {
  (AccumulateQuadRun<kBits, kRows, int(H)>(L, words0, wstride, nb, g, WP, wunit, wunit4, accg, acc_stride, next,
                                           share, next_bytes),
   ...);
}

// The run's weights W[bi][r][t] (w times the token's scale) in fixed point, as token pairs
// WP[step][r][pair] for the steps of AccumulateQuadRun. A row's unit wu is the larger of its
// largest |W| / kFixedWeight and an upper bound of its sum of |W| / kFixedWeightSum: that bound
// is an integer sum (of ceil(|W| 2^20 / max) + 1), the same on every target. wunit[r] is wu times
// the levels' unit, NaN where a weight is not finite (the sums are then NaN, as in float).
template <int kRows>
HWY_INLINE void FixedWeights(const float* HWY_RESTRICT W, int nb, float level_unit, int32_t* HWY_RESTRICT F,
                             int32_t* HWY_RESTRICT WP, float* wunit) {
  const DF df;
  const DI di;
  for (int r = 0; r < kRows; ++r) {
    const auto at = [&](int bi, int p) { return W + (size_t(bi) * kRows + r) * kSub + p * kLanes; };
    VF top_v = hn::Zero(df), all = hn::Zero(df);
    for (int bi = 0; bi < nb; ++bi) {
      for (int p = 0; p < kParts; ++p) {
        const VF v = hn::LoadU(df, at(bi, p));
        top_v = hn::Max(top_v, hn::Abs(v));
        all = hn::Add(all, v);
      }
    }
    const float top = hn::GetLane(hn::MaxOfLanes(df, top_v));
    if (!std::isfinite(hn::GetLane(hn::SumOfLanes(df, all))) || !std::isfinite(top) || top == 0.0f) {
      wunit[r] = top == 0.0f ? 0.0f : std::numeric_limits<float>::quiet_NaN();
      for (int bi = 0; bi < kBatch; ++bi) std::fill_n(F + (size_t(bi) * kRows + r) * kSub, kSub, 0);
      continue;
    }
    const VF to_count = hn::Set(df, 1048576.0f / top);
    VI count = hn::Zero(di);
    for (int bi = 0; bi < nb; ++bi) {
      for (int p = 0; p < kParts; ++p) {
        const VF x = hn::Ceil(hn::Mul(hn::Abs(hn::LoadU(df, at(bi, p))), to_count));
        count = hn::Add(count, hn::Add(hn::ConvertTo(di, x), hn::Set(di, 1)));
      }
    }
    const float upper = float(hn::GetLane(hn::SumOfLanes(di, count))) * (top / 1048576.0f);
    const float wu = std::max(top / float(turbo_lanes::kFixedWeight), upper / float(turbo_lanes::kFixedWeightSum));
    const VF to_fixed = hn::Set(df, 1.0f / wu);
    for (int bi = 0; bi < kBatch; ++bi) {
      for (int p = 0; p < kParts; ++p) {
        int32_t* f = F + (size_t(bi) * kRows + r) * kSub + p * kLanes;
        if (bi < nb) {
          hn::StoreU(RoundToInt(hn::Mul(hn::LoadU(df, at(bi, p)), to_fixed)), di, f);
        } else {
          hn::StoreU(hn::Zero(di), di, f);
        }
      }
    }
    wunit[r] = wu * level_unit;
  }
  for (int bi = 0, st = 0; bi < nb; bi += kPairBlocks, ++st) {
    for (int r = 0; r < kRows; ++r) {
      int32_t* wp = WP + (size_t(st) * kRows + r) * kStepLanes;
      const int32_t* f = F + (size_t(bi) * kRows + r) * kSub;
      if constexpr (kPairBlocks == 2) {
        hn::Store(StepWeights(f, F + (size_t(bi + 1) * kRows + r) * kSub), di, wp);  // zero past nb
      } else {
        for (int q = 0; q < kStepVecs; ++q) {
          hn::Store(StepWeights(f + q * kLanes, f + (q + kParts / 2) * kLanes), di, wp + q * kLanes);
        }
      }
    }
  }
}

template <int kBits, int kRows>
void AccumulateRows(const float* w, size_t w_stride, const uint8_t* blocks, size_t bb, int d, int64_t i0, int64_t i1,
                    const FixedLevels& L, float level_unit, float* acc, size_t acc_stride) {
  const int n_groups = d / kGroup;
  const int passes = n_groups * (kGroup / kQuad);
  alignas(64) float W[kBatch * kRows * kSub];
  alignas(64) int32_t F[(kBatch + 1) * kRows * kSub];  // one block of zeros past the run for an odd pair
  alignas(64) int32_t WP[kBatch * kRows * kSub / 2 + kRows * kStepLanes];
  float wunit[kRows];
  ForEachWeightedRun<kRows, kSub, kBatch>(w, w_stride, blocks, bb, i0, i1, passes, W, [&](const uint8_t* run, int nb,
                                                                                          size_t next_bytes,
                                                                                          size_t share) {
    std::fill_n(F + size_t(kBatch) * kRows * kSub, size_t(kRows) * kSub, 0);
    FixedWeights<kRows>(W, nb, level_unit, F, WP, wunit);
    alignas(64) float wunit4[16];  // row r's unit in elements 4r .. 4r + 3 (AVX-512's four rows)
    for (int e = 0; e < 16; ++e) wunit4[e] = wunit[std::min(e / 4, kRows - 1)];
    for (int g = 0; g < n_groups; ++g) {
      AccumulateGroup<kBits, kRows>(L, run + kScaleBytes + size_t(g) * kBits * kSub * 4, bb, nb, g, WP, wunit, wunit4,
                                    acc + size_t(g) * kGroup, acc_stride, run + next_bytes, share, next_bytes,
                                    std::make_index_sequence<kGroup / kQuad>());
    }
  });
}

template <int kBits>
void AccumulateT(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, size_t bb, int d, int64_t i0,
                 int64_t i1, const int16_t* levels32, float level_unit, float* acc, size_t acc_stride) {
  const FixedLevels L = LoadFixedLevels(levels32);
  ForRowPasses(n_q, [&](auto rows, int r) {
    AccumulateRows<kBits, rows()>(w + size_t(r) * w_stride, w_stride, blocks, bb, d, i0, i1, L, level_unit,
                                  acc + size_t(r) * acc_stride, acc_stride);
  });
}

}  // namespace fixed_lanes

// Calls fn(std::integral_constant<int, bits>) for bits 2..4.
template <class Fn>
HWY_INLINE void WithFixedBits(int bits, Fn&& fn) {
  switch (bits) {
    case 2: fn(std::integral_constant<int, 2>()); break;
    case 3: fn(std::integral_constant<int, 3>()); break;
    default: fn(std::integral_constant<int, 4>()); break;
  }
}

void TurboLanesFixedScores(int bits, bool add, const float* states, int n_q, size_t qs, const uint8_t* blocks,
                           size_t bb, int d, int64_t i0, int64_t i1, const int16_t* levels32, float* out,
                           size_t out_stride) {
  if (i1 <= i0) return;
  const auto run = [&](auto b) {
    if (add) {
      fixed_lanes::ScoresT<b(), true>(states, n_q, qs, blocks, bb, d, i0, i1, levels32, out, out_stride);
    } else {
      fixed_lanes::ScoresT<b(), false>(states, n_q, qs, blocks, bb, d, i0, i1, levels32, out, out_stride);
    }
  };
  WithFixedBits(bits, run);
}

void TurboLanesFixedAccumulate(int bits, const float* w, size_t w_stride, int n_q, const uint8_t* blocks, size_t bb,
                               int d, int64_t i0, int64_t i1, const int16_t* levels32, float level_unit, float* acc,
                               size_t acc_stride) {
  if (i1 <= i0) return;
  WithFixedBits(bits, [&](auto b) {
    fixed_lanes::AccumulateT<b()>(w, w_stride, n_q, blocks, bb, d, i0, i1, levels32, level_unit, acc, acc_stride);
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq::kv::turbo_lanes {
HWY_EXPORT(TurboLanesFixedScores);
HWY_EXPORT(TurboLanesFixedAccumulate);

void fixed_scores(int bits, bool add, const float* states, int n_q, size_t qs, const uint8_t* blocks, size_t bb, int d,
                  int64_t i0, int64_t i1, const int16_t* levels32, float* out, size_t out_stride) {
  HWY_DYNAMIC_DISPATCH(TurboLanesFixedScores)(bits, add, states, n_q, qs, blocks, bb, d, i0, i1, levels32, out,
                                               out_stride);
}

void fixed_accumulate(int bits, const float* w, size_t w_stride, int n_q, const uint8_t* blocks, size_t bb, int d,
                      int64_t i0, int64_t i1, const int16_t* levels32, float level_unit, float* acc,
                      size_t acc_stride) {
  HWY_DYNAMIC_DISPATCH(TurboLanesFixedAccumulate)(bits, w, w_stride, n_q, blocks, bb, d, i0, i1, levels32, level_unit,
                                                   acc, acc_stride);
}

}  // namespace vq::kv::turbo_lanes
#endif
