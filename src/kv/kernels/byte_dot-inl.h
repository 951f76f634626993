// Exact dot products of unsigned and signed bytes, four per 32-bit lane:
//   DotBytes(acc, u, s)[i] = acc[i] + sum over k < 4 of u.byte[4i+k] * s.byte[4i+k]
// with u read as unsigned and s as signed bytes. One VNNI instruction (vpdpbusd) where the CPU
// has it (files that call DotBytes include byte_dot_target.h inside their own
// HWY_BEFORE_NAMESPACE / HWY_AFTER_NAMESPACE, as this file does), two multiply-adds and an add on
// AVX2/AVX-512 without it, shifts and 32-bit multiplies elsewhere. Every form is exact integer
// arithmetic (the 16-bit pair sums of the AVX2 form could saturate only for u above 127, which
// the callers never pass: their u bytes are codes below 16), so all targets give the same result.
#if defined(VQ_KV_BYTE_DOT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef VQ_KV_BYTE_DOT_INL_H_
#undef VQ_KV_BYTE_DOT_INL_H_
#else
#define VQ_KV_BYTE_DOT_INL_H_
#endif

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
#include "src/kv/kernels/byte_dot_target.h"  // IWYU pragma: keep
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

// Short pair sums. AVX2 and AVX-512 without VNNI multiply bytes into 16-bit pair sums and need a
// second multiply (vpmaddwd) to widen them to 32 bits; that widening is half of DotBytes' work on
// the multiply ports. DotBytesShortWord adds the pair sums in 16 bits instead, and
// WidenShortSums turns them into DotBytes' 32-bit lane sums once for several products. The
// caller keeps every 16-bit sum below 2^15 in magnitude: with u below 16 and s a signed byte a
// pair sum is at most 2 * 15 * 128 = 3840, so eight products may share one widening. Where bytes
// multiply straight into 32 bits (VNNI) or DotBytes is emulated, the short sums are DotBytes'
// sums and widening is the identity. Either way the result is exact and the same on all targets.
constexpr bool kShortPairSums = HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3;
constexpr int kMaxShortProducts = 8;  // 8 * 3840 < 2^15

// The empty asm ends each addition's chain for the compiler: GCC would otherwise reassociate the
// 16-bit additions (integer addition is associative) into trees whose products are all computed
// first and live at once, spilling the sums out of AVX2's 16 registers. It emits no code.
template <class DI>
HWY_INLINE hn::Vec<DI> DotBytesShortWord(DI di, hn::Vec<DI> acc, hn::Vec<DI> u, const int32_t* s32) {
#if HWY_TARGET == HWY_AVX3
  (void)di;
  __m512i sum = _mm512_add_epi16(acc.raw, _mm512_maddubs_epi16(u.raw, _mm512_set1_epi32(*s32)));
  __asm__("" : "+v"(sum));
  return hn::Vec<DI>{sum};
#elif HWY_TARGET == HWY_AVX2
  (void)di;
  __m256i sum = _mm256_add_epi16(acc.raw, _mm256_maddubs_epi16(u.raw, _mm256_set1_epi32(*s32)));
  __asm__("" : "+v"(sum));
  return hn::Vec<DI>{sum};
#else
  return DotBytesWord(di, acc, u, s32);
#endif
}

template <class DI>
HWY_INLINE hn::Vec<DI> WidenShortSums(DI di, hn::Vec<DI> acc) {
#if HWY_TARGET == HWY_AVX3
  (void)di;
  return hn::Vec<DI>{_mm512_madd_epi16(acc.raw, _mm512_set1_epi16(1))};
#elif HWY_TARGET == HWY_AVX2
  (void)di;
  return hn::Vec<DI>{_mm256_madd_epi16(acc.raw, _mm256_set1_epi16(1))};
#else
  (void)di;
  return acc;
#endif
}

// round(x) to the nearest integer, ties to even, for |x| well inside the int32 range, as the
// kernels that hold an operand in 16-bit fixed point need it (|x| <= 32512 there): the bare
// conversion on x86 (Highway's NearestInt adds a fix-up for out-of-range lanes, which cannot
// occur here), NearestInt elsewhere. Same results on every target.
template <class V>
HWY_INLINE auto RoundToInt(V x) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  if constexpr (sizeof(x.raw) == 64) return hn::Vec<hn::RebindToSigned<hn::DFromV<V>>>{_mm512_cvtps_epi32(x.raw)};
#endif
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2
  if constexpr (sizeof(x.raw) == 32) return hn::Vec<hn::RebindToSigned<hn::DFromV<V>>>{_mm256_cvtps_epi32(x.raw)};
#endif
  return hn::NearestInt(x);
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#endif  // VQ_KV_BYTE_DOT_INL_H_
