// The pieces KIVI's key and value lane kernels share (kivi_key_kernels.cpp,
// kivi_value_kernels.cpp): vector types, the fp16 (scale, zero) loader, the byte planes of a
// held 16-bit operand, and the lane helpers. Per-target code: included inside each kernel file's
// HWY_NAMESPACE, once per target (the guard below toggles with Highway's target loop).
#if defined(VQ_KV_KIVI_LANE_COMMON_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef VQ_KV_KIVI_LANE_COMMON_INL_H_
#undef VQ_KV_KIVI_LANE_COMMON_INL_H_
#else
#define VQ_KV_KIVI_LANE_COMMON_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"
#include "src/kv/kernels/byte_dot-inl.h"

HWY_BEFORE_NAMESPACE();
#include "src/kv/kernels/byte_dot_target.h"  // IWYU pragma: keep
namespace vq::kv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
using DU = hn::RebindToUnsigned<DF>;
using VU = hn::Vec<DU>;
constexpr int kLanes = int(hn::MaxLanes(DF()));
constexpr int kSub = 16;
constexpr int kParts = kSub / kLanes;
static_assert(kSub % kLanes == 0, "16 tokens must be whole vectors");

using DI = hn::RebindToSigned<DF>;
using VI = hn::Vec<DI>;
typedef int32_t AliasedI32 __attribute__((may_alias));
constexpr float kFixedOne = 127.0f * 256.0f;  // a held operand's largest magnitude maps to 32512

// Rows per pass over a sub-block (query rows for keys, weight rows for values): their two planes' sums for each part of the block must
// stay in registers (4 rows x 2 planes of AVX-512's 32; 2 x 2 x 2 parts of AVX2's 16).
constexpr int kRowsPerPass = kParts >= 2 ? 2 : 4;
// Rows per pass of the key fold's and the value staging's first loop, each row with two running
// sums (a maximum and the zeros' share): four rows' eight sums beside the scales, zeros and
// temporaries overflow AVX2's 16 registers, and a spilled sum makes every iteration wait on its
// store. The rows' sums are the same either way.
constexpr int kStageRows = kParts >= 2 ? 2 : 4;


// The sums of both byte planes of kPass rows, kParts vectors each.
template <int kPass>
HWY_INLINE void ZeroSums(VI (*lo)[kParts], VI (*hi)[kParts]) {
  for (int r = 0; r < kPass; ++r) {
    for (int p = 0; p < kParts; ++p) lo[r][p] = hi[r][p] = hn::Zero(DI());
  }
}

// Four codes per lane (u's bytes) times four signed bytes of each plane, added to kPass rows'
// plane sums: row r's lo word is at base + 2 r kStride + at, its hi word kStride bytes after it.
// The sums are short (16-bit pair sums, byte_dot-inl.h) where kShortPairSums: the caller widens
// them (WidenInto) before kShortProductsOf products have gone into them.
template <int kPass, int kStride>
HWY_INLINE void DotCodes(const VI* u, const int8_t* HWY_RESTRICT base, int at, VI (*lo)[kParts], VI (*hi)[kParts]) {
  const DI di;
  for (int r = 0; r < kPass; ++r) {
    const AliasedI32* wl = reinterpret_cast<const AliasedI32*>(base + 2 * r * kStride + at);
    const AliasedI32* wh = reinterpret_cast<const AliasedI32*>(base + (2 * r + 1) * kStride + at);
    for (int p = 0; p < kParts; ++p) {
      lo[r][p] = DotBytesShortWord(di, lo[r][p], u[p], wl);
      hi[r][p] = DotBytesShortWord(di, hi[r][p], u[p], wh);
    }
  }
}

// How many DotCodes products of kBits-bit codes (3 bits: joined, so up to 7) may go into one short
// sum before it is widened: a 16-bit pair sum is at most 2 (2^b - 1) 128, and the short sum stays
// below 2^15 (42 at 2 bits, 18 at 3, 8 at 4).
template <int kBits>
constexpr int kShortProductsOf = 32767 / (2 * ((1 << kBits) - 1) * 128);

// The wide sums of kPass rows' two planes, kept in memory (L1): they are touched only when the
// short sums are widened, and AVX2's 16 registers are taken by the short sums and the codes.
template <int kPass>
struct WideSums {
  alignas(64) int32_t lo[kPass][kParts][kLanes];
  alignas(64) int32_t hi[kPass][kParts][kLanes];
};

// wide = (add ? wide : 0) + the widened short sums, which start again from zero (short pair sums
// only; elsewhere the sums are wide already and the kernels skip this).
template <int kPass>
HWY_INLINE void WidenInto(VI (*lo)[kParts], VI (*hi)[kParts], bool add, WideSums<kPass>* wide) {
  const DI di;
  for (int r = 0; r < kPass; ++r) {
    for (int p = 0; p < kParts; ++p) {
      VI l = WidenShortSums(di, lo[r][p]), h = WidenShortSums(di, hi[r][p]);
      if (add) {
        l = hn::Add(l, hn::Load(di, wide->lo[r][p]));
        h = hn::Add(h, hn::Load(di, wide->hi[r][p]));
      }
      hn::Store(l, di, wide->lo[r][p]);
      hn::Store(h, di, wide->hi[r][p]);
      lo[r][p] = hi[r][p] = hn::Zero(di);
    }
  }
}

// The wide sums back in lo and hi.
template <int kPass>
HWY_INLINE void LoadWide(const WideSums<kPass>& wide, VI (*lo)[kParts], VI (*hi)[kParts]) {
  const DI di;
  for (int r = 0; r < kPass; ++r) {
    for (int p = 0; p < kParts; ++p) {
      lo[r][p] = hn::Load(di, wide.lo[r][p]);
      hi[r][p] = hn::Load(di, wide.hi[r][p]);
    }
  }
}

// Field j of every byte of x (four codes per lane, kivi_lanes.h) times four signed bytes of each
// plane (DotCodes).
template <int kBits, int j, int kPass, int kStride>
HWY_INLINE void DotField(const VU* x, const int8_t* HWY_RESTRICT base, int at, VI (*lo)[kParts], VI (*hi)[kParts]) {
  const DI di;
  constexpr uint32_t kMask = 0x01010101u * ((1u << kBits) - 1);
  VI u[kParts];
  for (int p = 0; p < kParts; ++p) {
    u[p] = hn::BitCast(di, hn::And(j == 0 ? x[p] : hn::ShiftRight<kBits * j>(x[p]), hn::Set(DU(), kMask)));
  }
  DotCodes<kPass, kStride>(u, base, at, lo, hi);
}

// 3-bit codes lo + 4 hi: field j of the 2-bit plane's words x2 and field f of the 1-bit plane's
// words x1 (the same four channels or tokens) joined into one byte each, then DotCodes: one dot
// product per field as at 2 bits, for a shift, a mask and an or more.
template <int j, int f, int kPass, int kStride>
HWY_INLINE void DotField3(const VU* x2, const VU* x1, const int8_t* HWY_RESTRICT base, int at, VI (*lo)[kParts],
                          VI (*hi)[kParts]) {
  const DI di;
  const DU du;
  VI u[kParts];
  for (int p = 0; p < kParts; ++p) {
    const VU l = hn::And(j == 0 ? x2[p] : hn::ShiftRight<2 * j>(x2[p]), hn::Set(du, 0x03030303u));
    const VU h = hn::And(f == 0 ? x1[p] : hn::ShiftRight<f>(x1[p]), hn::Set(du, 0x01010101u));
    u[p] = hn::BitCast(di, hn::Or(l, hn::ShiftLeft<2>(h)));
  }
  DotCodes<kPass, kStride>(u, base, at, lo, hi);
}

// The four fields of a 2-bit chunk (x2) joined with fields 4 half .. 4 half + 3 of the 1-bit
// vector it shares with its neighbouring chunk (x1), against the operand bytes at base + 4 j.
template <int kPass, int kStride>
HWY_INLINE void DotJoinedChunk(const VU* x2, const VU* x1, int half, const int8_t* HWY_RESTRICT base,
                               VI (*lo)[kParts], VI (*hi)[kParts]) {
  if (half == 0) {
    DotField3<0, 0, kPass, kStride>(x2, x1, base, 0, lo, hi);
    DotField3<1, 1, kPass, kStride>(x2, x1, base, 4, lo, hi);
    DotField3<2, 2, kPass, kStride>(x2, x1, base, 8, lo, hi);
    DotField3<3, 3, kPass, kStride>(x2, x1, base, 12, lo, hi);
  } else {
    DotField3<0, 4, kPass, kStride>(x2, x1, base, 0, lo, hi);
    DotField3<1, 5, kPass, kStride>(x2, x1, base, 4, lo, hi);
    DotField3<2, 6, kPass, kStride>(x2, x1, base, 8, lo, hi);
    DotField3<3, 7, kPass, kStride>(x2, x1, base, 12, lo, hi);
  }
}


// A lane's joined sum 256 hi + lo as a float: exact as an integer (|sum| < 2^31 for every use
// here), one rounding to float.
HWY_INLINE VF JoinedSum(VI hi, VI lo) { return hn::ConvertTo(DF(), hn::Add(hn::ShiftLeft<8>(hi), lo)); }

// The (scale, zero) pairs of channels c .. c+N (fp16, interleaved) as two float vectors.
template <class D>
HWY_INLINE void LoadPairs(D df, const hwy::float16_t* HWY_RESTRICT sz, int c, hn::Vec<D>* s, hn::Vec<D>* z) {
  const hn::Rebind<hwy::float16_t, D> dh;
#if HWY_TARGET == HWY_SCALAR
  *s = hn::PromoteTo(df, hn::LoadU(dh, sz + 2 * c));
  *z = hn::PromoteTo(df, hn::LoadU(dh, sz + 2 * c + 1));
#else
  const int N = int(hn::Lanes(df));
  const auto a = hn::PromoteTo(df, hn::LoadU(dh, sz + 2 * c)), b = hn::PromoteTo(df, hn::LoadU(dh, sz + 2 * c + N));
  *s = hn::ConcatEven(df, b, a);
  *z = hn::ConcatOdd(df, b, a);
#endif
}

// Stores the two byte planes of T (|T| <= 32512): lo = T - 256 hi at `to`, hi = (T + 128) >> 8
// at to + C. With U = T + 128, hi is U's second byte and lo its first byte with the top bit
// flipped (adding 128 flips bit 7 of the low byte). On AVX-512 VBMI one vpermb gathers both
// planes of 16 lanes into 32 contiguous bytes (C = 16), an xor fixes lo, and one store writes
// them: two truncating stores (vpmovdb, two shuffle uops each on the Intel and AMD cores measured)
// cost twice the shuffles, and the fold and the value staging call this for every operand they
// hold. Plain AVX-512 stores lo by truncation (vpmovdb); elsewhere it is computed and both planes
// go through an exact (in-range) saturating demotion. Every form writes the same bytes.
template <int C, class D8, class VI32>
HWY_INLINE void StorePlanes(D8 d8, VI32 T, int8_t* HWY_RESTRICT to) {
#if HWY_TARGET == HWY_AVX3_DL
  if constexpr (sizeof(T.raw) == 64) {
    static_assert(C == 16, "16 lanes fill one chunk's two planes");
    // Bytes 0 (lo, flipped) and 1 (hi) of each 32-bit lane to bytes 0-15 and 16-31.
    const __m512i order = _mm512_set_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  //
                                          0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  //
                                          61, 57, 53, 49, 45, 41, 37, 33, 29, 25, 21, 17, 13, 9, 5, 1,  //
                                          60, 56, 52, 48, 44, 40, 36, 32, 28, 24, 20, 16, 12, 8, 4, 0);
    const __m512i u = _mm512_add_epi32(T.raw, _mm512_set1_epi32(128));
    const __m256i planes = _mm512_castsi512_si256(_mm512_permutexvar_epi8(order, u));
    const __m256i flip = _mm256_set_epi64x(0, 0, int64_t(0x8080808080808080ull), int64_t(0x8080808080808080ull));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(to), _mm256_xor_si256(planes, flip));
    return;
  }
#endif
  const VI32 hi = hn::ShiftRight<8>(hn::Add(T, hn::Set(hn::DFromV<VI32>(), 128)));
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  if constexpr (sizeof(T.raw) == 64) {
    _mm512_mask_cvtepi32_storeu_epi8(to, 0xFFFF, T.raw);
    _mm512_mask_cvtepi32_storeu_epi8(to + C, 0xFFFF, hi.raw);
    return;
  }
#endif
  hn::StoreU(hn::DemoteTo(d8, hn::Sub(T, hn::ShiftLeft<8>(hi))), d8, to);
  hn::StoreU(hn::DemoteTo(d8, hi), d8, to + C);
}

// StorePlanes of C = 2N values held as two vectors of N lanes (t0 the first N). On AVX2 (N = 8,
// C = 16) the 16 values are packed to 16 bits once and both planes are made there (a pack, four
// 16-bit operations, a pack to bytes and one vpermd put [lo 16 | hi 16] in one register for one
// store) instead of two demotions of each vector. The same bytes as StorePlanes.
template <int C, class D8, class VI32>
HWY_INLINE void StorePlanesOfTwo(D8 d8, VI32 t0, VI32 t1, int8_t* HWY_RESTRICT to) {
#if HWY_TARGET == HWY_AVX2
  if constexpr (sizeof(t0.raw) == 32 && C == 16) {
    // 16-bit lanes: [t0 0-3, t1 0-3 | t0 4-7, t1 4-7]; |T| <= 32512, so the pack is exact.
    const __m256i u = _mm256_add_epi16(_mm256_packs_epi32(t0.raw, t1.raw), _mm256_set1_epi16(128));
    const __m256i hi = _mm256_srai_epi16(u, 8);
    const __m256i lo = _mm256_sub_epi16(_mm256_and_si256(u, _mm256_set1_epi16(0xFF)), _mm256_set1_epi16(128));
    // 32-bit groups of four bytes: lo(t0 0-3), lo(t1 0-3), hi(t0 0-3), hi(t1 0-3) | the same of 4-7.
    const __m256i bytes = _mm256_packs_epi16(lo, hi);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(to), _mm256_permutevar8x32_epi32(bytes, order));
    return;
  }
#endif
  constexpr int N = C / 2;
  StorePlanes<C>(d8, t0, to);
  StorePlanes<C>(d8, t1, to + N);
}

// max(m, |x|) for m >= 0: one vrangeps (its max-of-magnitudes form, sign cleared) on AVX-512
// instead of an and and a max; the same floats.
template <class V>
HWY_INLINE V MaxAbs(V m, V x) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  if constexpr (sizeof(x.raw) == 64) return V{_mm512_range_ps(m.raw, x.raw, 0x0B)};
  if constexpr (sizeof(x.raw) == 32) return V{_mm256_range_ps(m.raw, x.raw, 0x0B)};
#endif
  return hn::Max(m, hn::Abs(x));
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#endif  // the per-target guard
