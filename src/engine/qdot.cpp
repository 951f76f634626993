// Vector kernels of the integer dot products (qdot.h) for x86: 256-bit byte multiply-adds on
// AVX2, AVX-512 and AVX-512 VNNI, with up to eight tokens (the K-quants four on AVX2) per pass
// over a weight row so that the weights are unpacked once for all of them. Each kernel
// forms exactly the eight lane sums and float operations that qdot_reference.cpp spells out; other targets run that reference.
//
// 256-bit vectors on the AVX-512 targets too: the blocks are 32 bytes wide, and Zen 4 executes
// 512-bit integer operations as two 256-bit halves anyway.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL  // vpdpwssd / vpdpbusd where the CPU has them
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/engine/qdot.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include <algorithm>
#include <cstring>

#include "hwy/highway.h"
#include "src/core/fp16.h"
#include "src/engine/gguf.h"
#include "src/engine/qdot.h"
#include "src/engine/quants.h"

HWY_BEFORE_NAMESPACE();
namespace vq::engine {
namespace HWY_NAMESPACE {

#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL

using I = __m256i;

// acc + (p[2l] * s[2l] + p[2l+1] * s[2l+1]) per 32-bit lane l, for 16-bit p and s. The VNNI form
// is written out with an EVEX prefix: Highway's AVX3_DL target also enables AVX-VNNI, whose VEX
// encoding of the same instruction Zen 4 and Ice Lake do not have.
HWY_INLINE I AddPairProducts(I acc, I p, I s) {
#if HWY_TARGET == HWY_AVX3_DL
  __asm__("%{evex%} vpdpwssd %[s], %[p], %[r]" : [r] "+v"(acc) : [p] "v"(p), [s] "v"(s));
  return acc;
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p, s));
#endif
}

// acc + sum over k < 4 of u.byte[4l+k] * s.byte[4l+k] per lane l (u unsigned, s signed; without
// VNNI the 16-bit pair sums must not saturate, which holds for |u| <= 128 and |s| <= 127).
HWY_INLINE I AddByteProducts(I acc, I u, I s) {
#if HWY_TARGET == HWY_AVX3_DL
  __asm__("%{evex%} vpdpbusd %[s], %[u], %[r]" : [r] "+v"(acc) : [u] "v"(u), [s] "v"(s));
  return acc;
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

HWY_INLINE I Load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// The reference's fixed order: ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)).
HWY_INLINE float Total(__m256 acc) {
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  const __m128 h2 = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(h2, _mm_movehdup_ps(h2)));
}

// acc + float(isum) * scale, one rounding (the reference's fma).
HWY_INLINE __m256 AddScaled(__m256 acc, I isum, float scale) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(scale), acc);
}
HWY_INLINE __m256 AddScaled(__m256 acc, I isum, __m256 scale) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), scale, acc);
}
HWY_INLINE __m256 SubScaled(__m256 acc, I isum, float scale) {
  return _mm256_fnmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(scale), acc);
}

// Decode streams each weight row from memory once: ask for the bytes a fixed distance ahead of
// the block in hand (past the row's end this is the next row, which the caller reads next).
constexpr int kPrefetchBytes = 3072;  // best of 0, 512 to 6144 on the 8B-shape file (Zen 4)
template <typename Block>
HWY_INLINE void Prefetch(const Block* p) {
  const char* a = reinterpret_cast<const char*>(p) + kPrefetchBytes;
  for (size_t o = 0; o < sizeof(Block); o += 64) _mm_prefetch(a + o, _MM_HINT_T0);
}

HWY_INLINE float H2F(uint16_t h) { return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h))); }

// The byte shuffle that puts byte j of each 64-bit word, zero-extended, into every 16-bit lane.
HWY_INLINE I ByteToWords(int j) {
  const int64_t w = int64_t(0x8000800080008000ull | uint64_t(j) * 0x0001000100010001ull);
  return _mm256_set1_epi64x(w);
}

// Q4_K (kHigh false) and Q5_K against kTok Q8_K activation rows.
template <typename Block, bool kHigh, int kTok>
void DotK45(const Block* w, int64_t nb, const BlockQ8_KAct* const* y, float* out, int64_t out_stride) {
  const I low4 = _mm256_set1_epi8(0x0F);
  __m256 acc[kTok];
  for (int t = 0; t < kTok; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if constexpr (kTok <= 2) Prefetch(w + b);
    // The 6-bit scales and mins as four 32-bit words of bytes (ggml's get_scale_min_k4).
    uint32_t a[3];
    std::memcpy(a, w[b].scales, 12);
    const uint32_t sc_lo = a[0] & 0x3f3f3f3f, m_lo = a[1] & 0x3f3f3f3f;
    const uint32_t sc_hi = (a[2] & 0x0f0f0f0f) | (((a[0] >> 6) & 0x03030303) << 4);
    const uint32_t m_hi = ((a[2] >> 4) & 0x0f0f0f0f) | (((a[1] >> 6) & 0x03030303) << 4);
    // The eight scales as bytes in every 64-bit word; a shuffle by ByteToWords(j) spreads scale j
    // to all 16-bit lanes (a scalar extract and broadcast per scale cost twice the work).
    const I sc8 = _mm256_set1_epi64x(int64_t(uint64_t(sc_lo) | uint64_t(sc_hi) << 32));
    const __m128i m8 = _mm_cvtsi64_si128(int64_t(uint64_t(m_lo) | uint64_t(m_hi) << 32));
    const I mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));  // m_l at 16-bit lanes 2l, 2l+1
    // Two sums per token (low and high nibbles) halve the chain of dependent multiply-adds; the
    // integer result is the same.
    I isum[kTok], isum_hi[kTok];
    for (int t = 0; t < kTok; ++t) isum[t] = isum_hi[t] = _mm256_setzero_si256();
    I hbits = _mm256_setzero_si256();
    if constexpr (kHigh) hbits = Load(w[b].qh);
    for (int k = 0; k < 4; ++k) {
      const I q = Load(w[b].qs + 32 * k);
      I lo = _mm256_and_si256(q, low4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
      if constexpr (kHigh) {
        const I one = _mm256_set1_epi8(1);
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(hbits, one), 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 1), one), 4));
        hbits = _mm256_srli_epi16(hbits, 2);
      }
      const I s_lo = _mm256_shuffle_epi8(sc8, ByteToWords(2 * k)), s_hi = _mm256_shuffle_epi8(sc8, ByteToWords(2 * k + 1));
      for (int t = 0; t < kTok; ++t) {
        isum[t] = AddPairProducts(isum[t], _mm256_maddubs_epi16(lo, Load(y[t][b].qs + 64 * k)), s_lo);
        isum_hi[t] = AddPairProducts(isum_hi[t], _mm256_maddubs_epi16(hi, Load(y[t][b].qs + 64 * k + 32)), s_hi);
      }
    }
    for (int t = 0; t < kTok; ++t) isum[t] = _mm256_add_epi32(isum[t], isum_hi[t]);
    const float d = H2F(w[b].d), dmin = H2F(w[b].dmin);
    for (int t = 0; t < kTok; ++t) {
      const I imin = _mm256_madd_epi16(Load(y[t][b].bsums), mins);
      acc[t] = AddScaled(acc[t], isum[t], d * y[t][b].d);
      acc[t] = SubScaled(acc[t], imin, dmin * y[t][b].d);
    }
  }
  for (int t = 0; t < kTok; ++t) out[t * out_stride] = Total(acc[t]);
}

// Q6_K against kTok Q8_K activation rows: unsigned 6-bit codes times x, minus 32 times the
// groups' activation sums, each group of 16 times its scale.
template <int kTok>
void DotQ6K(const BlockQ6_K* w, int64_t nb, const BlockQ8_KAct* const* y, float* out, int64_t out_stride) {
  const I low4 = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30);
  // pick[j] spreads 16-bit word 2j of a 128-bit half to the low 128 bits and word 2j + 1 to the
  // high ones: the scales of the two groups of 16 that a 32-byte vector spans.
  I pick[4];
  for (int j = 0; j < 4; ++j) {
    pick[j] = _mm256_set_m128i(_mm_set1_epi16(int16_t((4 * j + 2) | (4 * j + 3) << 8)),
                               _mm_set1_epi16(int16_t((4 * j) | (4 * j + 1) << 8)));
  }
  __m256 acc[kTok];
  for (int t = 0; t < kTok; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if constexpr (kTok <= 2) Prefetch(w + b);
    const I sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].scales)));
    I isum[2][kTok];  // one chain per half: the integer result is the same, the chains half as long
    for (int t = 0; t < kTok; ++t) isum[0][t] = isum[1][t] = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half) {
      const I ql0 = Load(w[b].ql + 64 * half), ql1 = Load(w[b].ql + 64 * half + 32);
      const I qh = Load(w[b].qh + 32 * half);
      const I q[4] = {
          _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45)),
          _mm256_or_si256(_mm256_and_si256(ql1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), _mm256_and_si256(qh, bits45)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                          _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45))};
      // This half's eight scales in both 128-bit halves, so that one byte shuffle places a pair.
      const I sc_half = half == 0 ? _mm256_permute2x128_si256(sc16, sc16, 0x00) : _mm256_permute2x128_si256(sc16, sc16, 0x11);
      for (int j = 0; j < 4; ++j) {
        const I s = _mm256_shuffle_epi8(sc_half, pick[j]);
        for (int t = 0; t < kTok; ++t) {
          isum[half][t] = AddPairProducts(isum[half][t], _mm256_maddubs_epi16(q[j], Load(y[t][b].qs + 128 * half + 32 * j)), s);
        }
      }
    }
    const float d = H2F(w[b].d);
    for (int t = 0; t < kTok; ++t) {
      const I corr = _mm256_slli_epi32(_mm256_madd_epi16(Load(y[t][b].bsums), sc16), 5);
      acc[t] = AddScaled(acc[t], _mm256_sub_epi32(_mm256_add_epi32(isum[0][t], isum[1][t]), corr), d * y[t][b].d);
    }
  }
  for (int t = 0; t < kTok; ++t) out[t * out_stride] = Total(acc[t]);
}

// The 32 signed values of a Q8_0, Q4_0 or Q5_0 block in element order.
HWY_INLINE I Values(const BlockQ8_0& x) { return Load(x.qs); }
HWY_INLINE I Nibbles(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const I both = _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}
HWY_INLINE I Values(const BlockQ4_0& x) { return _mm256_sub_epi8(Nibbles(x.qs), _mm256_set1_epi8(8)); }
HWY_INLINE I Values(const BlockQ5_0& x) {
  uint32_t qh;
  std::memcpy(&qh, x.qh, 4);
  // Byte i of the spread word holds byte i / 8 of qh; bit i % 8 of it is element i's fifth bit.
  const I spread = _mm256_shuffle_epi8(_mm256_set1_epi32(int32_t(qh)),
                                       _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                                        2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const I bit = _mm256_set1_epi64x(int64_t(0x8040201008040201ull));
  const I set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  const I q = _mm256_or_si256(Nibbles(x.qs), _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
  return _mm256_sub_epi8(q, _mm256_set1_epi8(16));
}

// kTable: ts holds the activation blocks' scales by block, ts[b * kQDotMaxTokens + t] (see qdot.h),
// so that a token's scale reaches all lanes as part of a load (a multiply with a broadcast memory
// operand) instead of a scalar multiply and a register broadcast: one vector operation fewer per
// token and block, the same product d * y.d.
template <typename Block, int kTok, bool kTable>
void DotLegacy(const Block* w, int64_t nb, const BlockQ8_0Act* const* y, const float* ts, float* out,
               int64_t out_stride) {
  __m256 acc[kTok];
  for (int t = 0; t < kTok; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if constexpr (kTok <= 2) Prefetch(w + b);
    const float d = H2F(w[b].d);
    const __m256 dv = _mm256_set1_ps(d);
    const I v = Values(w[b]);
    const I mag = _mm256_sign_epi8(v, v);  // |v| as unsigned bytes (128 for -128)
    for (int t = 0; t < kTok; ++t) {
      const I isum = AddByteProducts(_mm256_setzero_si256(), mag, _mm256_sign_epi8(Load(y[t][b].qs), v));
      if constexpr (kTable) {
        acc[t] = AddScaled(acc[t], isum, _mm256_mul_ps(dv, _mm256_broadcast_ss(ts + b * kQDotMaxTokens + t)));
      } else {
        acc[t] = AddScaled(acc[t], isum, d * y[t][b].d);
      }
    }
  }
  for (int t = 0; t < kTok; ++t) out[t * out_stride] = Total(acc[t]);
}

// The K-quants take up to 8 tokens a pass where there are 32 vector registers and 4 on AVX2's 16
// (their sums need three registers per token); the legacy types, up to kQDotMaxTokens.
#if HWY_TARGET == HWY_AVX2
constexpr int kKQuantTokens = 4;
#else
constexpr int kKQuantTokens = 8;
#endif

template <int kTok>
void QDotK(uint32_t type, const uint8_t* w, int64_t n, const uint8_t* acts, size_t act_stride, float* out,
           int64_t out_stride) {
  const BlockQ8_KAct* y[kTok];
  for (int t = 0; t < kTok; ++t) y[t] = reinterpret_cast<const BlockQ8_KAct*>(acts + size_t(t) * act_stride);
  switch (GgmlType(type)) {
    case GgmlType::kQ4_K: DotK45<BlockQ4_K, false, kTok>(reinterpret_cast<const BlockQ4_K*>(w), n / kQK_K, y, out, out_stride); return;
    case GgmlType::kQ5_K: DotK45<BlockQ5_K, true, kTok>(reinterpret_cast<const BlockQ5_K*>(w), n / kQK_K, y, out, out_stride); return;
    default: DotQ6K<kTok>(reinterpret_cast<const BlockQ6_K*>(w), n / kQK_K, y, out, out_stride); return;
  }
}

template <int kTok>
void QDotLegacy(uint32_t type, const uint8_t* w, int64_t n, const uint8_t* acts, size_t act_stride, const float* ts,
                float* out, int64_t out_stride) {
  const BlockQ8_0Act* y[kTok];
  for (int t = 0; t < kTok; ++t) y[t] = reinterpret_cast<const BlockQ8_0Act*>(acts + size_t(t) * act_stride);
  const int64_t nb = n / kQK;
  // With one or two tokens the rows stream from memory and the saved operation does not show.
  const bool table = ts != nullptr && kTok > 2;
  switch (GgmlType(type)) {
    case GgmlType::kQ8_0:
      return table ? DotLegacy<BlockQ8_0, kTok, true>(reinterpret_cast<const BlockQ8_0*>(w), nb, y, ts, out, out_stride)
                   : DotLegacy<BlockQ8_0, kTok, false>(reinterpret_cast<const BlockQ8_0*>(w), nb, y, ts, out, out_stride);
    case GgmlType::kQ4_0:
      return table ? DotLegacy<BlockQ4_0, kTok, true>(reinterpret_cast<const BlockQ4_0*>(w), nb, y, ts, out, out_stride)
                   : DotLegacy<BlockQ4_0, kTok, false>(reinterpret_cast<const BlockQ4_0*>(w), nb, y, ts, out, out_stride);
    default:
      return table ? DotLegacy<BlockQ5_0, kTok, true>(reinterpret_cast<const BlockQ5_0*>(w), nb, y, ts, out, out_stride)
                   : DotLegacy<BlockQ5_0, kTok, false>(reinterpret_cast<const BlockQ5_0*>(w), nb, y, ts, out, out_stride);
  }
}

void QDot(uint32_t type, const uint8_t* w, int64_t n, const uint8_t* acts, size_t act_stride, int n_tok, float* out,
          int64_t out_stride, const float* ts) {
  switch (GgmlType(type)) {
    case GgmlType::kQ4_K: case GgmlType::kQ5_K: case GgmlType::kQ6_K:
      for (int t0 = 0; t0 < n_tok; t0 += kKQuantTokens) {
        const uint8_t* a = acts + size_t(t0) * act_stride;
        float* o = out + t0 * out_stride;
        switch (std::min(kKQuantTokens, n_tok - t0)) {
          case 1: QDotK<1>(type, w, n, a, act_stride, o, out_stride); break;
          case 2: QDotK<2>(type, w, n, a, act_stride, o, out_stride); break;
          case 3: QDotK<3>(type, w, n, a, act_stride, o, out_stride); break;
#if HWY_TARGET != HWY_AVX2
          case 5: QDotK<5>(type, w, n, a, act_stride, o, out_stride); break;
          case 6: QDotK<6>(type, w, n, a, act_stride, o, out_stride); break;
          case 7: QDotK<7>(type, w, n, a, act_stride, o, out_stride); break;
          case 8: QDotK<8>(type, w, n, a, act_stride, o, out_stride); break;
#endif
          default: QDotK<4>(type, w, n, a, act_stride, o, out_stride); break;
        }
      }
      return;
    case GgmlType::kQ8_0: case GgmlType::kQ4_0: case GgmlType::kQ5_0:
      switch (n_tok) {
        case 1: QDotLegacy<1>(type, w, n, acts, act_stride, ts, out, out_stride); return;
        case 2: QDotLegacy<2>(type, w, n, acts, act_stride, ts, out, out_stride); return;
        case 3: QDotLegacy<3>(type, w, n, acts, act_stride, ts, out, out_stride); return;
        case 4: QDotLegacy<4>(type, w, n, acts, act_stride, ts, out, out_stride); return;
        case 5: QDotLegacy<5>(type, w, n, acts, act_stride, ts, out, out_stride); return;
        case 6: QDotLegacy<6>(type, w, n, acts, act_stride, ts, out, out_stride); return;
        case 7: QDotLegacy<7>(type, w, n, acts, act_stride, ts, out, out_stride); return;
        default: QDotLegacy<8>(type, w, n, acts, act_stride, ts, out, out_stride); return;
      }
    default: qdot_row_reference(type, w, n, acts, act_stride, n_tok, out, out_stride); return;
  }
}

#else  // no 256-bit integer kernels on this target

void QDot(uint32_t type, const uint8_t* w, int64_t n, const uint8_t* acts, size_t act_stride, int n_tok, float* out,
          int64_t out_stride, const float* /*ts*/) {
  qdot_row_reference(type, w, n, acts, act_stride, n_tok, out, out_stride);
}

#endif

}  // namespace HWY_NAMESPACE
}  // namespace vq::engine
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq::engine {
HWY_EXPORT(QDot);

void qdot_row(uint32_t type, const uint8_t* w, int64_t n, const uint8_t* acts, size_t act_stride, int n_tok,
              float* out, int64_t out_stride, const float* act_scales) {
  HWY_DYNAMIC_DISPATCH(QDot)(type, w, n, acts, act_stride, n_tok, out, out_stride, act_scales);
}

}  // namespace vq::engine
#endif
