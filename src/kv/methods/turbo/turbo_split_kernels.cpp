// turbo_split_kernels.h, compiled per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/methods/turbo/turbo_split_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include <cstring>

#include "hwy/highway.h"
#include "src/kv/methods/turbo/turbo_split_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace vq::kv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// The mask bits of channels c .. c + 15.
HWY_INLINE __mmask16 MaskBits16(const uint8_t* mask, int c) {
  uint16_t m;
  std::memcpy(&m, mask + c / 8, 2);
  return __mmask16(m);
}
#endif

// Exactly n of the d bits set, none past d.
bool Intact(const uint8_t* HWY_RESTRICT mask, int d, int n) {
  int marked = 0;
  for (int i = 0; i < (d + 7) / 8; ++i) marked += __builtin_popcount(unsigned(mask[i]));
  return marked == n && (d % 8 == 0 || (mask[d / 8] >> (d % 8)) == 0);
}

bool GatherParts(const float* HWY_RESTRICT x, size_t x_stride, int rows, const uint8_t* HWY_RESTRICT mask, int d, int n,
                 float* HWY_RESTRICT hi, float* HWY_RESTRICT lo) {
  if (!Intact(mask, d, n)) return false;
  const int rest = d - n;
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + size_t(r) * x_stride;
    float* h = hi + size_t(r) * n;
    float* l = lo + size_t(r) * rest;
    int c = 0;
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
    // The register forms: compress to memory is microcoded and slow on some CPUs (Zen 4).
    for (; c + 16 <= d; c += 16) {
      const __mmask16 m = MaskBits16(mask, c);
      const __m512 v = _mm512_loadu_ps(xr + c);
      _mm512_storeu_ps(h, _mm512_maskz_compress_ps(m, v));
      _mm512_storeu_ps(l, _mm512_maskz_compress_ps(__mmask16(~m), v));
      const int k = __builtin_popcount(unsigned(m));
      h += k;
      l += 16 - k;
    }
#endif
    // Both rows written at every channel, the pointer of the channel's side moving on: no
    // branch on the mask's bits (as good as random: mispredicted half the time).
    for (; c < d; ++c) {
      const int bit = (mask[c / 8] >> (c % 8)) & 1;
      *h = xr[c];
      *l = xr[c];
      h += bit;
      l += 1 - bit;
    }
  }
  return true;
}

bool ScatterAddParts(const float* HWY_RESTRICT hi, const float* HWY_RESTRICT lo, int rows,
                     const uint8_t* HWY_RESTRICT mask, int d, int n, float* HWY_RESTRICT acc, size_t acc_stride) {
  if (!Intact(mask, d, n)) return false;
  const int rest = d - n;
  for (int r = 0; r < rows; ++r) {
    const float* h = hi + size_t(r) * n;
    const float* l = lo + size_t(r) * rest;
    float* a = acc + size_t(r) * acc_stride;
    int c = 0;
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
    for (; c + 16 <= d; c += 16) {
      const __mmask16 m = MaskBits16(mask, c);
      // lo's values in the unmarked lanes, then hi's in the marked ones: each lane one value.
      const __m512 v = _mm512_mask_expand_ps(_mm512_maskz_expand_ps(__mmask16(~m), _mm512_loadu_ps(l)), m,
                                             _mm512_loadu_ps(h));
      _mm512_storeu_ps(a + c, _mm512_add_ps(_mm512_loadu_ps(a + c), v));
      const int k = __builtin_popcount(unsigned(m));
      h += k;
      l += 16 - k;
    }
#endif
    for (; c < d; ++c) {
      const int bit = (mask[c / 8] >> (c % 8)) & 1;
      a[c] += bit ? *h : *l;
      h += bit;
      l += 1 - bit;
    }
  }
  return true;
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq::kv::turbo_split {
HWY_EXPORT(GatherParts);
HWY_EXPORT(ScatterAddParts);

bool gather_parts(const float* x, size_t x_stride, int rows, const uint8_t* mask, int d, int n, float* hi, float* lo) {
  return HWY_DYNAMIC_DISPATCH(GatherParts)(x, x_stride, rows, mask, d, n, hi, lo);
}

bool scatter_add_parts(const float* hi, const float* lo, int rows, const uint8_t* mask, int d, int n, float* acc,
                       size_t acc_stride) {
  return HWY_DYNAMIC_DISPATCH(ScatterAddParts)(hi, lo, rows, mask, d, n, acc, acc_stride);
}

}  // namespace vq::kv::turbo_split
#endif
