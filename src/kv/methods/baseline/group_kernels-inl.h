// Token loaders for the per-token grouped format (q8) of group_formats.h, plugged into the
// shared fused kernels. Included per Highway target.
#if defined(VQ_KV_GROUP_KERNELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef VQ_KV_GROUP_KERNELS_INL_H_
#undef VQ_KV_GROUP_KERNELS_INL_H_
#else
#define VQ_KV_GROUP_KERNELS_INL_H_
#endif

#include <algorithm>

#include "hwy/highway.h"
#include "src/kv/kernels/fused_kernels-inl.h"
#include "src/kv/methods/baseline/group_formats.h"

HWY_BEFORE_NAMESPACE();
namespace vq::kv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// A token's group scales as floats, converted with vector instructions; kernels broadcast them
// from here (a load, not an ALU operation).
struct GroupScales {
  alignas(64) float s[kMaxQuantGroups];
};

template <class DF>
HWY_INLINE void LoadGroupScales(DF, const uint8_t* HWY_RESTRICT tok, int d, GroupScales* HWY_RESTRICT out) {
  // Four at a time: a 128-channel token has exactly four groups, so one conversion covers it.
  const hn::CappedTag<float, 4> d4;
  const hn::Rebind<hwy::float16_t, decltype(d4)> dh4;
  const hwy::float16_t* h = reinterpret_cast<const hwy::float16_t*>(tok);
  const int G = n_groups(d);
  const int n4 = int(hn::Lanes(d4));
  int g = 0;
  for (; g + n4 <= G; g += n4) {
    const auto v = hn::PromoteTo(d4, hn::LoadU(dh4, h + g));
    hn::StoreU(v, d4, out->s + g);
  }
  const hn::CappedTag<float, 1> d1;
  const hn::Rebind<hwy::float16_t, decltype(d1)> dh1;
  for (; g < G; ++g) {
    out->s[g] = hn::GetLane(hn::PromoteTo(d1, hn::LoadU(dh1, h + g)));
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

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#endif  // VQ_KV_GROUP_KERNELS_INL_H_
