// Exact dot products of unsigned and signed bytes, four per 32-bit lane:
//   DotBytes(acc, u, s)[i] = acc[i] + sum over k < 4 of u.byte[4i+k] * s.byte[4i+k]
// with u read as unsigned and s as signed bytes. One VNNI instruction (vpdpbusd) where the CPU
// inside its own HWY_BEFORE_NAMESPACE / HWY_AFTER_NAMESPACE, as this file does), two multiply-adds and an add on AVX2/AVX-512 without it, shifts and 32-bit multiplies
// elsewhere. Every form is exact integer arithmetic (the 16-bit pair sums of the AVX2 form are
// at most 2 * 255 * 128 in magnitude only when u exceeds 127, which the callers never pass: their
// u bytes are codes below 16), so all targets give the same result.
#if defined(VQ_KV_BYTE_DOT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef VQ_KV_BYTE_DOT_INL_H_
#undef VQ_KV_BYTE_DOT_INL_H_
#else
#define VQ_KV_BYTE_DOT_INL_H_
#endif

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
#include "src/kv/byte_dot_target.h"  // IWYU pragma: keep
namespace vq::kv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class DI>
HWY_INLINE hn::Vec<DI> DotBytes(DI di, hn::Vec<DI> acc, hn::Vec<DI> u, hn::Vec<DI> s) {
#if HWY_TARGET == HWY_AVX3_DL && !HWY_COMPILER_CLANG
  (void)di;
  return hn::Vec<DI>{_mm512_dpbusd_epi32(acc.raw, u.raw, s.raw)};
#elif HWY_TARGET == HWY_AVX3_DL
  // clang keeps the first target attribute of a function, so byte_dot_target.h cannot add
  // avx512vnni there; the instruction is written out (the sanitizer builds use clang).
  (void)di;
  __m512i r = acc.raw;
  __asm__("vpdpbusd %[s], %[u], %[r]" : [r] "+v"(r) : [u] "v"(u.raw), [s] "v"(s.raw));
  return hn::Vec<DI>{r};
#elif HWY_TARGET == HWY_AVX3
  (void)di;
  const __m512i pairs = _mm512_maddubs_epi16(u.raw, s.raw);
  return hn::Vec<DI>{_mm512_add_epi32(acc.raw, _mm512_madd_epi16(pairs, _mm512_set1_epi16(1)))};
#elif HWY_TARGET == HWY_AVX2
  (void)di;
  const __m256i pairs = _mm256_maddubs_epi16(u.raw, s.raw);
  return hn::Vec<DI>{_mm256_add_epi32(acc.raw, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))};
#else
  const auto mask = hn::Set(di, 0xFF);
  for (int k = 0; k < 4; ++k) {
    const auto uk = hn::And(hn::ShiftRightSame(u, 8 * k), mask);
    const auto sk = hn::ShiftRightSame(hn::ShiftLeftSame(s, 24 - 8 * k), 24);  // sign-extended
    acc = hn::Add(acc, hn::Mul(uk, sk));
  }
  return acc;
#endif
}

// DotBytes(acc, u, Set(*s32)): the signed bytes are the four of one 32-bit word in memory, given
// to every lane. On AVX3_DL the word is an embedded broadcast operand of vpdpbusd, so it takes
// no register (the kernels keep many accumulators live; GCC does not fold the broadcast itself).
template <class DI>
HWY_INLINE hn::Vec<DI> DotBytesWord(DI di, hn::Vec<DI> acc, hn::Vec<DI> u, const int32_t* s32) {
#if HWY_TARGET == HWY_AVX3_DL
  (void)di;
  __m512i r = acc.raw;
  __asm__("vpdpbusd %[s]%{1to16%}, %[u], %[r]" : [r] "+v"(r) : [u] "v"(u.raw), [s] "m"(*s32));
  return hn::Vec<DI>{r};
#else
  return DotBytes(di, acc, u, hn::Set(di, *s32));
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#endif  // VQ_KV_BYTE_DOT_INL_H_
