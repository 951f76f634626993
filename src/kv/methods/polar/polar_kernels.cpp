// Highway version of PolarQuant's row decode (polar_kernels.h). Per level, a vector of parents'
// codes is gathered from the bit planes (one mask load per plane), the cos and sin tables are read
// with register lookups, and the children are stored interleaved (2i: r cos, 2i + 1: r sin).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/methods/polar/polar_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/kv/methods/polar/polar_kernels.h"

#include <algorithm>
#include <cstring>

#include "src/core/fp16.h"
#include "src/kv/kernels/lut_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace vq::kv::polar {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;
using VF = hn::Vec<DF>;
using VI = hn::Vec<DI>;

constexpr int kMaxDim = 4096;
constexpr int kSlack = 64;  // a partial vector's stores past a short level's last child

// table[idx] for idx < 16: one register lookup with 16 lanes, two and a blend with 8.
HWY_INLINE VF Lookup16(const float* table, VI idx) {
  const DF df;
  const DI di;
  if constexpr (hn::MaxLanes(DF()) >= 16) {
    return hn::TableLookupLanes(hn::LoadU(df, table), hn::IndicesFromVec(df, idx));
  } else {
    const auto low3 = hn::IndicesFromVec(df, hn::And(idx, hn::Set(di, 7)));
    const VF lo = hn::TableLookupLanes(hn::LoadU(df, table), low3);
    const VF hi = hn::TableLookupLanes(hn::LoadU(df, table + 8), low3);
    return hn::IfThenElse(hn::RebindMask(df, hn::Gt(idx, hn::Set(di, 7))), hi, lo);
  }
}

// The walk one angle at a time: angles over kTableBits bits, and vectors of fewer than 8 lanes (a
// mask load takes whole bytes).
void DecodeRowScalar(const uint8_t* row, int d, int levels, const int* bits, const size_t* offset, const float* cos,
                     const float* sin, size_t stride, float* x) {
  float r[kMaxDim], next[kMaxDim];
  for (int i = 0; i < (d >> levels); ++i) {
    uint16_t h;
    std::memcpy(&h, row + 2 * size_t(i), 2);
    r[i] = f16_to_f32(h);
  }
  for (int l = levels; l >= 1; --l) {
    const int n = d >> l;
    const float* cs = cos + stride * size_t(l - 1);
    const float* sn = sin + stride * size_t(l - 1);
    float* out = l == 1 ? x : next;
    for (int i = 0; i < n; ++i) {
      const int c = plane_code(row + offset[l], n, bits[l], i);
      out[2 * i] = r[i] * cs[c];
      out[2 * i + 1] = r[i] * sn[c];
    }
    if (l > 1) std::copy_n(next, 2 * n, r);
  }
}

void DecodeRow(const uint8_t* HWY_RESTRICT row, int d, int levels, const int* bits, const size_t* offset,
               const float* cos, const float* sin, size_t stride, bool tables, float* HWY_RESTRICT x) {
  const DF df;
  const DI di;
  constexpr int N = int(hn::MaxLanes(DF()));
  if (N < 8 || !tables) {
    DecodeRowScalar(row, d, levels, bits, offset, cos, sin, stride, x);
  } else {
    alignas(64) float a[kMaxDim + kSlack], b[kMaxDim + kSlack];
    float* r = a;
    float* next = b;
    for (int i = 0; i < (d >> levels); ++i) {
      uint16_t h;
      std::memcpy(&h, row + 2 * size_t(i), 2);
      r[i] = f16_to_f32(h);
    }
    for (int l = levels; l >= 1; --l) {
      const int n = d >> l, nb = bits[l];
      const size_t pb = plane_bytes(n);
      const uint8_t* planes = row + offset[l];
      // A level shorter than a vector reads its planes from a padded copy: the mask loads take
      // N / 8 bytes, past the end of the row at the last level.
      alignas(8) uint8_t padded[kTableBits][8] = {};
      if (n < N) {
        for (int j = 0; j < nb; ++j) std::memcpy(padded[j], planes + size_t(j) * pb, pb);
      }
      // The level's outputs: x at level 1 unless a partial vector would store past its end.
      float* out = (l == 1 && n >= N) ? x : next;
      for (int i0 = 0; i0 < n; i0 += N) {
        VI idx = hn::Zero(di);
        for (int j = 0; j < nb; ++j) {
          const uint8_t* bytes = n < N ? padded[j] : planes + size_t(j) * pb + size_t(i0 / 8);
          idx = hn::Or(idx, hn::IfThenElseZero(hn::RebindMask(di, hn::LoadMaskBits(df, bytes)), hn::Set(di, 1 << j)));
        }
        const VF p = hn::LoadU(df, r + i0);
        const VF c = Lookup16(cos + stride * size_t(l - 1), idx), s = Lookup16(sin + stride * size_t(l - 1), idx);
        hn::StoreInterleaved2(hn::Mul(p, c), hn::Mul(p, s), df, out + 2 * i0);
      }
      if (l == 1 && out != x) std::copy_n(out, d, x);
      std::swap(r, next);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv::polar
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq::kv::polar {
HWY_EXPORT(DecodeRow);

void decode_row(const uint8_t* row, int d, int levels, const int* bits, const size_t* offset, const float* cos,
                const float* sin, size_t stride, bool tables, float* x) {
  HWY_DYNAMIC_DISPATCH(DecodeRow)(row, d, levels, bits, offset, cos, sin, stride, tables, x);
}
}  // namespace vq::kv::polar
#endif
