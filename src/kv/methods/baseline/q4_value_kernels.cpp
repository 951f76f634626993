// q4's fused value kernel, compiled per SIMD target: accumulation as integer byte dot products
// over the layout of q4_layout.h (why they are integer, and the fixed point they hold: q4.cpp;
// the key kernel is in q4_key_kernels.cpp).
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL  // byte dot products (VNNI) where the CPU has them
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/methods/baseline/q4_value_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include <cstring>
#include <type_traits>

#include "hwy/highway.h"
#include "src/kv/kernels/byte_dot-inl.h"
#include "src/kv/kernels/fused_kernels-inl.h"
#include "src/kv/methods/baseline/q4_common-inl.h"
#include "src/kv/methods/baseline/q4_kernels.h"
#include "src/kv/methods/baseline/q4_layout.h"

HWY_BEFORE_NAMESPACE();
#include "src/kv/kernels/byte_dot_target.h"  // IWYU pragma: keep
namespace vq::kv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int kRunBlocks = 16;  // blocks whose weights are staged at once (256 tokens)
constexpr float kFixedOne = 127.0f * 256.0f;  // the weights' 16-bit fixed point: sigma maps to 32512

// The weights of a run for one value group, as the byte dot products take them: for row r and
// block bi, 16 tokens as lo and hi byte planes of T = round(W / sigma * 32512), W = w * scale_g,
// hi = (T + 128) >> 8 and lo = T - 256 * hi (both in -128..127: lo is T's own low byte), so W
// is held within sigma / 65024 (q4_layout.h has the same for queries). sigma bounds |W| over
// the run: the row's largest |w| times the group's largest |scale|, so W / sigma is the product
// of the row's normalized weights (once per run) and the group's normalized scales (once per
// group, shared by the rows): one multiply per product.
template <int kRows>
struct RunWeights {
  alignas(64) float wn[kRunBlocks][kRows][q4::kBlockTokens];  // w * 32512 / max |w|
  alignas(64) int8_t planes[kRunBlocks][kRows][2][q4::kBlockTokens];  // [lo, hi]
  float w_max[kRows];
  float factor[kRows];  // sigma / 32512: one unit of T
  float offset[kRows];  // -8 * factor * sum of T: centres the codes (value = scale * (code - 8))
};

// The row's weight of each token of block bi, zero outside [i0, i1).
template <int kRows>
HWY_INLINE void LoadBlockWeights(const float* w, size_t w_stride, int64_t i0, int64_t i1, int64_t first,
                                 VF (*out)[kParts]) {
  const DF df;
  constexpr int B = q4::kBlockTokens;
  if (first >= i0 && first + B <= i1) {
    for (int r = 0; r < kRows; ++r) {
      for (int p = 0; p < kParts; ++p) out[r][p] = hn::LoadU(df, w + size_t(r) * w_stride + size_t(first - i0) + p * kLanes);
    }
    return;
  }
  alignas(64) float tmp[B];
  for (int r = 0; r < kRows; ++r) {
    for (int t = 0; t < B; ++t) {
      const int64_t i = first + t;
      tmp[t] = i >= i0 && i < i1 ? w[size_t(r) * w_stride + size_t(i - i0)] : 0.0f;
    }
    for (int p = 0; p < kParts; ++p) out[r][p] = hn::Load(df, tmp + p * kLanes);
  }
}

// Once per run: the rows' largest |w| and their normalized weights.
template <int kRows>
HWY_INLINE void NormalizeRunWeights(const float* w, size_t w_stride, int64_t i0, int64_t i1, int64_t b0, int nb,
                                    RunWeights<kRows>* out) {
  const DF df;
  constexpr int B = q4::kBlockTokens;
  VF m[kRows];
  for (int r = 0; r < kRows; ++r) m[r] = hn::Zero(df);
  for (int bi = 0; bi < nb; ++bi) {
    VF wv[kRows][kParts];
    LoadBlockWeights<kRows>(w, w_stride, i0, i1, (b0 + bi) * B, wv);
    for (int r = 0; r < kRows; ++r) {
      for (int p = 0; p < kParts; ++p) {
        m[r] = hn::Max(m[r], hn::Abs(wv[r][p]));
        hn::Store(wv[r][p], df, &out->wn[bi][r][p * kLanes]);
      }
    }
  }
  for (int r = 0; r < kRows; ++r) {
    out->w_max[r] = hn::GetLane(hn::MaxOfLanes(df, m[r]));
    const VF inv = hn::Set(df, out->w_max[r] > 0.0f ? kFixedOne / out->w_max[r] : 0.0f);
    for (int bi = 0; bi < nb; ++bi) {
      for (int p = 0; p < kParts; ++p) {
        float* x = &out->wn[bi][r][p * kLanes];
        hn::Store(hn::Mul(hn::Load(df, x), inv), df, x);
      }
    }
  }
}

// Stores the byte planes of one block's 16 values of T (|T| <= 32512), in kParts vectors, as
// 32 bytes [lo | hi]: lo = T's low byte, hi = low byte of (T + 128) >> 8.
HWY_INLINE void StoreBlockPlanes(const VI* T, int8_t* HWY_RESTRICT planes) {
  const DI di;
#if HWY_TARGET == HWY_AVX3_DL
  // One byte permute gathers byte 0 of each lane of T, then of H, into 32 bytes [lo | hi].
  const VI H = hn::ShiftRight<8>(hn::Add(T[0], hn::Set(di, 128)));
  alignas(64) static constexpr uint8_t kIdx[64] = {0,  4,  8,  12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60,
                                                   64, 68, 72, 76, 80, 84, 88, 92, 96, 100, 104, 108, 112, 116, 120, 124};
  const __m512i both = _mm512_permutex2var_epi8(T[0].raw, _mm512_load_si512(kIdx), H.raw);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(planes), _mm512_castsi512_si256(both));
#elif HWY_TARGET == HWY_AVX2
  // T packed to words (exact: |T| <= 32512), split there, and packed to bytes gives per 128-bit
  // half [lo of tokens 0-3, 8-11 | hi 0-3, 8-11] and the same for tokens 4-7, 12-15; one dword
  // permute puts the four-token groups in order.
  const __m256i t = _mm256_packs_epi32(T[0].raw, T[1].raw);
  const __m256i h = _mm256_srai_epi16(_mm256_add_epi16(t, _mm256_set1_epi16(128)), 8);
  const __m256i l = _mm256_sub_epi16(t, _mm256_slli_epi16(h, 8));
  const __m256i bytes = _mm256_packs_epi16(l, h);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(planes), _mm256_permutevar8x32_epi32(bytes, order));
#else
  const hn::Rebind<int8_t, DI> d8;
  for (int p = 0; p < kParts; ++p) {
    const VI H = hn::ShiftRight<8>(hn::Add(T[p], hn::Set(di, 128)));
    const VI L = hn::Sub(T[p], hn::ShiftLeft<8>(H));
    hn::StoreU(hn::DemoteTo(d8, L), d8, planes + p * kLanes);
    hn::StoreU(hn::DemoteTo(d8, H), d8, planes + q4::kBlockTokens + p * kLanes);
  }
#endif
}

template <int kRows>
HWY_INLINE void StageRunWeights(const uint8_t* run, int nb, int d, int g, RunWeights<kRows>* out) {
  const DF df;
  const DI di;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const size_t bb = q4::values::block_bytes(d);
  VF s_max = hn::Zero(df);
  for (int bi = 0; bi < nb; ++bi) {
    const hwy::float16_t* sc =
        reinterpret_cast<const hwy::float16_t*>(run + size_t(bi) * bb + q4::values::scale_offset(d, g, 0));
    for (int p = 0; p < kParts; ++p) s_max = hn::Max(s_max, hn::Abs(hn::PromoteTo(df, hn::LoadU(dh, sc + p * kLanes))));
  }
  const float scale_max = hn::GetLane(hn::MaxOfLanes(df, s_max));
  const VF s_inv = hn::Set(df, scale_max > 0.0f ? 1.0f / scale_max : 0.0f);
  VI held[kRows];
  for (int r = 0; r < kRows; ++r) held[r] = hn::Zero(di);
  for (int bi = 0; bi < nb; ++bi) {
    const hwy::float16_t* sc =
        reinterpret_cast<const hwy::float16_t*>(run + size_t(bi) * bb + q4::values::scale_offset(d, g, 0));
    VF sn[kParts];
    for (int p = 0; p < kParts; ++p) sn[p] = hn::Mul(hn::PromoteTo(df, hn::LoadU(dh, sc + p * kLanes)), s_inv);
    for (int r = 0; r < kRows; ++r) {
      VI T[kParts];
      for (int p = 0; p < kParts; ++p) {
        // |wn * sn| <= 32512 up to rounding, far inside the conversion's range (RoundToInt)
        T[p] = RoundToInt(hn::Mul(hn::Load(df, &out->wn[bi][r][p * kLanes]), sn[p]));
        held[r] = hn::Add(held[r], T[p]);
      }
      StoreBlockPlanes(T, out->planes[bi][r][0]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    out->factor[r] = out->w_max[r] * scale_max / kFixedOne;
    const float sum = float(hn::GetLane(hn::SumOfLanes(di, held[r])));  // |sum| < 2^24: exact
    out->offset[r] = -8.0f * out->factor[r] * sum;
  }
}

// Blocks whose products share one widening of the short sums (byte_dot-inl.h): a half-block adds
// two products per row and plane to a lane (tokens 0..3 and 4..7), so two blocks make eight.
constexpr int kShortBlocks = kShortPairSums ? kMaxShortProducts / 4 : kRunBlocks;

// Adds the products of blocks b0..b0+kBlocks-1 for chunk cc (16 channels, kParts vectors) and
// rows r0..r0+kPass-1 to the short sums per row, plane (hi, lo) and part: per half-block, the codes
// of each channel's tokens 0..3 and 4..7 become bytes (one mask, one shift) and take each row's
// four weight words (two token sets x two planes) as broadcasts. Each block also takes a step of
// the prefetch.
template <int kPass, int kBlocks, int kRows>
HWY_INLINE void ChunkProducts(const uint8_t* HWY_RESTRICT run, size_t bb, int cc, const RunWeights<kRows>& W, int r0,
                              int b0, SpreadPrefetch& prefetch, VI (*sum)[2][kParts]) {
  const DU du;
  const DI di;
  const VU low_nibbles = hn::Set(du, 0x0F0F0F0Fu);
  HWY_UNROLL(2)  // whole (kBlocks is 1 or 2), so that the sums are registers rather than memory
  for (int i = 0; i < kBlocks; ++i) {
    const int bi = b0 + i;
    prefetch.Step();
    const uint8_t* chunk = run + size_t(bi) * bb + size_t(cc) * 128;
    const int8_t* planes = W.planes[bi][r0][0];  // one base: the rows' words are constant offsets
    for (int h = 0; h < 2; ++h) {
      VI first4[kParts], last4[kParts];  // tokens 8h..8h+3 and 8h+4..8h+7
      for (int p = 0; p < kParts; ++p) {
        const VU x = hn::LoadU(du, reinterpret_cast<const uint32_t*>(chunk + h * 64) + p * kLanes);
        first4[p] = hn::BitCast(di, hn::And(x, low_nibbles));
        last4[p] = hn::BitCast(di, hn::And(hn::ShiftRight<4>(x), low_nibbles));
      }
      for (int r = 0; r < kPass; ++r) {
        const AliasedI32* lo = reinterpret_cast<const AliasedI32*>(planes + (2 * r + 0) * q4::kBlockTokens + 8 * h);
        const AliasedI32* hi = reinterpret_cast<const AliasedI32*>(planes + (2 * r + 1) * q4::kBlockTokens + 8 * h);
        for (int p = 0; p < kParts; ++p) {
          sum[r][0][p] = DotBytesShortWord(di, DotBytesShortWord(di, sum[r][0][p], first4[p], hi), last4[p], hi + 1);
          sum[r][1][p] = DotBytesShortWord(di, DotBytesShortWord(di, sum[r][1][p], first4[p], lo), last4[p], lo + 1);
        }
      }
    }
  }
}

// The run's contribution to chunk cc (16 channels) of rows r0..r0+kPass-1. The short sums stay in
// registers; the 32-bit sums of the run stay in memory, touched once per widening.
template <int kPass, int kRows>
HWY_INLINE void AccumulateChunk(const uint8_t* HWY_RESTRICT run, size_t bb, int nb, int cc, int r0,
                                const RunWeights<kRows>& W, float* HWY_RESTRICT acc, size_t acc_stride,
                                SpreadPrefetch& prefetch) {
  const DF df;
  const DI di;
  alignas(64) int32_t run_sums[kPass][2][q4::values::kChunk] = {};  // per row and plane (hi, lo)
  for (int b0 = 0; b0 < nb;) {
    // kShortBlocks at a time (a compile-time count keeps the sums in registers), one at the end
    const int n = b0 + kShortBlocks <= nb ? kShortBlocks : 1;
    VI sum[kPass][2][kParts];
    for (int r = 0; r < kPass; ++r) {
      for (int p = 0; p < kParts; ++p) sum[r][0][p] = sum[r][1][p] = hn::Zero(di);
    }
    if (n == kShortBlocks && kShortPairSums) {
      ChunkProducts<kPass, kShortBlocks>(run, bb, cc, W, r0, b0, prefetch, sum);
    } else {
      for (int bi = b0; bi < b0 + n; ++bi) ChunkProducts<kPass, 1>(run, bb, cc, W, r0, bi, prefetch, sum);
    }
    for (int r = 0; r < kPass; ++r) {
      for (int e = 0; e < 2; ++e) {
        for (int p = 0; p < kParts; ++p) {
          int32_t* rs = run_sums[r][e] + p * kLanes;
          hn::Store(hn::Add(hn::Load(di, rs), WidenShortSums(di, sum[r][e][p])), di, rs);
        }
      }
    }
    b0 += n;
  }
  for (int r = 0; r < kPass; ++r) {
    const VF factor = hn::Set(df, W.factor[r0 + r]), offset = hn::Set(df, W.offset[r0 + r]);
    for (int p = 0; p < kParts; ++p) {
      // |hi sum| <= 256 tokens * 128 * 15 < 2^23, so hi * 256 + lo fits 32 bits.
      const VI joined = JoinPlanes(hn::Load(di, run_sums[r][0] + p * kLanes), hn::Load(di, run_sums[r][1] + p * kLanes));
      float* a = acc + size_t(r0 + r) * acc_stride + size_t(cc) * q4::values::kChunk + p * kLanes;
      hn::StoreU(hn::MulAdd(hn::ConvertTo(df, joined), factor, hn::Add(hn::LoadU(df, a), offset)), df, a);
    }
  }
}

// acc rows += sum over tokens [i0, i1) of w * v, for kRows rows. Values have channels in the
// lanes (q4_layout.h): per half-block, the codes of tokens 0..3 and 4..7 of every channel are
// masked out as bytes and multiplied by the four tokens' weight bytes (short pair sums,
// byte_dot-inl.h), once per weight plane, summing over tokens inside each lane. The integer sums of a run (per row, plane
// and 16 channels) are joined (hi * 256 + lo, below 2^31) and turned to float once per run.
template <int kRows>
void AccumulateRows(const float* w, size_t w_stride, const uint8_t* blocks, int64_t i0, int64_t i1, int d, float* acc,
                    size_t acc_stride) {
  constexpr int B = q4::kBlockTokens;
  static_assert(kRows % kPassRows<kRows> == 0, "whole passes");
  const size_t bb = q4::values::block_bytes(d);
  const int VC = q4::values::n_chunks(d), G = q4::n_groups(d);
  RunWeights<kRows> W;
  for (int64_t b0 = i0 / B; b0 * B < i1; b0 += kRunBlocks) {
    const int nb = int(std::min<int64_t>(kRunBlocks, (i1 + B - 1) / B - b0));
    const uint8_t* run = blocks + size_t(b0) * bb;
    // The bytes after this run (the next run, or the start of the caller's next call: attention
    // asks for one run at a time) are asked for while this run is computed, a step with each
    // block of each pass; a burst of a whole run's prefetches would fill the line-fill buffers
    // and stall. A prefetch past the end of the cache's memory is harmless: prefetches never
    // fault.
    const size_t next_bytes = size_t(nb) * bb;
    SpreadPrefetch prefetch(run + next_bytes, next_bytes, size_t(VC) * (kRows / kPassRows<kRows>) * size_t(nb));
    NormalizeRunWeights<kRows>(w, w_stride, i0, i1, b0, nb, &W);
    for (int g = 0; g < G; ++g) {
      StageRunWeights<kRows>(run, nb, d, g, &W);
      // One pass over the run per chunk of 16 channels (two per group of 32, one in a ragged last
      // group) and kPassRows<kRows> rows.
      for (int cc = 2 * g; cc < std::min(VC, 2 * g + 2); ++cc) {
        for (int r0 = 0; r0 < kRows; r0 += kPassRows<kRows>) {
          AccumulateChunk<kPassRows<kRows>>(run, bb, nb, cc, r0, W, acc, acc_stride, prefetch);
        }
      }
    }
  }
}

void Q4Accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, int64_t i0, int64_t i1, int d,
                  float* acc, size_t acc_stride) {
  if (i1 <= i0) return;
  int r = 0;
  for (; r + 4 <= n_q; r += 4) {
    AccumulateRows<4>(w + size_t(r) * w_stride, w_stride, blocks, i0, i1, d, acc + size_t(r) * acc_stride, acc_stride);
  }
  for (; r < n_q; ++r) {
    AccumulateRows<1>(w + size_t(r) * w_stride, w_stride, blocks, i0, i1, d, acc + size_t(r) * acc_stride, acc_stride);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq::kv::q4 {
HWY_EXPORT(Q4Accumulate);
void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, int64_t i0, int64_t i1, int d,
                float* acc, size_t acc_stride) {
  HWY_DYNAMIC_DISPATCH(Q4Accumulate)(w, w_stride, n_q, blocks, i0, i1, d, acc, acc_stride);
}
}  // namespace vq::kv::q4
#endif
