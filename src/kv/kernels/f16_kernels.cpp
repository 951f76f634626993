// 16-bit float attention kernels: the shared fused kernels over a loader that widens fp16 or
// bf16 rows to float.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/kernels/f16_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/core/fp16.h"
#include "src/kv/kernels/f16_kernels.h"
#include "src/kv/kernels/fused_kernels-inl.h"

HWY_BEFORE_NAMESPACE();
namespace vq::kv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <bool kBF16>
struct HalfLoader {
  struct Scales {};
  template <class DF>
  static HWY_INLINE void LoadScales(DF, const uint8_t*, int, Scales*) {}
  template <class DF>
  static HWY_INLINE hn::Vec<DF> Load(DF df, const uint8_t* HWY_RESTRICT tok, int, int g, int first, Scales) {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(tok) + g * kFusedGroup + first;
    if constexpr (kBF16) {
      const hn::RebindToUnsigned<DF> du32;
      const hn::Rebind<uint16_t, DF> du16;
      return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du32, hn::LoadU(du16, p))));
    } else {
      const hn::Rebind<hwy::float16_t, DF> dh;
      return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
    }
  }
  static float Value(const uint8_t* tok, int, int j) {
    const uint16_t h = reinterpret_cast<const uint16_t*>(tok)[j];
    return kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
  }
};

struct FloatLoader {
  struct Scales {};
  template <class DF>
  static HWY_INLINE void LoadScales(DF, const uint8_t*, int, Scales*) {}
  template <class DF>
  static HWY_INLINE hn::Vec<DF> Load(DF df, const uint8_t* HWY_RESTRICT tok, int, int g, int first, Scales) {
    return hn::LoadU(df, reinterpret_cast<const float*>(tok) + g * kFusedGroup + first);
  }
  static float Value(const uint8_t* tok, int, int j) { return reinterpret_cast<const float*>(tok)[j]; }
};

void FloatScores(const float* q, int n_q, size_t q_stride, const float* x, size_t x_stride, int64_t n, int d,
                 float* out, size_t out_stride) {
  FusedScores<FloatLoader>(q, n_q, q_stride, reinterpret_cast<const uint8_t*>(x), x_stride * 4, n, d, out, out_stride);
}

void FloatAccumulate(const float* w, size_t w_stride, int n_q, const float* x, size_t x_stride, int64_t n, int d,
                     float* acc, size_t acc_stride) {
  FusedAccumulate<FloatLoader>(w, w_stride, n_q, reinterpret_cast<const uint8_t*>(x), x_stride * 4, n, d, acc,
                               acc_stride);
}

void HalfScores(bool bf16, const float* q, int n_q, size_t q_stride, const uint16_t* x,
                size_t x_stride, int64_t n, int d, float* out, size_t out_stride) {
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(x);
  if (bf16) {
    FusedScores<HalfLoader<true>>(q, n_q, q_stride, bytes, x_stride * 2, n, d, out, out_stride);
  } else {
    FusedScores<HalfLoader<false>>(q, n_q, q_stride, bytes, x_stride * 2, n, d, out, out_stride);
  }
}

void HalfAccumulate(bool bf16, const float* w, size_t w_stride, int n_q, const uint16_t* x,
                    size_t x_stride, int64_t n, int d, float* acc, size_t acc_stride) {
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(x);
  if (bf16) {
    FusedAccumulate<HalfLoader<true>>(w, w_stride, n_q, bytes, x_stride * 2, n, d, acc, acc_stride);
  } else {
    FusedAccumulate<HalfLoader<false>>(w, w_stride, n_q, bytes, x_stride * 2, n, d, acc, acc_stride);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();
#if HWY_ONCE
namespace vq::kv {
HWY_EXPORT(HalfScores);
HWY_EXPORT(HalfAccumulate);
HWY_EXPORT(FloatScores);
HWY_EXPORT(FloatAccumulate);

void float_scores(const float* q, int n_q, size_t q_stride, const float* x, size_t x_stride, int64_t n, int d,
                  float* out, size_t out_stride) {
  HWY_DYNAMIC_DISPATCH(FloatScores)(q, n_q, q_stride, x, x_stride, n, d, out, out_stride);
}
void float_accumulate(const float* w, size_t w_stride, int n_q, const float* x, size_t x_stride, int64_t n, int d,
                      float* acc, size_t acc_stride) {
  HWY_DYNAMIC_DISPATCH(FloatAccumulate)(w, w_stride, n_q, x, x_stride, n, d, acc, acc_stride);
}

void half_scores(HalfKind kind, const float* q, int n_q, size_t q_stride, const uint16_t* x,
                 size_t x_stride, int64_t n, int d, float* out, size_t out_stride) {
  HWY_DYNAMIC_DISPATCH(HalfScores)(kind == HalfKind::kBF16, q, n_q, q_stride, x, x_stride, n, d, out, out_stride);
}

void half_accumulate(HalfKind kind, const float* w, size_t w_stride, int n_q, const uint16_t* x,
                     size_t x_stride, int64_t n, int d, float* acc, size_t acc_stride) {
  HWY_DYNAMIC_DISPATCH(HalfAccumulate)(kind == HalfKind::kBF16, w, w_stride, n_q, x, x_stride, n, d, acc, acc_stride);
}
}  // namespace vq::kv
#endif
