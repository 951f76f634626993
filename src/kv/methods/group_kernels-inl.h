// Token loaders for the per-token grouped formats (q8, q4) of group_formats.h, plugged into the
// shared fused kernels. Included per Highway target.
#if defined(VQ_KV_GROUP_KERNELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef VQ_KV_GROUP_KERNELS_INL_H_
#undef VQ_KV_GROUP_KERNELS_INL_H_
#else
#define VQ_KV_GROUP_KERNELS_INL_H_
#endif

#include <algorithm>

#include "hwy/highway.h"
#include "src/kv/fused_kernels-inl.h"
#include "src/kv/methods/group_formats.h"

HWY_BEFORE_NAMESPACE();
namespace vq::kv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// A token's group scales as floats, and -8 times them (for q4), converted with vector
// instructions; kernels broadcast them from here (a load, not an ALU operation).
struct GroupScales {
  alignas(64) float s[kMaxQuantGroups];
  alignas(64) float m8[kMaxQuantGroups];
};

template <class DF>
HWY_INLINE void LoadGroupScales(DF, const uint8_t* HWY_RESTRICT tok, int d, GroupScales* HWY_RESTRICT out) {
  // Four at a time: a 128-channel token has exactly four groups, so one conversion covers it.
  const hn::CappedTag<float, 4> d4;
  const hn::Rebind<hwy::float16_t, decltype(d4)> dh4;
  const hwy::float16_t* h = reinterpret_cast<const hwy::float16_t*>(tok);
  const int G = n_groups(d);
  const int n4 = int(hn::Lanes(d4));
  const auto m8 = hn::Set(d4, -8.0f);
  int g = 0;
  for (; g + n4 <= G; g += n4) {
    const auto v = hn::PromoteTo(d4, hn::LoadU(dh4, h + g));
    hn::StoreU(v, d4, out->s + g);
    hn::StoreU(hn::Mul(v, m8), d4, out->m8 + g);
  }
  const hn::CappedTag<float, 1> d1;
  const hn::Rebind<hwy::float16_t, decltype(d1)> dh1;
  for (; g < G; ++g) {
    out->s[g] = hn::GetLane(hn::PromoteTo(d1, hn::LoadU(dh1, h + g)));
    out->m8[g] = out->s[g] * -8.0f;
  }
}

template <class Fmt>
struct GroupLoaderBase {
  using Scales = GroupScales;
  template <class DF>
  static HWY_INLINE void LoadScales(DF df, const uint8_t* HWY_RESTRICT tok, int d, Scales* out) {
    LoadGroupScales(df, tok, d, out);
  }
  static float Value(const uint8_t* tok, int d, int j) { return token_value<Fmt>(tok, d, j); }
};

struct Q8Loader : GroupLoaderBase<Q8Format> {
  template <class DF>
  static HWY_INLINE hn::Vec<DF> Load(DF df, const uint8_t* HWY_RESTRICT tok, int d, int g, int first,
                                     const Scales& sc) {
    const hn::RebindToSigned<DF> di32;
    const hn::Rebind<int8_t, DF> di8;
    const int8_t* codes = reinterpret_cast<const int8_t*>(group_codes<Q8Format>(tok, d, g)) + first;
    return hn::Mul(hn::Set(df, sc.s[g]), hn::ConvertTo(df, hn::PromoteTo(di32, hn::LoadU(di8, codes))));
  }
};

struct Q4Loader : GroupLoaderBase<Q4Format> {
  // value = code * scale - 8 * scale as one fused multiply-add. Exact: (code - 8) * scale needs
  // at most 4 + 11 significant bits, so the fused result is the decoded value itself.
  // Channel j < 16 is the low nibble of byte j, channel j >= 16 the high nibble of byte j - 16.
  template <class DF>
  static HWY_INLINE hn::Vec<DF> Load(DF df, const uint8_t* HWY_RESTRICT tok, int d, int g, int first,
                                     const Scales& sc) {
    const hn::RebindToSigned<DF> di32;
    const hn::RebindToUnsigned<DF> du32;
    const hn::Rebind<uint8_t, DF> du8;
    const auto x = hn::LoadU(du8, group_codes<Q4Format>(tok, d, g) + (first & 15));
    const auto c = first < 16 ? hn::And(x, hn::Set(du8, 15)) : hn::ShiftRight<4>(x);
    const auto cf = hn::ConvertTo(df, hn::BitCast(di32, hn::PromoteTo(du32, c)));
    return hn::MulAdd(cf, hn::Set(df, sc.s[g]), hn::Set(df, sc.m8[g]));
  }
};

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#endif  // VQ_KV_GROUP_KERNELS_INL_H_
