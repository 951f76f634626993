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
#include <type_traits>

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

// One fp16 value through the hardware converter (the scalar bit-twiddling version costs more
// than dequantizing the rest of a Q8_0 block).
HWY_INLINE float H2F(uint16_t h) {
  const hn::CappedTag<float, 1> d1;
  const hn::Rebind<hwy::float16_t, decltype(d1)> dh1;
  return hn::GetLane(hn::PromoteTo(d1, hn::LoadU(dh1, reinterpret_cast<const hwy::float16_t*>(&h))));
}
HWY_INLINE hn::Vec<DI> Signed(VU v) { return hn::BitCast(DI(), v); }

template <class Sink>
HWY_INLINE void DequantQ8_0(const uint8_t* src, Sink& sink, int64_t n) {
  int64_t y = 0;
  const DF df;
  const DI di;
  const hn::Rebind<int8_t, DI> d8;
  const int N = int(hn::Lanes(df));
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const auto* x = reinterpret_cast<const BlockQ8_0*>(src) + b;
    const VF d = hn::Set(df, H2F(x->d));
    for (int e = 0; e < kQK; e += N) {
      sink(y + e, hn::Mul(ToFloat(hn::PromoteTo(di, hn::LoadU(d8, x->qs + e))), d));
    }
  }
}

// Q4_0 / Q5_0 (kHigh: fifth bit from qh) and Q4_1 / Q5_1 (kMin: value = q * d + m).
template <typename Block, bool kHigh, bool kMin, class Sink>
HWY_INLINE void DequantLegacy(const uint8_t* src, Sink& sink, int64_t n) {
  int64_t y = 0;
  const DF df;
  const DU du;
  const int N = int(hn::Lanes(df));
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const auto* x = reinterpret_cast<const Block*>(src) + b;
    const VF d = hn::Set(df, H2F(x->d));
    VF m = hn::Zero(df);
    if constexpr (kMin) m = hn::Set(df, H2F(x->m));
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
        sink(y + e, hn::Add(hn::Mul(ToFloat(Signed(q)), d), m));
      } else {
        const auto centered = hn::Sub(Signed(q), hn::Set(DI(), kHigh ? 16 : 8));
        sink(y + e, hn::Mul(ToFloat(centered), d));
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
template <typename Block, bool kHigh, class Sink>
HWY_INLINE void DequantK45(const uint8_t* src, Sink& sink, int64_t n) {
  int64_t y = 0;
  const DF df;
  const DU du;
  const int N = int(hn::Lanes(df));
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const auto* x = reinterpret_cast<const Block*>(src) + b;
    const float d = H2F(x->d), dmin = H2F(x->dmin);
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
        sink(y + 32 * sb + l, hn::Sub(hn::Mul(d1, ToFloat(Signed(v))), m1));
      }
    }
    y += kQK_K;
  }
}

template <class Sink>
HWY_INLINE void DequantQ6_K(const uint8_t* src, Sink& sink, int64_t n) {
  int64_t y = 0;
  const DF df;
  const DU du;
  const int N = int(hn::Lanes(df));
  const VU low4 = hn::Set(du, 0xF), two = hn::Set(du, 3);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const auto* x = reinterpret_cast<const BlockQ6_K*>(src) + b;
    const float d = H2F(x->d);
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
          sink(y + 32 * k + l, hn::Mul(ds, ToFloat(centered)));
        }
      }
      y += 128;
    }
  }
}

// Rows of F16/BF16 have a multiple of 32 elements here (checked by the caller).
template <class Sink>
HWY_INLINE void DequantHalf(const uint8_t* src, Sink& sink, int64_t n, bool bf16) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  const uint16_t* h = reinterpret_cast<const uint16_t*>(src);
  if (bf16) {
    const hn::Rebind<uint16_t, DF> d16;
    for (int64_t i = 0; i < n; i += N) {
      sink(i, hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(DU(), hn::LoadU(d16, h + i)))));
    }
  } else {
    const hn::Rebind<hwy::float16_t, DF> dh;
    for (int64_t i = 0; i < n; i += N) {
      sink(i, hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(h + i))));
    }
  }
}

template <class Sink>
HWY_INLINE bool Dispatch(uint32_t type, const uint8_t* src, Sink& sink, int64_t n) {
  // Chunks of N lanes must tile the 16-element half-blocks.
  if (16 % hn::Lanes(DF()) != 0) return false;
  switch (GgmlType(type)) {
    case GgmlType::kF16: if (n % 32) return false; DequantHalf(src, sink, n, false); return true;
    case GgmlType::kBF16: if (n % 32) return false; DequantHalf(src, sink, n, true); return true;
    case GgmlType::kQ8_0: DequantQ8_0(src, sink, n); return true;
    case GgmlType::kQ4_0: DequantLegacy<BlockQ4_0, false, false>(src, sink, n); return true;
    case GgmlType::kQ4_1: DequantLegacy<BlockQ4_1, false, true>(src, sink, n); return true;
    case GgmlType::kQ5_0: DequantLegacy<BlockQ5_0, true, false>(src, sink, n); return true;
    case GgmlType::kQ5_1: DequantLegacy<BlockQ5_1, true, true>(src, sink, n); return true;
    case GgmlType::kQ4_K: DequantK45<BlockQ4_K, false>(src, sink, n); return true;
    case GgmlType::kQ5_K: DequantK45<BlockQ5_K, true>(src, sink, n); return true;
    case GgmlType::kQ6_K: DequantQ6_K(src, sink, n); return true;
    default: return false;
  }
}

struct StoreSink {
  float* y;
  HWY_INLINE void operator()(int64_t off, VF v) { hn::StoreU(v, DF(), y + off); }
};

bool DequantRow(uint32_t type, const uint8_t* src, float* y, int64_t n) {
  StoreSink sink{y};
  return Dispatch(type, src, sink, n);
}

// Dot products of one weight row with kTok activation rows, fused with dequantization: nothing
// is written to memory. Two accumulators per token halve the FMA dependency chain: chunks
// alternate between them (even chunks into one, odd into the other). The alternation is a swap
// of two registers after each chunk, not an index: an accumulator picked by a runtime flag lives
// in memory, and each FMA then waits for the store of the one before (a third of the speed).
template <int kTok>
struct DotSink {
  const float* x;
  int64_t x_stride;
  VF acc[kTok];
  VF other[kTok];
  HWY_INLINE void operator()(int64_t off, VF v) {
    for (int t = 0; t < kTok; ++t) {
      const VF next = hn::MulAdd(v, hn::LoadU(DF(), x + t * x_stride + off), acc[t]);
      acc[t] = other[t];
      other[t] = next;
    }
  }
};

template <int kTok>
HWY_INLINE bool DotRowT(uint32_t type, const uint8_t* src, int64_t n, const float* x, int64_t x_stride, float* out,
                        int64_t out_stride) {
  DotSink<kTok> sink{x, x_stride, {}, {}};
  for (int t = 0; t < kTok; ++t) sink.acc[t] = sink.other[t] = hn::Zero(DF());
  if (!Dispatch(type, src, sink, n)) return false;
  // Which register holds the even chunks depends on their count; a sum of two is the same either way.
  for (int t = 0; t < kTok; ++t) out[t * out_stride] = hn::GetLane(hn::SumOfLanes(DF(), hn::Add(sink.acc[t], sink.other[t])));
  return true;
}

// F16/BF16 rows (n a multiple of 32) against kTok activation rows: one accumulator per token over
// the chunks in order, then the sum of its lanes, which is the arithmetic of prefill's
// Tile (matmul.cpp) on the same values, so that a token's product does not depend on how many
// tokens share the matmul. XT is float, or hwy::float16_t for activations held as fp16 (half the
// bytes of a row's partner; the conversion is exact). The row is read in one forward stream with
// nothing else in flight: a second stream, or software prefetches, measured slower.
template <int kTok, typename XT>
HWY_INLINE void DotHalfT(const uint8_t* src, int64_t n, bool bf16, const XT* x, int64_t x_stride, float* out,
                         int64_t out_stride) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  VF acc[kTok];
  for (int t = 0; t < kTok; ++t) acc[t] = hn::Zero(df);
  const hn::Rebind<uint16_t, DF> d16;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const uint16_t* h = reinterpret_cast<const uint16_t*>(src);
  auto act = [&](int t, int64_t i) HWY_ATTR {
    if constexpr (std::is_same_v<XT, float>) {
      return hn::LoadU(df, x + t * x_stride + i);
    } else {
      return hn::PromoteTo(df, hn::LoadU(dh, x + t * x_stride + i));
    }
  };
  if (bf16) {
    for (int64_t i = 0; i < n; i += N) {
      const VF w = hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(DU(), hn::LoadU(d16, h + i))));
      for (int t = 0; t < kTok; ++t) acc[t] = hn::MulAdd(w, act(t, i), acc[t]);
    }
  } else {
    for (int64_t i = 0; i < n; i += N) {
      const VF w = hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(h + i)));
      for (int t = 0; t < kTok; ++t) acc[t] = hn::MulAdd(w, act(t, i), acc[t]);
    }
  }
  for (int t = 0; t < kTok; ++t) out[t * out_stride] = hn::GetLane(hn::SumOfLanes(df, acc[t]));
}

template <int kTok>
HWY_INLINE bool DotRowAny(uint32_t type, const uint8_t* src, int64_t n, const float* x, int64_t x_stride, float* out,
                          int64_t out_stride) {
  const bool half = GgmlType(type) == GgmlType::kF16 || GgmlType(type) == GgmlType::kBF16;
  if (half && n % 32 == 0) {
    DotHalfT<kTok, float>(src, n, GgmlType(type) == GgmlType::kBF16, x, x_stride, out, out_stride);
    return true;
  }
  return DotRowT<kTok>(type, src, n, x, x_stride, out, out_stride);
}

// out[t * out_stride] = dot(row, x_t) for t < n_tok (1..4).
bool DotRow(uint32_t type, const uint8_t* src, int64_t n, const float* x, int64_t n_tok, float* out,
            int64_t out_stride) {
  switch (n_tok) {
    case 1: return DotRowAny<1>(type, src, n, x, n, out, out_stride);
    case 2: return DotRowAny<2>(type, src, n, x, n, out, out_stride);
    case 3: return DotRowAny<3>(type, src, n, x, n, out, out_stride);
    case 4: return DotRowAny<4>(type, src, n, x, n, out, out_stride);
    default: return false;
  }
}

// F16 rows against n_tok (1..4) activation rows held as fp16.
bool DotRowF16(const uint8_t* src, int64_t n, const uint16_t* xh, int64_t n_tok, float* out, int64_t out_stride) {
  if (n % 32 != 0) return false;
  const hwy::float16_t* x = reinterpret_cast<const hwy::float16_t*>(xh);
  switch (n_tok) {
    case 1: DotHalfT<1>(src, n, false, x, n, out, out_stride); return true;
    case 2: DotHalfT<2>(src, n, false, x, n, out, out_stride); return true;
    case 3: DotHalfT<3>(src, n, false, x, n, out, out_stride); return true;
    case 4: DotHalfT<4>(src, n, false, x, n, out, out_stride); return true;
    default: return false;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::engine
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq::engine {
HWY_EXPORT(DequantRow);
HWY_EXPORT(DotRow);
HWY_EXPORT(DotRowF16);

bool dot_row_f16(const uint8_t* src, int64_t n, const uint16_t* xh, int64_t n_tok, float* out, int64_t out_stride) {
  return HWY_DYNAMIC_DISPATCH(DotRowF16)(src, n, xh, n_tok, out, out_stride);
}

bool dot_row_supported(uint32_t type, int64_t n, int64_t n_tok) {
  if (n_tok < 1 || n_tok > 4 || !is_supported_weight_type(type) || GgmlType(type) == GgmlType::kF32) return false;
  const bool half = GgmlType(type) == GgmlType::kF16 || GgmlType(type) == GgmlType::kBF16;
  return !half || n % 32 == 0;
}

bool dot_row(uint32_t type, const uint8_t* src, int64_t n, const float* x, int64_t n_tok, float* out,
             int64_t out_stride) {
  return HWY_DYNAMIC_DISPATCH(DotRow)(type, src, n, x, n_tok, out, out_stride);
}

void dequantize_row(uint32_t type, const uint8_t* src, float* dst, int64_t n) {
  if (!HWY_DYNAMIC_DISPATCH(DequantRow)(type, src, dst, n)) dequantize_row_scalar(type, src, dst, n);
}
}  // namespace vq::engine
#endif
