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

template <class Fmt>
struct GroupLoaderBase {
  using Scale = hn::Vec<hn::ScalableTag<float>>;
  static const uint8_t* Group(const uint8_t* tok, int g) {
    return tok + size_t(g) * Fmt::group_bytes(kQuantGroup);
  }
  // The group's fp16 scale broadcast to all lanes, converted by the hardware where it can.
  template <class DF>
  static HWY_INLINE hn::Vec<DF> LoadScale(DF df, const uint8_t* HWY_RESTRICT tok, int g) {
    const hn::CappedTag<float, 1> d1;
    const hn::Rebind<hwy::float16_t, decltype(d1)> dh1;
    const auto s = hn::PromoteTo(d1, hn::LoadU(dh1, reinterpret_cast<const hwy::float16_t*>(Group(tok, g))));
    return hn::Set(df, hn::GetLane(s));
  }
  static float Value(const uint8_t* tok, int d, int j) {
    const int g = j / kQuantGroup;
    return Fmt::value(Group(tok, g), std::min(kQuantGroup, d - g * kQuantGroup), j % kQuantGroup);
  }
};

struct Q8Loader : GroupLoaderBase<Q8Format> {
  template <class DF>
  static HWY_INLINE hn::Vec<DF> Load(DF df, const uint8_t* HWY_RESTRICT tok, int g, int first,
                                     hn::Vec<DF> vs) {
    const hn::RebindToSigned<DF> di32;
    const hn::Rebind<int8_t, DF> di8;
    const int8_t* codes = reinterpret_cast<const int8_t*>(Group(tok, g) + 2) + first;
    return hn::Mul(vs, hn::ConvertTo(df, hn::PromoteTo(di32, hn::LoadU(di8, codes))));
  }
};

struct Q4Loader : GroupLoaderBase<Q4Format> {
  // Channel j < 16 is the low nibble of byte j, channel j >= 16 the high nibble of byte j - 16.
  template <class DF>
  static HWY_INLINE hn::Vec<DF> Load(DF df, const uint8_t* HWY_RESTRICT tok, int g, int first,
                                     hn::Vec<DF> vs) {
    const hn::RebindToSigned<DF> di32;
    const hn::RebindToUnsigned<DF> du32;
    const hn::Rebind<uint8_t, DF> du8;
    const auto x = hn::LoadU(du8, Group(tok, g) + 2 + (first & 15));
    const auto c = first < 16 ? hn::And(x, hn::Set(du8, 15)) : hn::ShiftRight<4>(x);
    const auto ci = hn::Sub(hn::BitCast(di32, hn::PromoteTo(du32, c)), hn::Set(di32, 8));
    return hn::Mul(hn::ConvertTo(df, ci), vs);
  }
};

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#endif  // VQ_KV_GROUP_KERNELS_INL_H_
