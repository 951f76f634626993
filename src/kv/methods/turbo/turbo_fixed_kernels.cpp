// TurboQuant's lane scores at 2 to 4 bits in 16-bit fixed point, compiled per SIMD target (the
// layout is turbo_lanes.h's; the query state and the bounds are in turbo_lane_kernels.h).
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
#include <cstdint>
#include <utility>

#include "hwy/highway.h"
#include "src/kv/kernels/fused_kernels-inl.h"
#include "src/kv/methods/turbo/lane_codes-inl.h"
#include "src/kv/methods/turbo/turbo_lane_kernels.h"

HWY_BEFORE_NAMESPACE();
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

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq::kv::turbo_lanes {
HWY_EXPORT(TurboLanesFixedScores);

void fixed_scores(int bits, bool add, const float* states, int n_q, size_t qs, const uint8_t* blocks, size_t bb, int d,
                  int64_t i0, int64_t i1, const int16_t* levels32, float* out, size_t out_stride) {
  HWY_DYNAMIC_DISPATCH(TurboLanesFixedScores)(bits, add, states, n_q, qs, blocks, bb, d, i0, i1, levels32, out,
                                               out_stride);
}

}  // namespace vq::kv::turbo_lanes
#endif
