// Fused attention kernels written once over a "token loader": the per-format code that turns a
// token's stored bytes into float vectors, 32 channels (one group) at a time. Used by the
// 16-bit float codecs and the grouped baselines; included once per Highway target.
//
// Scores: a tile of kTok tokens x kRows query rows keeps kTok*kRows independent accumulators
// (so the FMA latency chain never limits), and their horizontal sums are taken four at a time
// with one interleave tree. Accumulation: a strip of 64 channels x kRows rows stays in registers
// while the tokens stream past. Rows of the stream are prefetched ahead: a cache read from
// memory is latency bound otherwise.
//
// A loader L provides:
//   using Scales = ...;                                per-token state (e.g. its group scales)
//   void   LoadScales(df, const uint8_t* tok, int d, Scales* out)
//   Vec    Load(df, const uint8_t* tok, int d, int g, int first, const Scales&)
//                                                      channels 32g+first .. +N, as floats
//   float  Value(const uint8_t* tok, int d, int j)     scalar, any channel (tails)
#if defined(VQ_KV_FUSED_KERNELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef VQ_KV_FUSED_KERNELS_INL_H_
#undef VQ_KV_FUSED_KERNELS_INL_H_
#else
#define VQ_KV_FUSED_KERNELS_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "src/core/fp16.h"

HWY_BEFORE_NAMESPACE();
namespace vq::kv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int kFusedGroup = 32;
constexpr int64_t kPrefetchTokens = 32;

HWY_INLINE void PrefetchBytes(const uint8_t* p, size_t bytes) {
  for (size_t o = 0; o < bytes; o += 64) hwy::Prefetch(p + o);
}

// For kernels that score a whole block of kSub tokens at a time (tokens in the vector lanes):
// calls score_block(blk, dst, dst_stride) for each block of `bb` bytes that tokens [i0, i1) of a
// run touch, dst being out itself for a block wholly inside the range and a buffer for a partial
// one at either end (whose tokens in range are then copied out), so a kernel never writes past
// the range. The block four ahead is prefetched (a prefetch past the end never faults).
//
// kAdd: the scores are added to what out holds (a codec whose score is a sum of parts, each part
// adding its own in turn). score_block then takes a fourth argument, std::true_type where it
// adds to dst and std::false_type where it writes the buffer, whose tokens are then added.
template <int kRows, int kSub, bool kAdd = false, class ScoreBlock>
HWY_INLINE void ScoreLaneBlocks(const uint8_t* blocks, size_t bb, int64_t i0, int64_t i1, float* out, size_t out_stride,
                                const ScoreBlock& score_block) {
  alignas(64) float tmp[kRows * kSub];
  for (int64_t b = i0 / kSub; b * kSub < i1; ++b) {
    const uint8_t* blk = blocks + size_t(b) * bb;
    PrefetchBytes(blk + 4 * bb, bb);
    const int64_t first = b * kSub;
    if (first >= i0 && first + kSub <= i1) {
      if constexpr (kAdd) {
        score_block(blk, out + (first - i0), out_stride, std::true_type());
      } else {
        score_block(blk, out + (first - i0), out_stride);
      }
      continue;
    }
    if constexpr (kAdd) {
      score_block(blk, tmp, size_t(kSub), std::false_type());
    } else {
      score_block(blk, tmp, size_t(kSub));
    }
    const int64_t a = std::max(i0, first), e = std::min(i1, first + kSub);
    for (int r = 0; r < kRows; ++r) {
      for (int64_t x = a; x < e; ++x) {
        float& o = out[size_t(r) * out_stride + size_t(x - i0)];
        o = kAdd ? o + tmp[r * kSub + (x - first)] : tmp[r * kSub + (x - first)];
      }
    }
  }
}

// Asks for `bytes` from `p` spread evenly over `steps` calls of Step(), whole cache lines at a
// time, for kernels that stream a run while the next one is fetched: a burst of a whole run's
// prefetches would fill the line-fill buffers and stall the loads in flight.
class SpreadPrefetch {
 public:
  SpreadPrefetch(const uint8_t* p, size_t bytes, size_t steps)
      : at_(p), end_(p + bytes), step_(LineBytes(bytes, std::max<size_t>(steps, 1))) {}
  HWY_INLINE void Step() {
    if (at_ < end_) {
      PrefetchBytes(at_, step_);
      at_ += step_;
    }
  }

 private:
  const uint8_t* at_;
  const uint8_t* end_;
  size_t step_;

  static size_t LineBytes(size_t bytes, size_t steps) { return ((bytes + steps - 1) / steps + 63) / 64 * 64; }
};

// wb[r * kSub + t] = w_r(token first + t) * scale_t for a block of kSub tokens whose kSub fp16
// scales come first (the lane layouts), zero outside [i0, i1): w points at token i0's weight
// (rows w_stride apart). With vectors when the block lies wholly inside the range.
template <int kRows, int kSub>
HWY_INLINE void StageBlockWeights(const float* HWY_RESTRICT w, size_t w_stride, const uint8_t* HWY_RESTRICT blk,
                                  int64_t first, int64_t i0, int64_t i1, float* HWY_RESTRICT wb) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const int N = int(hn::Lanes(df));
  if (first >= i0 && first + kSub <= i1 && kSub % N == 0) {
    for (int p = 0; p < kSub; p += N) {
      const auto s = hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(blk) + p));
      for (int r = 0; r < kRows; ++r) {
        hn::StoreU(hn::Mul(hn::LoadU(df, w + size_t(r) * w_stride + size_t(first - i0) + p), s), df, wb + r * kSub + p);
      }
    }
    return;
  }
  for (int t = 0; t < kSub; ++t) {
    const int64_t i = first + t;
    uint16_t hbits;
    std::memcpy(&hbits, blk + 2 * t, 2);
    const float s = f16_to_f32(hbits);
    for (int r = 0; r < kRows; ++r) wb[r * kSub + t] = i >= i0 && i < i1 ? w[size_t(r) * w_stride + size_t(i - i0)] * s : 0.0f;
  }
}

// For the lane kernels' value sums: calls run(run, nb, next_bytes, share) for each run of up to
// kBatch blocks (bb bytes apart) that tokens [i0, i1) touch, with W[bi][r][t] holding the run's
// weights times the tokens' scales (StageBlockWeights). The bytes after a run (the next run, or the
// start of the caller's next call: attention asks for about a run at a time) are to be asked for
// while the run is computed, a share with each of its `passes` passes over the blocks; a burst of
// a whole run's prefetches fills the line-fill buffers and stalls (q4 found the same). A prefetch
// past the end of the cache's memory never faults. The first run's first blocks are asked for here.
template <int kRows, int kSub, int kBatch, class Run>
HWY_INLINE void ForEachWeightedRun(const float* w, size_t w_stride, const uint8_t* blocks, size_t bb, int64_t i0,
                                   int64_t i1, int passes, float* HWY_RESTRICT W, const Run& run) {
  const int64_t end_block = (i1 + kSub - 1) / kSub;
  for (int64_t b0 = i0 / kSub; b0 < end_block; b0 += kBatch) {
    const int nb = int(std::min<int64_t>(kBatch, end_block - b0));
    const uint8_t* blk = blocks + size_t(b0) * bb;
    const size_t next_bytes = size_t(nb) * bb;
    const size_t share = (next_bytes + size_t(passes) - 1) / size_t(passes);
    if (b0 == i0 / kSub) PrefetchBytes(blk, std::min<size_t>(next_bytes, 4 * bb));  // nobody asked for the first
    for (int bi = 0; bi < nb; ++bi) {
      StageBlockWeights<kRows, kSub>(w, w_stride, blk + size_t(bi) * bb, (b0 + bi) * kSub, i0, i1,
                                     W + size_t(bi) * kRows * kSub);
    }
    run(blk, nb, next_bytes, share);
  }
}

#if HWY_TARGET == HWY_SCALAR
constexpr int kScoreTokens = 1;
#else
constexpr int kScoreTokens = 4;
#endif

// Sums of the lanes of a, b, c, e into out[0..3] (contiguous): an interleave tree leaves
// [sum a, sum b, sum c, sum e] in every 128-bit block, then the blocks are folded together.
// Floats or 32-bit integers (exact when no partial sum overflows).
template <class DF>
HWY_INLINE void SumOfLanes4(DF df, hn::Vec<DF> a, hn::Vec<DF> b, hn::Vec<DF> c, hn::Vec<DF> e,
                            hn::TFromD<DF>* HWY_RESTRICT out) {
#if HWY_TARGET == HWY_SCALAR
  out[0] = hn::GetLane(a);
  out[1] = hn::GetLane(b);
  out[2] = hn::GetLane(c);
  out[3] = hn::GetLane(e);
  (void)df;
#else
  const hn::Repartition<double, DF> dd;
  const auto ab = hn::Add(hn::InterleaveLower(df, a, b), hn::InterleaveUpper(df, a, b));
  const auto ce = hn::Add(hn::InterleaveLower(df, c, e), hn::InterleaveUpper(df, c, e));
  const auto lo = hn::BitCast(df, hn::InterleaveLower(dd, hn::BitCast(dd, ab), hn::BitCast(dd, ce)));
  const auto hi = hn::BitCast(df, hn::InterleaveUpper(dd, hn::BitCast(dd, ab), hn::BitCast(dd, ce)));
  const auto s = hn::Add(lo, hi);
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  const hn::Half<DF> d8;
  const hn::Half<decltype(d8)> d4;
  const auto s8 = hn::Add(hn::LowerHalf(d8, s), hn::UpperHalf(d8, s));
  hn::StoreU(hn::Add(hn::LowerHalf(d4, s8), hn::UpperHalf(d4, s8)), d4, out);
#elif HWY_TARGET == HWY_AVX2
  const hn::Half<DF> d4;
  hn::StoreU(hn::Add(hn::LowerHalf(d4, s), hn::UpperHalf(d4, s)), d4, out);
#else
  alignas(64) hn::TFromD<DF> buf[hn::MaxLanes(df)];
  hn::Store(s, df, buf);
  const size_t N = hn::Lanes(df);
  for (int k = 0; k < 4; ++k) {
    hn::TFromD<DF> t = buf[k];
    for (size_t blk = 4; blk < N; blk += 4) t += buf[blk + k];
    out[k] = t;
  }
#endif
#endif
}

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// AVX-512, 16 lanes of floats or 32-bit integers: one vector whose 128-bit block r holds the lane
// sums of v[r][0..3], out of one interleave tree (45 operations). Integer sums are exact.
template <class D>
HWY_INLINE hn::Vec<D> SumOfLanes16(D d, const hn::Vec<D> (&v)[4][4]) {
  using V = hn::Vec<D>;
  static_assert(sizeof(hn::TFromD<D>) == 4 && hn::MaxLanes(D()) == 16, "16 lanes of 32 bits");
  const hn::Repartition<hwy::MakeWide<hn::TFromD<D>>, D> dw;
  const hn::Repartition<float, D> df;
  V x[4];  // x[r]: block j holds row r's four sums over block j's lanes
  for (int r = 0; r < 4; ++r) {
    const V ab = hn::Add(hn::InterleaveLower(d, v[r][0], v[r][1]), hn::InterleaveUpper(d, v[r][0], v[r][1]));
    const V ce = hn::Add(hn::InterleaveLower(d, v[r][2], v[r][3]), hn::InterleaveUpper(d, v[r][2], v[r][3]));
    x[r] = hn::Add(hn::BitCast(d, hn::InterleaveLower(dw, hn::BitCast(dw, ab), hn::BitCast(dw, ce))),
                   hn::BitCast(d, hn::InterleaveUpper(dw, hn::BitCast(dw, ab), hn::BitCast(dw, ce))));
  }
  const auto z01 = hn::BitCast(df, hn::Add(hn::ConcatLowerLower(d, x[1], x[0]), hn::ConcatUpperUpper(d, x[1], x[0])));
  const auto z23 = hn::BitCast(df, hn::Add(hn::ConcatLowerLower(d, x[3], x[2]), hn::ConcatUpperUpper(d, x[3], x[2])));
  // Blocks (0, 2) and (1, 3) of each: a bit move, the same for floats and integers.
  using VFl = hn::Vec<decltype(df)>;
  return hn::Add(hn::BitCast(d, VFl{_mm512_shuffle_f32x4(z01.raw, z23.raw, 0x88)}),
                 hn::BitCast(d, VFl{_mm512_shuffle_f32x4(z01.raw, z23.raw, 0xDD)}));
}
#endif

// dst[r * stride + kk] += the sum of the lanes of A[r][kk][*], kk = 0..3. With four rows on
// AVX-512 the 16 sums come out of one interleave tree (SumOfLanes16) as one vector whose
// 128-bit block r holds row r's four channels.
template <int kRows, int kParts>
HWY_INLINE void AddLaneSums(hn::Vec<hn::ScalableTag<float>> (*A)[4][kParts], float* HWY_RESTRICT dst,
                             size_t stride) {
  using DF = hn::ScalableTag<float>;
  using VF = hn::Vec<DF>;
  const DF df;
  VF s[kRows][4];
  for (int r = 0; r < kRows; ++r) {
    for (int kk = 0; kk < 4; ++kk) {
      s[r][kk] = A[r][kk][0];
      for (int p = 1; p < kParts; ++p) s[r][kk] = hn::Add(s[r][kk], A[r][kk][p]);
    }
  }
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  if constexpr (kRows == 4) {
    alignas(64) float blocks[16];
    hn::Store(SumOfLanes16(df, s), df, blocks);
    const hn::CappedTag<float, 4> d4;
    for (int r = 0; r < 4; ++r) {
      float* o = dst + size_t(r) * stride;
      hn::StoreU(hn::Add(hn::LoadU(d4, o), hn::Load(d4, blocks + 4 * r)), d4, o);
    }
    return;
  }
#endif
  for (int r = 0; r < kRows; ++r) {
    alignas(16) float sums[4];
    SumOfLanes4(df, s[r][0], s[r][1], s[r][2], s[r][3], sums);
    for (int kk = 0; kk < 4; ++kk) dst[size_t(r) * stride + kk] += sums[kk];
  }
}


// dst[r * stride + kk] += the lane sum of A[r][kk][0], for kQuad = 4 (AddLaneSums) or 2
// channels: the lane codecs (tokens in the lanes) reduce their per-channel accumulators so.
template <int kRows, int kQuad>
HWY_INLINE void AddQuadLaneSums(hn::Vec<hn::ScalableTag<float>> (*A)[kQuad][1], float* HWY_RESTRICT dst, size_t stride) {
  static_assert(kQuad == 2 || kQuad == 4, "two or four channels");
  if constexpr (kQuad == 4) {
    AddLaneSums<kRows, 1>(A, dst, stride);
  } else {
    const hn::ScalableTag<float> df;
    alignas(16) float sums[4];
    int r = 0;
    for (; r + 2 <= kRows; r += 2) {
      SumOfLanes4(df, A[r][0][0], A[r][1][0], A[r + 1][0][0], A[r + 1][1][0], sums);
      for (int e = 0; e < 4; ++e) dst[size_t(r + e / 2) * stride + e % 2] += sums[e];
    }
    for (; r < kRows; ++r) {
      for (int kk = 0; kk < kQuad; ++kk) dst[size_t(r) * stride + kk] += hn::GetLane(hn::SumOfLanes(df, A[r][kk][0]));
    }
  }
}

template <class L, int kRows, int kTok>
HWY_INLINE void ScoresTile(const float* HWY_RESTRICT q, size_t q_stride, const uint8_t* HWY_RESTRICT tok,
                           size_t tok_bytes, int d, int full_groups, float* HWY_RESTRICT out,
                           size_t out_stride) {
  const hn::ScalableTag<float> df;
  const int N = int(hn::Lanes(df));
  using V = hn::Vec<decltype(df)>;
  V acc[kRows][kTok];
  for (int r = 0; r < kRows; ++r) {
    for (int u = 0; u < kTok; ++u) acc[r][u] = hn::Zero(df);
  }
  for (int u = 0; u < kTok; ++u) PrefetchBytes(tok + (kPrefetchTokens + u) * tok_bytes, tok_bytes);
  typename L::Scales sc[kTok];
  for (int u = 0; u < kTok; ++u) L::LoadScales(df, tok + u * tok_bytes, d, &sc[u]);
  for (int g = 0; g < full_groups; ++g) {
    for (int k = 0; k < kFusedGroup; k += N) {
      V x[kTok];
      for (int u = 0; u < kTok; ++u) x[u] = L::Load(df, tok + u * tok_bytes, d, g, k, sc[u]);
      for (int r = 0; r < kRows; ++r) {
        const V qv = hn::LoadU(df, q + r * q_stride + g * kFusedGroup + k);
        for (int u = 0; u < kTok; ++u) acc[r][u] = hn::MulAdd(qv, x[u], acc[r][u]);
      }
    }
  }
  for (int r = 0; r < kRows; ++r) {
    if constexpr (kTok == 4) {
      SumOfLanes4(df, acc[r][0], acc[r][1], acc[r][2], acc[r][3], out + r * out_stride);
    } else {
      for (int u = 0; u < kTok; ++u) out[r * out_stride + u] = hn::GetLane(hn::SumOfLanes(df, acc[r][u]));
    }
  }
}

// out[r * out_stride + t] = q_r . x_t for tokens t in [0, n) stored tok_bytes apart.
template <class L, int kRows>
HWY_INLINE void ScoresRows(const float* HWY_RESTRICT q, size_t q_stride, const uint8_t* HWY_RESTRICT tokens,
                           size_t tok_bytes, int64_t n, int d, float* HWY_RESTRICT out,
                           size_t out_stride) {
  const hn::ScalableTag<float> df;
  const int N = int(hn::Lanes(df));
  const int full = kFusedGroup % N == 0 ? d / kFusedGroup : 0;
  int64_t t = 0;
  for (; t + kScoreTokens <= n; t += kScoreTokens) {
    ScoresTile<L, kRows, kScoreTokens>(q, q_stride, tokens + size_t(t) * tok_bytes, tok_bytes, d, full,
                                       out + t, out_stride);
  }
  for (; t < n; ++t) {
    ScoresTile<L, kRows, 1>(q, q_stride, tokens + size_t(t) * tok_bytes, tok_bytes, d, full, out + t, out_stride);
  }
  if (full * kFusedGroup < d) {  // channels past the last full group
    for (t = 0; t < n; ++t) {
      const uint8_t* tok = tokens + size_t(t) * tok_bytes;
      for (int r = 0; r < kRows; ++r) {
        float s = 0;
        for (int j = full * kFusedGroup; j < d; ++j) s += q[r * q_stride + j] * L::Value(tok, d, j);
        out[r * out_stride + t] += s;
      }
    }
  }
}

template <class L>
void FusedScores(const float* q, int n_q, size_t q_stride, const uint8_t* tokens, size_t tok_bytes,
                 int64_t n, int d, float* out, size_t out_stride) {
  int r = 0;
  for (; r + 4 <= n_q; r += 4) {
    ScoresRows<L, 4>(q + r * q_stride, q_stride, tokens, tok_bytes, n, d, out + r * out_stride, out_stride);
  }
  for (; r < n_q; ++r) {
    ScoresRows<L, 1>(q + r * q_stride, q_stride, tokens, tok_bytes, n, d, out + r * out_stride, out_stride);
  }
}

// acc rows += w * x over tokens; kVecs vectors of channels starting at group g0 stay in registers.
template <class L, int kRows, int kVecs>
HWY_INLINE void AccumulateStrip(const float* HWY_RESTRICT w, size_t w_stride, const uint8_t* HWY_RESTRICT tokens,
                                size_t tok_bytes, int64_t n, int d, int c0, float* HWY_RESTRICT acc,
                                size_t acc_stride, bool prefetch) {
  const hn::ScalableTag<float> df;
  const int N = int(hn::Lanes(df));
  using V = hn::Vec<decltype(df)>;
  V a[kRows][kVecs];
  for (int r = 0; r < kRows; ++r) {
    for (int k = 0; k < kVecs; ++k) a[r][k] = hn::LoadU(df, acc + r * acc_stride + c0 + k * N);
  }
  for (int64_t t = 0; t < n; ++t) {
    const uint8_t* tok = tokens + size_t(t) * tok_bytes;
    if (prefetch) PrefetchBytes(tok + kPrefetchTokens * tok_bytes, tok_bytes);
    typename L::Scales sc;
    L::LoadScales(df, tok, d, &sc);
    V wv[kRows];
    for (int r = 0; r < kRows; ++r) wv[r] = hn::Set(df, w[r * w_stride + t]);
    for (int k = 0; k < kVecs; ++k) {
      const int c = c0 + k * N, g = c / kFusedGroup;
      const V x = L::Load(df, tok, d, g, c % kFusedGroup, sc);
      for (int r = 0; r < kRows; ++r) a[r][k] = hn::MulAdd(wv[r], x, a[r][k]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int k = 0; k < kVecs; ++k) hn::StoreU(a[r][k], df, acc + r * acc_stride + c0 + k * N);
  }
}

template <class L, int kRows>
HWY_INLINE void AccumulateRows(const float* HWY_RESTRICT w, size_t w_stride, const uint8_t* HWY_RESTRICT tokens,
                               size_t tok_bytes, int64_t n, int d, float* HWY_RESTRICT acc,
                               size_t acc_stride) {
  const hn::ScalableTag<float> df;
  const int N = int(hn::Lanes(df));
  // Strips of 64 channels (at most four vectors, two groups), then single vectors.
  constexpr int kStrip = HWY_TARGET == HWY_SCALAR ? 1 : 4;
  const int full = kFusedGroup % N == 0 ? d / kFusedGroup * kFusedGroup : 0;
  const int strip = kStrip * N <= 2 * kFusedGroup ? kStrip * N : N;
  int c = 0;
  bool first = true;
  if (strip == kStrip * N) {
    for (; c + strip <= full; c += strip, first = false) {
      AccumulateStrip<L, kRows, kStrip>(w, w_stride, tokens, tok_bytes, n, d, c, acc, acc_stride, first);
    }
  }
  for (; c + N <= full; c += N, first = false) {
    AccumulateStrip<L, kRows, 1>(w, w_stride, tokens, tok_bytes, n, d, c, acc, acc_stride, first);
  }
  for (; c < d; ++c) {
    for (int64_t t = 0; t < n; ++t) {
      const float x = L::Value(tokens + size_t(t) * tok_bytes, d, c);
      for (int r = 0; r < kRows; ++r) acc[r * acc_stride + c] += w[r * w_stride + t] * x;
    }
  }
}

template <class L>
void FusedAccumulate(const float* w, size_t w_stride, int n_q, const uint8_t* tokens, size_t tok_bytes,
                     int64_t n, int d, float* acc, size_t acc_stride) {
  int r = 0;
  for (; r + 4 <= n_q; r += 4) {
    AccumulateRows<L, 4>(w + r * w_stride, w_stride, tokens, tok_bytes, n, d, acc + r * acc_stride, acc_stride);
  }
  for (; r < n_q; ++r) {
    AccumulateRows<L, 1>(w + r * w_stride, w_stride, tokens, tok_bytes, n, d, acc + r * acc_stride, acc_stride);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#endif  // VQ_KV_FUSED_KERNELS_INL_H_
