// KIVI's lane kernels for values, compiled per SIMD target: accumulation over the per-token value
// layout of kivi_lanes.h (the codecs that write it are in kivi_lanes.cpp; the key side is in
// kivi_key_kernels.cpp).
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL  // byte dot products (VNNI) where the CPU has them
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/methods/kivi/kivi_value_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include <algorithm>
#include <cstring>
#include <utility>

#include "hwy/highway.h"
#include "src/core/fp16.h"
#include "src/kv/kernels/byte_dot-inl.h"
#include "src/kv/kernels/fused_kernels-inl.h"
#include "src/kv/methods/kivi/kivi_lane_common-inl.h"
#include "src/kv/methods/kivi/kivi_lane_kernels.h"

HWY_BEFORE_NAMESPACE();
#include "src/kv/kernels/byte_dot_target.h"  // IWYU pragma: keep
namespace vq::kv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ---- values: accumulation -----------------------------------------------------------------
//
// Integer byte dot products again, summing over tokens inside each lane: a chunk's vector has a
// channel per lane and, after a shift and a mask, four tokens' codes as its bytes (kivi_lanes.h),
// which multiply the four tokens' weights broadcast from one word. The weights of a run of up to
// 256 tokens are held per row and value group as W = w * scale in 16-bit fixed point, T =
// round(W / unit), unit = the run's largest |W| / 32512: two signed byte planes as for the keys,
// each W within unit / 2. (A unit from the largest |w| times the largest scale, as q4 takes it,
// spares a pass but KIVI's per-token scales vary widely: on the model's activations it held the
// outputs 4 times less precisely.) Per run each channel's two integer sums are joined and turned
// to float once; the zeros' share (sum w * zero per group) is summed in float beside them.

constexpr int kRunSubs = 16;  // sub-blocks (16 tokens each) whose weights are staged at once

template <int kRows>
struct RunWeights {
  alignas(64) float w[kRunSubs][kRows][kSub];           // the weights, 0 outside the range
  alignas(64) float ws[kRunSubs][kRows][kSub];          // one group's w * scale per sub-block and row
  alignas(64) int8_t planes[kRunSubs][kRows][2][kSub];  // one group's T: [lo | hi] per sub-block and row
};

// Once per run: each row's weights of the run's sub-blocks b0 .. b0+nb-1, zero outside [i0, i1).
template <int kRows>
HWY_INLINE void LoadRunWeights(const float* w, size_t w_stride, int64_t i0, int64_t i1, int64_t b0, int nb,
                               RunWeights<kRows>* out) {
  const DF df;
  for (int bi = 0; bi < nb; ++bi) {
    const int64_t first = (b0 + bi) * kSub;
    for (int r = 0; r < kRows; ++r) {
      float* dst = out->w[bi][r];
      if (first >= i0 && first + kSub <= i1) {
        for (int p = 0; p < kParts; ++p) {
          hn::Store(hn::LoadU(df, w + size_t(r) * w_stride + size_t(first - i0) + p * kLanes), df, dst + p * kLanes);
        }
      } else {
        for (int t = 0; t < kSub; ++t) {
          const int64_t i = first + t;
          dst[t] = i >= i0 && i < i1 ? w[size_t(r) * w_stride + size_t(i - i0)] : 0.0f;
        }
      }
    }
  }
}

// Per value group g: the run's T planes for every row, the unit of T per row (factor), and each
// row's sum of w * zero added to acc[d + g].
template <int kRows>
HWY_INLINE void StageGroupWeights(const uint8_t* run, size_t bb, size_t codes, int nb, int g, int d,
                                  RunWeights<kRows>* W, float* factor, float* acc, size_t acc_stride) {
  const DF df;
  const hn::Rebind<int8_t, DF> d8;
  const auto pairs = [&](int bi) {
    return reinterpret_cast<const hwy::float16_t*>(run + size_t(bi) * bb + codes) + size_t(g) * kSub * 2;
  };
  VF m[kRows], zs[kRows];
  for (int r = 0; r < kRows; ++r) m[r] = zs[r] = hn::Zero(df);
  constexpr int kPassRows = kRows < kStageRows ? kRows : kStageRows;
  for (int r0 = 0; r0 < kRows; r0 += kPassRows) {
    for (int bi = 0; bi < nb; ++bi) {
      for (int p = 0; p < kParts; ++p) {
        VF sv, zv;
        LoadPairs(df, pairs(bi), p * kLanes, &sv, &zv);
        for (int r = r0; r < r0 + kPassRows; ++r) {
          const VF wv = hn::Load(df, &W->w[bi][r][p * kLanes]);
          const VF x = hn::Mul(wv, sv);
          hn::Store(x, df, &W->ws[bi][r][p * kLanes]);
          m[r] = MaxAbs(m[r], x);
          zs[r] = hn::MulAdd(wv, zv, zs[r]);
        }
      }
    }
  }
  VF inv[kRows];
  for (int r = 0; r < kRows; ++r) {
    const float mx = hn::GetLane(hn::MaxOfLanes(df, m[r]));
    factor[r] = mx / kFixedOne;
    inv[r] = hn::Set(df, mx > 0.0f ? kFixedOne / mx : 0.0f);
    acc[size_t(r) * acc_stride + size_t(d + g)] += hn::GetLane(hn::SumOfLanes(df, zs[r]));
  }
  for (int bi = 0; bi < nb; ++bi) {
    for (int r = 0; r < kRows; ++r) {
      // |w * s| * inv <= 32512 up to rounding: hi and lo are in -128..127.
      const auto T = [&](int p) HWY_ATTR { return RoundToInt(hn::Mul(hn::Load(df, &W->ws[bi][r][p * kLanes]), inv[r])); };
      if constexpr (kParts == 2) {
        StorePlanesOfTwo<kSub>(d8, T(0), T(1), &W->planes[bi][r][0][0]);
      } else {
        for (int p = 0; p < kParts; ++p) StorePlanes<kSub>(d8, T(p), &W->planes[bi][r][0][p * kLanes]);
      }
    }
  }
}

// Query rows r0 .. r0+kPass-1, channels of chunk ch (16, in kParts vectors): acc += factor *
// (256 sum_hi + sum_lo) over the run's nb sub-blocks. At 3 bits a code is lo + 4 hi: chunk ch's
// vector of the 2-bit plane and fields 4 (ch % 2) .. +3 of the 1-bit plane's vector shared by
// chunks ch and ch ^ 1 (after the 2-bit plane's 4d bytes) hold the same tokens, joined into one
// byte a code before each dot product (DotField3).
template <int kBits, int kRows, int kPass>
HWY_INLINE void AccumulateChunk(const uint8_t* HWY_RESTRICT run, size_t bb, int nb, int d, int ch,
                                const RunWeights<kRows>& W, int r0, const float* factor, float* HWY_RESTRICT acc,
                                size_t acc_stride) {
  constexpr int kVecs = kBits == 3 ? 1 : kBits / 2;  // vectors of 16 channels per chunk and sub-block
  constexpr int kFields = kBits == 3 ? 4 : 8 / kBits;  // codes per byte (of the 2-bit plane at 3 bits)
  constexpr int kTokens = 4 * kFields;                  // tokens per vector
  const DF df;
  const DU du;
  VI lo[kPass][kParts], hi[kPass][kParts];
  ZeroSums<kPass>(lo, hi);
  WideSums<kPass> wide;
  // Short sums are widened every kWiden sub-blocks (each is kVecs * kFields products a sum).
  constexpr int kWiden = kShortPairSums ? kShortProductsOf<kBits> / (kVecs * kFields) : kRunSubs;
  for (int b0 = 0; b0 < nb; b0 += kWiden) {
    const int b1 = std::min(nb, b0 + kWiden);
    for (int bi = b0; bi < b1; ++bi) {
      const uint8_t* sub = run + size_t(bi) * bb;
      const uint32_t* words = reinterpret_cast<const uint32_t*>(sub) + size_t(ch) * kVecs * kSub;
      const int8_t* planes = W.planes[bi][r0][0];  // the rows' words are constant offsets from it
      if constexpr (kBits == 3) {
        const uint32_t* high = reinterpret_cast<const uint32_t*>(sub + size_t(d) * 4) + size_t(ch / 2) * kSub;
        VU x2[kParts], x1[kParts];
        for (int p = 0; p < kParts; ++p) {
          x2[p] = hn::LoadU(du, words + p * kLanes);
          x1[p] = hn::LoadU(du, high + p * kLanes);
        }
        DotJoinedChunk<kPass, kSub>(x2, x1, ch % 2, planes, lo, hi);
      } else {
        for (int h = 0; h < kVecs; ++h) {
          VU x[kParts];
          for (int p = 0; p < kParts; ++p) x[p] = hn::LoadU(du, words + h * kSub + p * kLanes);
          // Field j's bytes are tokens h * kTokens + 4 j .. +3.
          DotField<kBits, 0, kPass, kSub>(x, planes, h * kTokens, lo, hi);
          DotField<kBits, 1, kPass, kSub>(x, planes, h * kTokens + 4, lo, hi);
          if constexpr (kFields == 4) {
            DotField<kBits, 2, kPass, kSub>(x, planes, h * kTokens + 8, lo, hi);
            DotField<kBits, 3, kPass, kSub>(x, planes, h * kTokens + 12, lo, hi);
          }
        }
      }
    }
    if constexpr (kShortPairSums) WidenInto<kPass>(lo, hi, b0 > 0, &wide);
  }
  if constexpr (kShortPairSums) LoadWide<kPass>(wide, lo, hi);
  for (int r = 0; r < kPass; ++r) {
    const VF f = hn::Set(df, factor[r0 + r]);
    float* a = acc + size_t(r0 + r) * acc_stride + size_t(ch) * kSub;
    // |256 hi + lo| <= 256 tokens * 15 * 32640 < 2^31.
    for (int p = 0; p < kParts; ++p) {
      hn::StoreU(hn::MulAdd(f, JoinedSum(hi[r][p], lo[r][p]), hn::LoadU(df, a + p * kLanes)), df, a + p * kLanes);
    }
  }
}

// acc rows ([d channel sums | d/G zero sums]) += sum over run tokens [i0, i1) of w * v.
template <int kBits, int kRows>
void ValueAccumulateRows(const float* w, size_t w_stride, const uint8_t* blocks, size_t bb, int d, int G, int64_t i0,
                         int64_t i1, float* acc, size_t acc_stride) {
  constexpr int kPass = kRows < kRowsPerPass ? kRows : kRowsPerPass;
  static_assert(kRows % kPass == 0, "rows must split into whole passes");
  const size_t codes = size_t(d) * kBits * 2;  // bytes of a sub-block's codes
  RunWeights<kRows> W;
  float factor[kRows];
  for (int64_t b0 = i0 / kSub; b0 * kSub < i1; b0 += kRunSubs) {
    const int nb = int(std::min<int64_t>(kRunSubs, (i1 + kSub - 1) / kSub - b0));
    const uint8_t* run = blocks + size_t(b0) * bb;
    // The next run's bytes are asked for while this one is computed, a share per chunk pass; a
    // burst of a whole run's prefetches fills the line-fill buffers and stalls.
    const size_t run_bytes = size_t(nb) * bb;
    SpreadPrefetch next(run + run_bytes, run_bytes, size_t(d / kSub));
    if (b0 == i0 / kSub) PrefetchBytes(run, std::min<size_t>(run_bytes, 4 * bb));  // nobody asked for the first
    LoadRunWeights<kRows>(w, w_stride, i0, i1, b0, nb, &W);
    for (int g = 0; g < d / G; ++g) {
      StageGroupWeights<kRows>(run, bb, codes, nb, g, d, &W, factor, acc, acc_stride);
      for (int ch = g * (G / kSub); ch < (g + 1) * (G / kSub); ++ch) {
        next.Step();
        for (int r0 = 0; r0 < kRows; r0 += kPass) {
          AccumulateChunk<kBits, kRows, kPass>(run, bb, nb, d, ch, W, r0, factor, acc, acc_stride);
        }
      }
    }
  }
}

template <int kBits>
void ValueAccumulateT(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, size_t bb, int d, int G,
                      int64_t i0, int64_t i1, float* acc, size_t acc_stride) {
  int r = 0;
  for (; r + 4 <= n_q; r += 4) {
    ValueAccumulateRows<kBits, 4>(w + size_t(r) * w_stride, w_stride, blocks, bb, d, G, i0, i1, acc + size_t(r) * acc_stride,
                                  acc_stride);
  }
  for (; r < n_q; ++r) {
    ValueAccumulateRows<kBits, 1>(w + size_t(r) * w_stride, w_stride, blocks, bb, d, G, i0, i1, acc + size_t(r) * acc_stride,
                                  acc_stride);
  }
}

void KiviLanesValueAccumulate(int bits, const float* w, size_t w_stride, int n_q, const uint8_t* blocks, size_t bb,
                              int d, int G, int64_t i0, int64_t i1, float* acc, size_t acc_stride) {
  if (i1 <= i0) return;
  if (bits == 2) {
    ValueAccumulateT<2>(w, w_stride, n_q, blocks, bb, d, G, i0, i1, acc, acc_stride);
  } else if (bits == 3) {
    ValueAccumulateT<3>(w, w_stride, n_q, blocks, bb, d, G, i0, i1, acc, acc_stride);
  } else {
    ValueAccumulateT<4>(w, w_stride, n_q, blocks, bb, d, G, i0, i1, acc, acc_stride);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq::kv::kivi_lanes {
HWY_EXPORT(KiviLanesValueAccumulate);

void value_accumulate(int bits, const float* w, size_t w_stride, int n_q, const uint8_t* blocks, size_t bb, int d,
                      int G, int64_t i0, int64_t i1, float* acc, size_t acc_stride) {
  HWY_DYNAMIC_DISPATCH(KiviLanesValueAccumulate)(bits, w, w_stride, n_q, blocks, bb, d, G, i0, i1, acc, acc_stride);
}
}  // namespace vq::kv::kivi_lanes
#endif
