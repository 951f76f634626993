// Highway versions of the kernels in lut_kernels.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/lut_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/kv/lut_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace vq::kv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;

// levels[codes[i .. i+N)] as floats: one in-register lookup when the table fits a vector,
// a gather otherwise.
HWY_INLINE hn::Vec<DF> Lookup(const uint8_t* HWY_RESTRICT codes, const float* HWY_RESTRICT levels, int n_levels,
                              hn::Vec<DF> table) {
  const DF df;
  const DI di;
  const hn::Rebind<uint8_t, DI> d8;
  const auto idx = hn::PromoteTo(di, hn::LoadU(d8, codes));
  if (n_levels <= int(hn::Lanes(df))) return hn::TableLookupLanes(table, hn::IndicesFromVec(df, idx));
  return hn::GatherIndex(df, levels, idx);
}

HWY_INLINE hn::Vec<DF> LevelTable(const float* levels, int n_levels) {
  const DF df;
  HWY_ALIGN float t[hn::MaxLanes(DF())] = {};
  const int N = int(hn::Lanes(df));
  for (int i = 0; i < n_levels && i < N; ++i) t[i] = levels[i];
  return hn::Load(df, t);
}

void LutAffineChannels(const uint8_t* HWY_RESTRICT codes, int n, const float* HWY_RESTRICT levels, int n_levels,
                       const float* HWY_RESTRICT base, const float* HWY_RESTRICT scale, float* HWY_RESTRICT out) {
  const DF df;
  const int N = int(hn::Lanes(df));
  const auto table = LevelTable(levels, n_levels);
  int i = 0;
  for (; i + N <= n; i += N) {
    const auto l = Lookup(codes + i, levels, n_levels, table);
    hn::StoreU(hn::Add(hn::LoadU(df, base + i), hn::Mul(hn::LoadU(df, scale + i), l)), df, out + i);
  }
  for (; i < n; ++i) out[i] = base[i] + scale[i] * levels[codes[i]];
}

void LutAffine(const uint8_t* HWY_RESTRICT codes, int n, const float* HWY_RESTRICT levels, int n_levels, float zero,
               float scale, float* HWY_RESTRICT out) {
  const DF df;
  const int N = int(hn::Lanes(df));
  const auto table = LevelTable(levels, n_levels);
  const auto vz = hn::Set(df, zero), vs = hn::Set(df, scale);
  int i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Add(vz, hn::Mul(vs, Lookup(codes + i, levels, n_levels, table))), df, out + i);
  for (; i < n; ++i) out[i] = zero + scale * levels[codes[i]];
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

// The same for vectors of 8 lanes and at most 4 planes, in a fixed seven operations instead of
// a mask load and a select per plane: the eight channels' bits sit in one byte of each plane, so
// one 32-bit word holds all of them (plane j in byte j); lane L shifts it right by L, keeps bit
// 0 of each byte, and two shift-or steps bring the bits at 0, 8, 16, 24 down to 0, 1, 2, 3.
HWY_INLINE hn::Vec<DI> PlaneCodes8(const uint8_t* HWY_RESTRICT planes, size_t stride, int bits, int i) {
  const DI di;
  const hn::RebindToUnsigned<DI> du;
  uint32_t word = 0;
  for (int j = 0; j < bits; ++j) word |= uint32_t(planes[size_t(j) * stride + size_t(i / 8)]) << (8 * j);
  auto x = hn::And(hn::Shr(hn::Set(du, word), hn::Iota(du, 0)), hn::Set(du, 0x01010101u));
  x = hn::Or(x, hn::ShiftRight<7>(x));
  x = hn::Or(x, hn::ShiftRight<14>(x));
  return hn::BitCast(di, hn::And(x, hn::Set(du, (1u << bits) - 1)));
}

// Codes of channels i .. i+N from the bit planes, by the cheaper of the two ways this width allows.
HWY_INLINE hn::Vec<DI> PlaneCodes(const uint8_t* HWY_RESTRICT planes, size_t stride, int bits, int i) {
  if (hn::Lanes(DI()) == 8 && bits <= 4) return PlaneCodes8(planes, stride, bits, i);
  return PlaneCodesMasked(planes, stride, bits, i);
}

HWY_INLINE hn::Vec<DF> LookupIdx(hn::Vec<DI> idx, const float* HWY_RESTRICT levels, int n_levels, hn::Vec<DF> table) {
  const DF df;
  if (n_levels <= int(hn::Lanes(df))) return hn::TableLookupLanes(table, hn::IndicesFromVec(df, idx));
  return hn::GatherIndex(df, levels, idx);
}

void LutAffinePlanesChannels(const uint8_t* HWY_RESTRICT planes, int n, int bits, const float* HWY_RESTRICT levels,
                             const float* HWY_RESTRICT base, const float* HWY_RESTRICT scale, float* HWY_RESTRICT out) {
  const DF df;
  const int N = int(hn::Lanes(df)), K = 1 << bits;
  const size_t stride = plane_bytes(n);
  const auto table = LevelTable(levels, K);
  int i = 0;
  if (N >= 8) {
    for (; i + N <= n; i += N) {
      const auto l = LookupIdx(PlaneCodes(planes, stride, bits, i), levels, K, table);
      hn::StoreU(hn::Add(hn::LoadU(df, base + i), hn::Mul(hn::LoadU(df, scale + i), l)), df, out + i);
    }
  }
  for (; i < n; ++i) out[i] = base[i] + scale[i] * levels[plane_code(planes, n, bits, i)];
}

void LutAffinePlanes(const uint8_t* HWY_RESTRICT planes, int n, int bits, const float* HWY_RESTRICT levels, float zero,
                     float scale, float* HWY_RESTRICT out) {
  const DF df;
  const int N = int(hn::Lanes(df)), K = 1 << bits;
  const size_t stride = plane_bytes(n);
  const auto table = LevelTable(levels, K);
  const auto vz = hn::Set(df, zero), vs = hn::Set(df, scale);
  int i = 0;
  if (N >= 8) {
    for (; i + N <= n; i += N) {
      hn::StoreU(hn::Add(vz, hn::Mul(vs, LookupIdx(PlaneCodes(planes, stride, bits, i), levels, K, table))), df, out + i);
    }
  }
  for (; i < n; ++i) out[i] = zero + scale * levels[plane_code(planes, n, bits, i)];
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

void RotatePairs(float* HWY_RESTRICT a, float* HWY_RESTRICT b, int n, const float* HWY_RESTRICT cs,
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

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>

namespace vq::kv {
HWY_EXPORT(LutAffineChannels);
HWY_EXPORT(LutAffine);
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

void lut_affine_channels(const uint8_t* codes, int n, const float* levels, int n_levels, const float* base,
                         const float* scale, float* out) {
  HWY_DYNAMIC_DISPATCH(LutAffineChannels)(codes, n, levels, n_levels, base, scale, out);
}
void lut_affine(const uint8_t* codes, int n, const float* levels, int n_levels, float zero, float scale, float* out) {
  HWY_DYNAMIC_DISPATCH(LutAffine)(codes, n, levels, n_levels, zero, scale, out);
}
void compose_angles(const float* hc, const float* hs, const float* lc, const float* ls, int n, float* cs, float* sn) {
  HWY_DYNAMIC_DISPATCH(ComposeAngles)(hc, hs, lc, ls, n, cs, sn);
}
void rotate_pairs(float* a, float* b, int n, const float* cs, const float* sn, float sign) {
  HWY_DYNAMIC_DISPATCH(RotatePairs)(a, b, n, cs, sn, sign);
}
}  // namespace vq::kv
#endif
