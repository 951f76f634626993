// Highway versions of the kernels in lut_kernels.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/kernels/lut_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include <algorithm>

#include "hwy/highway.h"
#include "src/kv/kernels/lut_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace vq::kv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;

HWY_INLINE hn::Vec<DF> LevelTable(const float* levels, int n_levels) {
  const DF df;
  HWY_ALIGN float t[hn::MaxLanes(DF())] = {};
  const int N = int(hn::Lanes(df));
  for (int i = 0; i < n_levels && i < N; ++i) t[i] = levels[i];
  return hn::Load(df, t);
}

// Codes of channels i .. i+N from the bit planes (i a multiple of 8): a mask load and a select
// per plane, for any vector width.
HWY_INLINE hn::Vec<DI> PlaneCodesMasked(const uint8_t* HWY_RESTRICT planes, size_t stride, int bits, int i) {
  const DI di;
  auto idx = hn::Zero(di);
  for (int j = 0; j < bits; ++j) {
    const auto m = hn::LoadMaskBits(di, planes + size_t(j) * stride + size_t(i / 8));
    idx = hn::Or(idx, hn::IfThenElseZero(m, hn::Set(di, 1 << j)));
  }
  return idx;
}

// The same for vectors of 8 lanes and at most 4 planes, from the group's 32-bit code word, in a
// fixed seven operations instead of a mask load and a select per plane: the eight channels' bits
// sit in one byte of each plane, so one word holds all of them (plane j in byte j); lane L shifts
// it right by L, keeps bit 0 of each byte, and two shift-or steps bring the bits at 0, 8, 16, 24
// down to 0, 1, 2, 3.
template <int kBits>
HWY_INLINE hn::Vec<DI> WordCodes8(uint32_t word) {
  const DI di;
  const hn::RebindToUnsigned<DI> du;
  auto x = hn::And(hn::Shr(hn::Set(du, word), hn::Iota(du, 0)), hn::Set(du, 0x01010101u));
  x = hn::Or(x, hn::ShiftRight<7>(x));
  x = hn::Or(x, hn::ShiftRight<14>(x));
  return hn::BitCast(di, hn::And(x, hn::Set(du, (1u << kBits) - 1)));
}

template <int kBits>
HWY_INLINE uint32_t PlaneWord(const uint8_t* HWY_RESTRICT planes, size_t stride, int g) {
  uint32_t word = 0;
  for (int j = 0; j < kBits; ++j) word |= uint32_t(planes[size_t(j) * stride + size_t(g)]) << (8 * j);
  return word;
}

// The words of groups [0, groups) (8 channels each) of one row at once: 16 groups from one
// 16-byte load per plane, two byte interleaves and two of 16-bit pairs per 8 groups, instead of
// a byte load, shift and or per plane and group.
template <int kBits>
HWY_INLINE void PlaneWords(const uint8_t* HWY_RESTRICT planes, size_t stride, int groups, uint32_t* HWY_RESTRICT words) {
  int g = 0;
#if HWY_TARGET != HWY_SCALAR  // (no 128-bit vectors there)
  const hn::Full128<uint8_t> d8;
  const hn::Full128<uint16_t> d16;
  const hn::Full128<uint32_t> d32;
  for (; g + 16 <= groups; g += 16) {
    const auto v0 = hn::LoadU(d8, planes + g);
    const auto v1 = kBits > 1 ? hn::LoadU(d8, planes + stride + g) : hn::Zero(d8);
    const auto v2 = kBits > 2 ? hn::LoadU(d8, planes + 2 * stride + g) : hn::Zero(d8);
    const auto v3 = kBits > 3 ? hn::LoadU(d8, planes + 3 * stride + g) : hn::Zero(d8);
    const auto lo01 = hn::BitCast(d16, hn::InterleaveLower(d8, v0, v1));
    const auto hi01 = hn::BitCast(d16, hn::InterleaveUpper(d8, v0, v1));
    const auto lo23 = hn::BitCast(d16, hn::InterleaveLower(d8, v2, v3));
    const auto hi23 = hn::BitCast(d16, hn::InterleaveUpper(d8, v2, v3));
    hn::StoreU(hn::BitCast(d32, hn::InterleaveLower(d16, lo01, lo23)), d32, words + g);
    hn::StoreU(hn::BitCast(d32, hn::InterleaveUpper(d16, lo01, lo23)), d32, words + g + 4);
    hn::StoreU(hn::BitCast(d32, hn::InterleaveLower(d16, hi01, hi23)), d32, words + g + 8);
    hn::StoreU(hn::BitCast(d32, hn::InterleaveUpper(d16, hi01, hi23)), d32, words + g + 12);
  }
#endif
  for (; g < groups; ++g) words[g] = PlaneWord<kBits>(planes, stride, g);
}

HWY_INLINE hn::Vec<DF> LookupIdx(hn::Vec<DI> idx, const float* HWY_RESTRICT levels, int n_levels, hn::Vec<DF> table) {
  const DF df;
  if (n_levels <= int(hn::Lanes(df))) return hn::TableLookupLanes(table, hn::IndicesFromVec(df, idx));
  return hn::GatherIndex(df, levels, idx);
}

// One row of bit-plane codes: out[c] = base[c] + scale[c] * level (kChannels) or
// zero + mul * level, the multiply and the add kept apart (the same bits on every target).
template <int kBits, bool kChannels>
HWY_INLINE void AffinePlanesRow(const uint8_t* HWY_RESTRICT planes, int n, int bits, const float* HWY_RESTRICT levels,
                                hn::Vec<DF> table, const float* HWY_RESTRICT base, const float* HWY_RESTRICT scale,
                                float zero, float mul, float* HWY_RESTRICT out) {
  const DF df;
  const int N = int(hn::Lanes(df)), K = 1 << bits;
  const size_t stride = plane_bytes(n);
  const auto vz = hn::Set(df, zero), vs = hn::Set(df, mul);
  const auto emit = [&](hn::Vec<DI> codes, int i) {
    const auto l = LookupIdx(codes, levels, K, table);
    const auto y = kChannels ? hn::Add(hn::LoadU(df, base + i), hn::Mul(hn::LoadU(df, scale + i), l))
                             : hn::Add(vz, hn::Mul(vs, l));
    hn::StoreU(y, df, out + i);
  };
  int i = 0;
  if constexpr (kBits >= 1 && kBits <= 4) {
    if (N == 8) {  // the code words of up to kMaxWords groups at a time
      constexpr int kMaxWords = 128;
      alignas(16) uint32_t words[kMaxWords];
      for (int g0 = 0; g0 < n / 8; g0 += kMaxWords) {
        const int groups = std::min(kMaxWords, n / 8 - g0);
        PlaneWords<kBits>(planes + g0, stride, groups, words);
        for (int k = 0; k < groups; ++k) emit(WordCodes8<kBits>(words[k]), 8 * (g0 + k));
      }
      i = n / 8 * 8;
    }
  }
  if (N >= 8) {
    for (; i + N <= n; i += N) emit(PlaneCodesMasked(planes, stride, bits, i), i);
  }
  for (; i < n; ++i) {
    const float l = levels[plane_code(planes, n, bits, i)];
    out[i] = kChannels ? base[i] + scale[i] * l : zero + mul * l;
  }
}

// n_rows rows (codes at planes + r * row_stride, out at out + r * out_stride), with the level
// table built once and the plane width fixed at compile time where it is 1..4.
template <int kBits, bool kChannels>
HWY_INLINE void AffinePlanesRowsT(const uint8_t* HWY_RESTRICT planes, size_t row_stride, int n_rows, int n, int bits,
                                  const float* HWY_RESTRICT levels, const float* HWY_RESTRICT base,
                                  const float* HWY_RESTRICT scale, const float* HWY_RESTRICT zero,
                                  const float* HWY_RESTRICT mul, float* HWY_RESTRICT out, size_t out_stride) {
  const auto table = LevelTable(levels, 1 << bits);
  for (int r = 0; r < n_rows; ++r) {
    AffinePlanesRow<kBits, kChannels>(planes + size_t(r) * row_stride, n, bits, levels, table, base, scale,
                                      kChannels ? 0.0f : zero[r], kChannels ? 0.0f : mul[r], out + size_t(r) * out_stride);
  }
}

template <bool kChannels>
HWY_INLINE void AffinePlanesRows(const uint8_t* planes, size_t row_stride, int n_rows, int n, int bits,
                                 const float* levels, const float* base, const float* scale, const float* zero,
                                 const float* mul, float* out, size_t out_stride) {
  switch (bits) {
    case 1: return AffinePlanesRowsT<1, kChannels>(planes, row_stride, n_rows, n, bits, levels, base, scale, zero, mul, out, out_stride);
    case 2: return AffinePlanesRowsT<2, kChannels>(planes, row_stride, n_rows, n, bits, levels, base, scale, zero, mul, out, out_stride);
    case 3: return AffinePlanesRowsT<3, kChannels>(planes, row_stride, n_rows, n, bits, levels, base, scale, zero, mul, out, out_stride);
    case 4: return AffinePlanesRowsT<4, kChannels>(planes, row_stride, n_rows, n, bits, levels, base, scale, zero, mul, out, out_stride);
    default: return AffinePlanesRowsT<0, kChannels>(planes, row_stride, n_rows, n, bits, levels, base, scale, zero, mul, out, out_stride);
  }
}

void LutAffinePlanesChannels(const uint8_t* HWY_RESTRICT planes, int n, int bits, const float* HWY_RESTRICT levels,
                             const float* HWY_RESTRICT base, const float* HWY_RESTRICT scale, float* HWY_RESTRICT out) {
  AffinePlanesRows<true>(planes, 0, 1, n, bits, levels, base, scale, nullptr, nullptr, out, 0);
}

void LutAffinePlanes(const uint8_t* HWY_RESTRICT planes, int n, int bits, const float* HWY_RESTRICT levels, float zero,
                     float scale, float* HWY_RESTRICT out) {
  AffinePlanesRows<false>(planes, 0, 1, n, bits, levels, nullptr, nullptr, &zero, &scale, out, 0);
}

void LutAffinePlanesChannelsRows(const uint8_t* HWY_RESTRICT planes, size_t row_stride, int n_rows, int n, int bits,
                                 const float* HWY_RESTRICT levels, const float* HWY_RESTRICT base,
                                 const float* HWY_RESTRICT scale, float* HWY_RESTRICT out, size_t out_stride) {
  AffinePlanesRows<true>(planes, row_stride, n_rows, n, bits, levels, base, scale, nullptr, nullptr, out, out_stride);
}

void LutAffinePlanesRows(const uint8_t* HWY_RESTRICT planes, size_t row_stride, int n_rows, int n, int bits,
                         const float* HWY_RESTRICT levels, const float* HWY_RESTRICT zero,
                         const float* HWY_RESTRICT scale, float* HWY_RESTRICT out, size_t out_stride) {
  AffinePlanesRows<false>(planes, row_stride, n_rows, n, bits, levels, nullptr, nullptr, zero, scale, out, out_stride);
}

void ComposeAngles(const float* HWY_RESTRICT hc, const float* HWY_RESTRICT hs, const float* HWY_RESTRICT lc,
                   const float* HWY_RESTRICT ls, int n, float* HWY_RESTRICT cs, float* HWY_RESTRICT sn) {
  const DF df;
  const int N = int(hn::Lanes(df));
  int i = 0;
  for (; i + N <= n; i += N) {
    const auto a = hn::LoadU(df, hc + i), b = hn::LoadU(df, hs + i), c = hn::LoadU(df, lc + i), s = hn::LoadU(df, ls + i);
    hn::StoreU(hn::Sub(hn::Mul(a, c), hn::Mul(b, s)), df, cs + i);
    hn::StoreU(hn::Add(hn::Mul(b, c), hn::Mul(a, s)), df, sn + i);
  }
  for (; i < n; ++i) {
    cs[i] = hc[i] * lc[i] - hs[i] * ls[i];
    sn[i] = hs[i] * lc[i] + hc[i] * ls[i];
  }
}

HWY_INLINE void RotatePairsRow(float* HWY_RESTRICT a, float* HWY_RESTRICT b, int n, const float* HWY_RESTRICT cs,
                               const float* HWY_RESTRICT sn, float sign) {
  const DF df;
  const int N = int(hn::Lanes(df));
  const auto vsign = hn::Set(df, sign);
  int i = 0;
  for (; i + N <= n; i += N) {
    const auto x0 = hn::LoadU(df, a + i), x1 = hn::LoadU(df, b + i), c = hn::LoadU(df, cs + i);
    const auto s = hn::Mul(vsign, hn::LoadU(df, sn + i));
    hn::StoreU(hn::Sub(hn::Mul(x0, c), hn::Mul(x1, s)), df, a + i);
    hn::StoreU(hn::Add(hn::Mul(x0, s), hn::Mul(x1, c)), df, b + i);
  }
  for (; i < n; ++i) {
    const float s = sign * sn[i], x0 = a[i], x1 = b[i];
    a[i] = x0 * cs[i] - x1 * s;
    b[i] = x0 * s + x1 * cs[i];
  }
}

void RotatePairs(float* HWY_RESTRICT a, float* HWY_RESTRICT b, int n, const float* HWY_RESTRICT cs,
                 const float* HWY_RESTRICT sn, float sign) {
  RotatePairsRow(a, b, n, cs, sn, sign);
}

void RotateHalvesRows(float* HWY_RESTRICT x, size_t stride, int n_rows, int half, const float* HWY_RESTRICT angles,
                      size_t angle_stride, float sign) {
  for (int r = 0; r < n_rows; ++r) {
    float* row = x + size_t(r) * stride;
    const float* cs = angles + size_t(r) * angle_stride;
    RotatePairsRow(row, row + half, half, cs, cs + half, sign);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>

namespace vq::kv {
HWY_EXPORT(ComposeAngles);
HWY_EXPORT(LutAffinePlanesChannels);
HWY_EXPORT(LutAffinePlanes);

void pack_planes(const uint8_t* codes, int n, int bits, uint8_t* out) {
  const size_t stride = plane_bytes(n);
  std::fill(out, out + size_t(bits) * stride, uint8_t(0));
  for (int c = 0; c < n; ++c) {
    for (int j = 0; j < bits; ++j) out[size_t(j) * stride + size_t(c / 8)] |= uint8_t(((codes[c] >> j) & 1) << (c % 8));
  }
}
void lut_affine_planes_channels(const uint8_t* planes, int n, int bits, const float* levels, const float* base,
                                const float* scale, float* out) {
  HWY_DYNAMIC_DISPATCH(LutAffinePlanesChannels)(planes, n, bits, levels, base, scale, out);
}
void lut_affine_planes(const uint8_t* planes, int n, int bits, const float* levels, float zero, float scale, float* out) {
  HWY_DYNAMIC_DISPATCH(LutAffinePlanes)(planes, n, bits, levels, zero, scale, out);
}
HWY_EXPORT(RotatePairs);
HWY_EXPORT(LutAffinePlanesChannelsRows);
HWY_EXPORT(LutAffinePlanesRows);
HWY_EXPORT(RotateHalvesRows);

void lut_affine_planes_channels_rows(const uint8_t* planes, size_t row_stride, int n_rows, int n, int bits,
                                     const float* levels, const float* base, const float* scale, float* out,
                                     size_t out_stride) {
  HWY_DYNAMIC_DISPATCH(LutAffinePlanesChannelsRows)(planes, row_stride, n_rows, n, bits, levels, base, scale, out, out_stride);
}
void lut_affine_planes_rows(const uint8_t* planes, size_t row_stride, int n_rows, int n, int bits, const float* levels,
                            const float* zero, const float* scale, float* out, size_t out_stride) {
  HWY_DYNAMIC_DISPATCH(LutAffinePlanesRows)(planes, row_stride, n_rows, n, bits, levels, zero, scale, out, out_stride);
}
void rotate_halves_rows(float* x, size_t stride, int n_rows, int half, const float* angles, size_t angle_stride,
                        float sign) {
  HWY_DYNAMIC_DISPATCH(RotateHalvesRows)(x, stride, n_rows, half, angles, angle_stride, sign);
}

void compose_angles(const float* hc, const float* hs, const float* lc, const float* ls, int n, float* cs, float* sn) {
  HWY_DYNAMIC_DISPATCH(ComposeAngles)(hc, hs, lc, ls, n, cs, sn);
}
void rotate_pairs(float* a, float* b, int n, const float* cs, const float* sn, float sign) {
  HWY_DYNAMIC_DISPATCH(RotatePairs)(a, b, n, cs, sn, sign);
}
}  // namespace vq::kv
#endif
