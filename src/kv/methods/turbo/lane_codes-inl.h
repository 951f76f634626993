// The code words of the token-lane layout (lane_words.h) read a vector of tokens at a time, for
// the fused kernels of every method that stores them (TurboQuant, KVQuant): a channel's codes
// come out of a group's words with a shift (two and an or when they straddle words) and one
// register table lookup of the levels (vpermps on AVX-512, vpermps + blend at 4 bits on AVX2),
// which ignores the bits of the next channels above the code. Included once per Highway target.
#if defined(VQ_KV_LANE_CODES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef VQ_KV_LANE_CODES_INL_H_
#undef VQ_KV_LANE_CODES_INL_H_
#else
#define VQ_KV_LANE_CODES_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace vq::kv {
namespace HWY_NAMESPACE {
namespace lane_codes {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DU = hn::RebindToUnsigned<DF>;
using DI = hn::RebindToSigned<DF>;
using VF = hn::Vec<DF>;
using VU = hn::Vec<DU>;
constexpr int kLanes = int(hn::MaxLanes(DF()));

// The level table in registers; `table` holds 16 floats, level(i mod 2^bits).
struct Levels {
  VF lo, hi;  // entries 0 .. 7 and 8 .. 15 on AVX2 (hi is used at 4 bits only); 0 .. 15 in lo on AVX-512
  const float* table;
};

HWY_INLINE Levels LoadLevels(const float* table16) {
  const DF df;
  return Levels{hn::LoadU(df, table16), hn::LoadU(df, table16 + (kLanes == 8 ? 8 : 0)), table16};
}

// level(low kBits bits of each lane of idx); the bits above are ignored.
template <int kBits>
HWY_INLINE VF Lookup(const Levels& L, VU idx) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  return VF{_mm512_permutexvar_ps(idx.raw, L.lo.raw)};  // the low four bits (the table repeats)
#elif HWY_TARGET == HWY_AVX2
  const __m256 lo = _mm256_permutevar8x32_ps(L.lo.raw, idx.raw);  // the low three bits
  if constexpr (kBits < 4) {
    return VF{lo};
  } else {
    // bit 3 picks the upper half: moved to the sign bit, which blendv reads
    const __m256 hi = _mm256_permutevar8x32_ps(L.hi.raw, idx.raw);
    return VF{_mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(idx.raw, 28)))};
  }
#else
  const DI di;
  return hn::GatherIndex(DF(), L.table, hn::BitCast(di, hn::And(idx, hn::Set(DU(), (1u << kBits) - 1))));
#endif
}

// Channel k's codes (in the low bits, the next channels' above) from a group's words w[0..kBits).
template <int kBits, int k>
HWY_INLINE VU CodeBits(const VU* w) {
  constexpr int o = kBits * k, m = o / 32, s = o % 32;
  if constexpr (s == 0) {
    return w[m];
  } else if constexpr (s + kBits <= 32) {
    return hn::ShiftRight<s>(w[m]);
  } else {
    return hn::Or(hn::ShiftRight<s>(w[m]), hn::ShiftLeft<32 - s>(w[m + 1]));
  }
}

// The tail's words (lane_words.h: its bit string kept in tb byte rows of 16 tokens) for the
// vector of tokens from lane0: word m from bytes 4m .. 4m+3, zero where the string has ended.
template <int kBits>
HWY_INLINE void LoadTailWords(const uint8_t* HWY_RESTRICT rows, int tb, int lane0, VU* w) {
  const DU du;
  const hn::Rebind<uint8_t, DU> d8;
  for (int m = 0; m < kBits; ++m) {
    w[m] = hn::Zero(du);
    for (int j = 4 * m; j < tb && j < 4 * m + 4; ++j) {
      const VU b = hn::PromoteTo(du, hn::LoadU(d8, rows + size_t(j) * 16 + size_t(lane0)));
      w[m] = hn::Or(w[m], hn::ShiftLeftSame(b, 8 * (j - 4 * m)));
    }
  }
}

// Calls fn(std::integral_constant<int, n>) with n the tail's k channels rounded up to 8, 16, 24
// or 32, so that a tail kernel spends its work on at most 7 channels past the tail.
template <class Fn>
HWY_INLINE void WithTailChannels(int k, Fn&& fn) {
  switch ((k + 7) / 8) {
    case 1: fn(std::integral_constant<int, 8>()); break;
    case 2: fn(std::integral_constant<int, 16>()); break;
    case 3: fn(std::integral_constant<int, 24>()); break;
    default: fn(std::integral_constant<int, 32>()); break;
  }
}

// Calls fn(std::integral_constant<int, 4>(), r) for the query rows r = 0, 4, ... in passes of
// four, then fn(std::integral_constant<int, 1>(), r) for each row left: the kernels' row blocks.
template <class Fn>
HWY_INLINE void ForRowPasses(int n_q, Fn&& fn) {
  int r = 0;
  for (; r + 4 <= n_q; r += 4) fn(std::integral_constant<int, 4>(), r);
  for (; r < n_q; ++r) fn(std::integral_constant<int, 1>(), r);
}

// Calls fn(std::integral_constant<int, bits>) for bits 1..4 (4 for anything else), so that each
// kernel is instantiated once per bit width from one switch.
template <class Fn>
HWY_INLINE void WithBits(int bits, Fn&& fn) {
  switch (bits) {
    case 1: fn(std::integral_constant<int, 1>()); break;
    case 2: fn(std::integral_constant<int, 2>()); break;
    case 3: fn(std::integral_constant<int, 3>()); break;
    default: fn(std::integral_constant<int, 4>()); break;
  }
}

}  // namespace lane_codes
}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#endif  // VQ_KV_LANE_CODES_INL_H_
