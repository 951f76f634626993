// Highway dequantizers: each chunk of N consecutive elements lies inside one (sub-)block region,
// so a chunk is N bytes widened to 32-bit lanes, a few shifts and masks, one convert and the
// block's scale.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/engine/dequant.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/core/fp16.h"
#include "src/engine/dequant.h"
#include "src/engine/quants.h"

#include <cstring>

HWY_BEFORE_NAMESPACE();
namespace vq::engine {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DU = hn::RebindToUnsigned<DF>;
using DI = hn::RebindToSigned<DF>;
using VF = hn::Vec<DF>;
using VU = hn::Vec<DU>;

HWY_INLINE VU LoadBytes(const uint8_t* p) {
  const DU du;
  const hn::Rebind<uint8_t, DU> d8;
  return hn::PromoteTo(du, hn::LoadU(d8, p));
}
HWY_INLINE VF ToFloat(hn::Vec<DI> v) { return hn::ConvertTo(DF(), v); }
HWY_INLINE hn::Vec<DI> Signed(VU v) { return hn::BitCast(DI(), v); }

void DequantQ8_0(const uint8_t* src, float* y, int64_t n) {
  const DF df;
  const DI di;
  const hn::Rebind<int8_t, DI> d8;
  const int N = int(hn::Lanes(df));
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const auto* x = reinterpret_cast<const BlockQ8_0*>(src) + b;
    const VF d = hn::Set(df, f16_to_f32(x->d));
    for (int e = 0; e < kQK; e += N) {
      hn::StoreU(hn::Mul(ToFloat(hn::PromoteTo(di, hn::LoadU(d8, x->qs + e))), d), df, y + e);
    }
  }
}

// Q4_0 / Q5_0 (kHigh: fifth bit from qh) and Q4_1 / Q5_1 (kMin: value = q * d + m).
template <typename Block, bool kHigh, bool kMin>
void DequantLegacy(const uint8_t* src, float* y, int64_t n) {
  const DF df;
  const DU du;
  const int N = int(hn::Lanes(df));
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const auto* x = reinterpret_cast<const Block*>(src) + b;
    const VF d = hn::Set(df, f16_to_f32(x->d));
    VF m = hn::Zero(df);
    if constexpr (kMin) m = hn::Set(df, f16_to_f32(x->m));
    uint32_t qh = 0;
    if constexpr (kHigh) std::memcpy(&qh, x->qh, 4);
    for (int e = 0; e < kQK; e += N) {
      const VU bytes = LoadBytes(x->qs + (e % 16));
      VU q = e < 16 ? hn::And(bytes, hn::Set(du, 0xF)) : hn::ShiftRight<4>(bytes);
      if constexpr (kHigh) {
        // Bit e of qh is the fifth bit of element e.
        const VU bits = hn::And(hn::Shr(hn::Set(du, qh), hn::Iota(du, uint32_t(e))), hn::Set(du, 1));
        q = hn::Or(q, hn::ShiftLeft<4>(bits));
      }
      if constexpr (kMin) {
        hn::StoreU(hn::Add(hn::Mul(ToFloat(Signed(q)), d), m), df, y + e);
      } else {
        const auto centered = hn::Sub(Signed(q), hn::Set(DI(), kHigh ? 16 : 8));
        hn::StoreU(hn::Mul(ToFloat(centered), d), df, y + e);
      }
    }
  }
}

HWY_INLINE void ScaleMinK4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Q4_K and Q5_K (kHigh): sub-blocks of 32 with 6-bit scales and mins; value = d1 * q - m1.
template <typename Block, bool kHigh>
void DequantK45(const uint8_t* src, float* y, int64_t n) {
  const DF df;
  const DU du;
  const int N = int(hn::Lanes(df));
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const auto* x = reinterpret_cast<const Block*>(src) + b;
    const float d = f16_to_f32(x->d), dmin = f16_to_f32(x->dmin);
    for (int sb = 0; sb < 8; ++sb) {  // sub-block of 32: bytes 32*(sb/2), nibble sb%2
      uint8_t sc, m;
      ScaleMinK4(sb, x->scales, &sc, &m);
      const VF d1 = hn::Set(df, d * float(sc)), m1 = hn::Set(df, dmin * float(m));
      const uint8_t* q = x->qs + 32 * (sb / 2);
      for (int l = 0; l < 32; l += N) {
        const VU bytes = LoadBytes(q + l);
        VU v = sb % 2 == 0 ? hn::And(bytes, hn::Set(du, 0xF)) : hn::ShiftRight<4>(bytes);
        if constexpr (kHigh) {
          const VU h = hn::And(LoadBytes(x->qh + l), hn::Set(du, 1u << sb));
          v = hn::Add(v, hn::IfThenElseZero(hn::Ne(h, hn::Zero(du)), hn::Set(du, 16)));
        }
        hn::StoreU(hn::Sub(hn::Mul(d1, ToFloat(Signed(v))), m1), df, y + 32 * sb + l);
      }
    }
    y += kQK_K;
  }
}

void DequantQ6_K(const uint8_t* src, float* y, int64_t n) {
  const DF df;
  const DU du;
  const int N = int(hn::Lanes(df));
  const VU low4 = hn::Set(du, 0xF), two = hn::Set(du, 3);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const auto* x = reinterpret_cast<const BlockQ6_K*>(src) + b;
    const float d = f16_to_f32(x->d);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = x->ql + 64 * half;
      const uint8_t* qh = x->qh + 32 * half;
      const int8_t* sc = x->scales + 8 * half;
      for (int l = 0; l < 32; l += N) {
        const int is = l / 16;
        const VU lo0 = LoadBytes(ql + l), lo1 = LoadBytes(ql + l + 32), h = LoadBytes(qh + l);
        const VU q[4] = {
            hn::Or(hn::And(lo0, low4), hn::ShiftLeft<4>(hn::And(h, two))),
            hn::Or(hn::And(lo1, low4), hn::ShiftLeft<4>(hn::And(hn::ShiftRight<2>(h), two))),
            hn::Or(hn::ShiftRight<4>(lo0), hn::ShiftLeft<4>(hn::And(hn::ShiftRight<4>(h), two))),
            hn::Or(hn::ShiftRight<4>(lo1), hn::ShiftLeft<4>(hn::ShiftRight<6>(h))),
        };
        for (int k = 0; k < 4; ++k) {
          const VF ds = hn::Set(df, d * float(sc[is + 2 * k]));
          const auto centered = hn::Sub(Signed(q[k]), hn::Set(DI(), 32));
          hn::StoreU(hn::Mul(ds, ToFloat(centered)), df, y + 32 * k + l);
        }
      }
      y += 128;
    }
  }
}

void DequantHalf(const uint8_t* src, float* y, int64_t n, bool bf16) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  const uint16_t* h = reinterpret_cast<const uint16_t*>(src);
  int64_t i = 0;
  if (bf16) {
    const hn::Rebind<uint16_t, DF> d16;
    for (; i + N <= n; i += N) {
      hn::StoreU(hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(DU(), hn::LoadU(d16, h + i)))), df, y + i);
    }
    for (; i < n; ++i) y[i] = bf16_to_f32(h[i]);
  } else {
    const hn::Rebind<hwy::float16_t, DF> dh;
    for (; i + N <= n; i += N) {
      hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(h + i))), df, y + i);
    }
    for (; i < n; ++i) y[i] = f16_to_f32(h[i]);
  }
}

bool DequantRow(uint32_t type, const uint8_t* src, float* y, int64_t n) {
  // Chunks of N lanes must tile the 16-element half-blocks.
  if (16 % hn::Lanes(DF()) != 0) return false;
  switch (GgmlType(type)) {
    case GgmlType::kF16: DequantHalf(src, y, n, false); return true;
    case GgmlType::kBF16: DequantHalf(src, y, n, true); return true;
    case GgmlType::kQ8_0: DequantQ8_0(src, y, n); return true;
    case GgmlType::kQ4_0: DequantLegacy<BlockQ4_0, false, false>(src, y, n); return true;
    case GgmlType::kQ4_1: DequantLegacy<BlockQ4_1, false, true>(src, y, n); return true;
    case GgmlType::kQ5_0: DequantLegacy<BlockQ5_0, true, false>(src, y, n); return true;
    case GgmlType::kQ5_1: DequantLegacy<BlockQ5_1, true, true>(src, y, n); return true;
    case GgmlType::kQ4_K: DequantK45<BlockQ4_K, false>(src, y, n); return true;
    case GgmlType::kQ5_K: DequantK45<BlockQ5_K, true>(src, y, n); return true;
    case GgmlType::kQ6_K: DequantQ6_K(src, y, n); return true;
    default: return false;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::engine
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq::engine {
HWY_EXPORT(DequantRow);

void dequantize_row(uint32_t type, const uint8_t* src, float* dst, int64_t n) {
  if (!HWY_DYNAMIC_DISPATCH(DequantRow)(type, src, dst, n)) dequantize_row_scalar(type, src, dst, n);
}
}  // namespace vq::engine
#endif
