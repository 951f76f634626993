// TurboQuant's lane kernels, compiled per SIMD target: scores and accumulation over the layout of
// turbo_lanes.h (the codecs that write it are in turbo_lanes.cpp).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/methods/turbo/turbo_lane_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "hwy/highway.h"
#include "src/core/fp16.h"
#include "src/kv/kernels/fused_kernels-inl.h"
#include "src/kv/methods/turbo/lane_codes-inl.h"
#include "src/kv/methods/turbo/lane_words.h"
#include "src/kv/methods/turbo/turbo_lane_kernels.h"
#include "src/kv/methods/turbo/turbo_sign_lanes.h"

HWY_BEFORE_NAMESPACE();
namespace vq::kv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using lane_codes::DF;
using lane_codes::DU;
using lane_codes::kLanes;
using lane_codes::Levels;
using lane_codes::LoadLevels;
using lane_codes::Lookup;
using lane_codes::CodeBits;
using lane_codes::LoadTailWords;
using lane_codes::ForRowPasses;
using lane_codes::WithBits;
using lane_codes::WithTailChannels;
using VF = hn::Vec<DF>;
using VU = hn::Vec<DU>;
constexpr int kSub = 16;    // tokens per block
constexpr int kGroup = 32;  // channels per group of words
constexpr int kParts = kSub / kLanes;
constexpr size_t kScaleBytes = kSub * 2;
static_assert(kSub % kLanes == 0, "16 tokens must be whole vectors");

// ---- scores -------------------------------------------------------------------------------

// Two accumulator sets, alternating by channel, so that the FMA latency never limits.
constexpr int kSets = 2;

// A vector of 16 tokens' scores: written, or (kAdd) added to what is there, as out + v.
template <bool kAdd>
HWY_INLINE void StoreScores(VF v, float* HWY_RESTRICT out) {
  const DF df;
  if constexpr (kAdd) v = hn::Add(hn::LoadU(df, out), v);
  hn::StoreU(v, df, out);
}

template <int kBits, int kRows, int k>
HWY_INLINE void ScoreChannel(const Levels& L, const VU* w, const float* HWY_RESTRICT qc, VF (*acc)[kRows]) {
  const VF v = Lookup<kBits>(L, CodeBits<kBits, k>(w));
  for (int r = 0; r < kRows; ++r) acc[k % kSets][r] = hn::MulAdd(hn::Set(DF(), qc[r * kGroup + k]), v, acc[k % kSets][r]);
}

template <int kBits, int kRows, size_t... K>
HWY_INLINE void ScoreGroup(const Levels& L, const VU* w, const float* qc, VF (*acc)[kRows], std::index_sequence<K...>) {
  (ScoreChannel<kBits, kRows, int(K)>(L, w, qc, acc), ...);
}

// out[r * out_stride + t] = scale_t * sum_c q_r[c] level(code_tc) for the 16 tokens of a block.
// qg holds the rows chunk-major ([groups][kRows][32]), so every query value a group needs is a
// fixed offset from one pointer. The vectors of 16 tokens are taken one at a time (two on AVX2):
// the accumulators of both would not fit its 16 registers beside the words and tables. kTail > 0:
// after the n_groups whole groups, the tail's first kTail channels (lane_words.h; tb bytes a
// token), whose query values past the tail are zero in qg. kAdd: the scores are added to out.
template <int kBits, int kRows, int kTail, bool kAdd>
HWY_INLINE void ScoreBlock(const Levels& L, const float* HWY_RESTRICT qg, const uint8_t* HWY_RESTRICT blk, int n_groups,
                           int tb, float* HWY_RESTRICT out, size_t out_stride) {
  const DF df;
  const DU du;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const uint32_t* words = reinterpret_cast<const uint32_t*>(blk + kScaleBytes);
  const hwy::float16_t* scales = reinterpret_cast<const hwy::float16_t*>(blk);
  for (int p = 0; p < kParts; ++p) {
    VF acc[kSets][kRows];
    for (int e = 0; e < kSets; ++e) {
      for (int r = 0; r < kRows; ++r) acc[e][r] = hn::Zero(df);
    }
    for (int g = 0; g < n_groups; ++g) {
      VU w[kBits];
      for (int m = 0; m < kBits; ++m) w[m] = hn::LoadU(du, words + size_t(g * kBits + m) * kSub + p * kLanes);
      ScoreGroup<kBits, kRows>(L, w, qg + size_t(g) * kRows * kGroup, acc, std::make_index_sequence<kGroup>());
    }
    if constexpr (kTail > 0) {
      VU w[kBits];
      LoadTailWords<kBits>(reinterpret_cast<const uint8_t*>(words + size_t(n_groups) * kBits * kSub), tb, p * kLanes, w);
      ScoreGroup<kBits, kRows>(L, w, qg + size_t(n_groups) * kRows * kGroup, acc, std::make_index_sequence<kTail>());
    }
    const VF s = hn::PromoteTo(df, hn::LoadU(dh, scales + p * kLanes));
    for (int r = 0; r < kRows; ++r) {
      StoreScores<kAdd>(hn::Mul(hn::Add(acc[0][r], acc[1][r]), s), out + size_t(r) * out_stride + p * kLanes);
    }
  }
}

template <int kBits, int kRows, bool kAdd>
void ScoreRows(const float* q, size_t qs, const uint8_t* blocks, size_t bb, int d, int64_t i0, int64_t i1,
               const float* table16, float* out, size_t out_stride) {
  const int n_groups = d / kGroup, tail = d % kGroup, tb = LaneWords::tail_bytes(d, kBits);
  alignas(64) float qg[kRows * 4096];
  for (int g = 0; g * kGroup < d; ++g) {
    const int n = std::min(kGroup, d - g * kGroup);
    for (int r = 0; r < kRows; ++r) {
      float* dst = qg + (size_t(g) * kRows + r) * kGroup;
      std::memcpy(dst, q + size_t(r) * qs + size_t(g) * kGroup, size_t(n) * 4);
      std::fill(dst + n, dst + kGroup, 0.0f);
    }
  }
  const Levels L = LoadLevels(table16);
  // The block callback's `add` is empty (kAdd false) or ScoreLaneBlocks' std::true_type (add to
  // out) or std::false_type (write its buffer); the fold gives the kernel's kAdd.
  const auto run = [&](auto kt) {
    ScoreLaneBlocks<kRows, kSub, kAdd>(blocks, bb, i0, i1, out, out_stride,
                                       [&](const uint8_t* blk, float* dst, size_t stride, auto... add) {
                                         ScoreBlock<kBits, kRows, kt(), (false || ... || add())>(L, qg, blk, n_groups,
                                                                                                 tb, dst, stride);
                                       });
  };
  if (tail == 0) {
    run(std::integral_constant<int, 0>());
  } else {
    WithTailChannels(tail, run);
  }
}

template <int kBits, bool kAdd>
void ScoresT(const float* q, int n_q, size_t qs, const uint8_t* blocks, size_t bb, int d, int64_t i0, int64_t i1,
             const float* table16, float* out, size_t out_stride) {
  ForRowPasses(n_q, [&](auto rows, int r) {
    ScoreRows<kBits, rows(), kAdd>(q + size_t(r) * qs, qs, blocks, bb, d, i0, i1, table16,
                                   out + size_t(r) * out_stride, out_stride);
  });
}

void TurboLanesScores(int bits, bool add, const float* q, int n_q, size_t qs, const uint8_t* blocks, size_t bb, int d,
                      int64_t i0, int64_t i1, const float* table16, float* out, size_t out_stride) {
  if (i1 <= i0) return;
  WithBits(bits, [&](auto b) {
    if (add) {
      ScoresT<b(), true>(q, n_q, qs, blocks, bb, d, i0, i1, table16, out, out_stride);
    } else {
      ScoresT<b(), false>(q, n_q, qs, blocks, bb, d, i0, i1, table16, out, out_stride);
    }
  });
}

// ---- scores through nibble tables (1 bit) -------------------------------------------------

// At 1 bit a word's nibble n (bits 4n..4n+3) holds the codes of 4 channels, so one register
// table lookup can stand for all of them: the query state holds, per nibble, the 16 partial dot
// products of its channels (turbo_lanes.h), and a token's score is one lookup and one add per 4
// channels instead of one lookup per channel and one multiply-add per channel and query: 72
// instead of 192 operations per word of 16 tokens for four queries. The same scheme at 2 bits (2
// channels a nibble) measured no faster than the per-channel kernel: its lookups are per query
// there (4 per 2 channels against 1 per channel), and on AVX-512 lookups issue on one port.
// Each nibble's table is read with the level
// lookup of 4-bit codes (Lookup<4>), loaded from memory.

template <int kRows, int n>
HWY_INLINE void TableNibble(VU w, const float* const* tabs, size_t nib, VF (*acc)[kRows]) {
  const VU idx = n == 0 ? w : hn::ShiftRight<4 * n>(w);
  for (int r = 0; r < kRows; ++r) acc[n % kSets][r] = hn::Add(acc[n % kSets][r], Lookup<4>(LoadLevels(tabs[r] + (nib + n) * 16), idx));
}

template <int kRows, size_t... N>
HWY_INLINE void TableWord(VU w, const float* const* tabs, size_t nib, VF (*acc)[kRows], std::index_sequence<N...>) {
  (TableNibble<kRows, int(N)>(w, tabs, nib, acc), ...);
}

// out[r * out_stride + t] = scale_t * sum over nibbles of tabs[r][nibble][its code bits]; nibble
// 8m + n is bits 4n.. of the block's word m (word g holds group g's 32 channels).
template <int kRows, bool kAdd>
HWY_INLINE void TableScoreBlock(const float* const* tabs, int n_words, const uint8_t* HWY_RESTRICT blk,
                                float* HWY_RESTRICT out, size_t out_stride) {
  const DF df;
  const DU du;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const uint32_t* words = reinterpret_cast<const uint32_t*>(blk + kScaleBytes);
  const hwy::float16_t* scales = reinterpret_cast<const hwy::float16_t*>(blk);
  for (int p = 0; p < kParts; ++p) {
    VF acc[kSets][kRows];
    for (int e = 0; e < kSets; ++e) {
      for (int r = 0; r < kRows; ++r) acc[e][r] = hn::Zero(df);
    }
    for (int m = 0; m < n_words; ++m) {
      const VU w = hn::LoadU(du, words + size_t(m) * kSub + p * kLanes);
      TableWord<kRows>(w, tabs, size_t(m) * 8, acc, std::make_index_sequence<8>());
    }
    const VF s = hn::PromoteTo(df, hn::LoadU(dh, scales + p * kLanes));
    for (int r = 0; r < kRows; ++r) {
      StoreScores<kAdd>(hn::Mul(hn::Add(acc[0][r], acc[1][r]), s), out + size_t(r) * out_stride + p * kLanes);
    }
  }
}

template <int kRows, bool kAdd>
void TableScoreRows(const float* states, size_t qs, const uint8_t* blocks, size_t bb, int n_words, int64_t i0,
                    int64_t i1, float* out, size_t out_stride) {
  const float* tabs[kRows];
  for (int r = 0; r < kRows; ++r) tabs[r] = states + size_t(r) * qs;
  ScoreLaneBlocks<kRows, kSub, kAdd>(blocks, bb, i0, i1, out, out_stride,
                                     [&](const uint8_t* blk, float* dst, size_t stride, auto... add) {
                                       TableScoreBlock<kRows, (false || ... || add())>(tabs, n_words, blk, dst, stride);
                                     });
}

template <bool kAdd>
void TableScoresT(const float* states, int n_q, size_t qs, const uint8_t* blocks, size_t bb, int n_words, int64_t i0,
                  int64_t i1, float* out, size_t out_stride) {
  ForRowPasses(n_q, [&](auto rows, int r) {
    TableScoreRows<rows(), kAdd>(states + size_t(r) * qs, qs, blocks, bb, n_words, i0, i1,
                                 out + size_t(r) * out_stride, out_stride);
  });
}

void TurboLanesTableScores(bool add, const float* states, int n_q, size_t qs, const uint8_t* blocks, size_t bb,
                           int n_words, int64_t i0, int64_t i1, float* out, size_t out_stride) {
  if (i1 <= i0) return;
  if (add) {
    TableScoresT<true>(states, n_q, qs, blocks, bb, n_words, i0, i1, out, out_stride);
  } else {
    TableScoresT<false>(states, n_q, qs, blocks, bb, n_words, i0, i1, out, out_stride);
  }
}

// ---- values: accumulation -----------------------------------------------------------------

constexpr int kBatch = 16;  // blocks whose weights are staged at once (a run of 256 tokens)
// Channels accumulated together: kRows x kQuad accumulators stay in registers (16 of AVX-512's
// 32; 8 of AVX2's 16). A block's vectors of 8 tokens add into the same accumulator: every lane
// is summed at the end anyway.
constexpr int kQuad = kParts == 1 ? 4 : 2;

template <int kBits, int kRows, int h, size_t... KK>
HWY_INLINE void AccumulateQuad(const Levels& L, const VU* w, const float* HWY_RESTRICT wb, VF (*A)[kQuad][1],
                               std::index_sequence<KK...>) {
  const DF df;
  const auto one = [&](auto kk_tag) {
    constexpr int kk = decltype(kk_tag)::value;
    const VF v = Lookup<kBits>(L, CodeBits<kBits, kQuad * h + kk>(w));
    for (int r = 0; r < kRows; ++r) A[r][kk][0] = hn::MulAdd(hn::Load(df, wb + r * kSub), v, A[r][kk][0]);
  };
  (one(std::integral_constant<int, int(KK)>()), ...);
}

// acc rows (rotated channels of group g, kQuad of them from kQuad h; accg is the group's first)
// += the run's W * levels. Block bi's words of the group start at words0 + bi * wstride bytes.
template <int kBits, int kRows, int h>
HWY_INLINE void AccumulateQuadRun(const Levels& L, const uint8_t* HWY_RESTRICT words0, size_t wstride, int nb, int g,
                                  const float* HWY_RESTRICT W, float* HWY_RESTRICT accg, size_t acc_stride,
                                  const uint8_t* next, size_t share, size_t next_bytes) {
  // This pass's share of the next run's bytes (see AccumulateRows).
  const size_t p0 = size_t(g * (kGroup / kQuad) + h) * share;
  if (p0 < next_bytes) PrefetchBytes(next + p0, std::min(share, next_bytes - p0));
  const DF df;
  const DU du;
  VF A[kRows][kQuad][1];
  for (int r = 0; r < kRows; ++r) {
    for (int kk = 0; kk < kQuad; ++kk) A[r][kk][0] = hn::Zero(df);
  }
  for (int bi = 0; bi < nb; ++bi) {
    const uint32_t* words = reinterpret_cast<const uint32_t*>(words0 + size_t(bi) * wstride);
    for (int p = 0; p < kParts; ++p) {
      VU w[kBits];  // the words these channels do not touch are never loaded (dead loads)
      for (int m = 0; m < kBits; ++m) w[m] = hn::LoadU(du, words + m * kSub + p * kLanes);
      AccumulateQuad<kBits, kRows, h>(L, w, W + size_t(bi) * kRows * kSub + p * kLanes, A, std::make_index_sequence<kQuad>());
    }
  }
  AddQuadLaneSums<kRows, kQuad>(A, accg + kQuad * h, acc_stride);
}

template <int kBits, int kRows, size_t... H>
HWY_INLINE void AccumulateGroup(const Levels& L, const uint8_t* words0, size_t wstride, int nb, int g, const float* W,
                                float* accg, size_t acc_stride, const uint8_t* next, size_t share, size_t next_bytes,
                                std::index_sequence<H...>) {
  (AccumulateQuadRun<kBits, kRows, int(H)>(L, words0, wstride, nb, g, W, accg, acc_stride, next, share, next_bytes),
   ...);
}

template <int kBits, int kRows>
void AccumulateRows(const float* w, size_t w_stride, const uint8_t* blocks, size_t bb, int d, int64_t i0, int64_t i1,
                    const float* table16, float* acc, size_t acc_stride) {
  const Levels L = LoadLevels(table16);
  const DU du;
  const int n_groups = d / kGroup, tail = d % kGroup, tb = LaneWords::tail_bytes(d, kBits);
  const int passes = n_groups * (kGroup / kQuad) + (tail + 7) / 8 * 8 / kQuad;  // the tail's: WithTailChannels
  alignas(64) float W[kBatch * kRows * kSub];
  ForEachWeightedRun<kRows, kSub, kBatch>(w, w_stride, blocks, bb, i0, i1, passes, W, [&](const uint8_t* run, int nb,
                                                                                          size_t next_bytes,
                                                                                          size_t share) {
    for (int g = 0; g < n_groups; ++g) {
      AccumulateGroup<kBits, kRows>(L, run + kScaleBytes + size_t(g) * kBits * kSub * 4, bb, nb, g, W,
                                    acc + size_t(g) * kGroup, acc_stride, run + next_bytes, share, next_bytes,
                                    std::make_index_sequence<kGroup / kQuad>());
    }
    if (tail > 0) {
      // The tail's words are built from its byte rows once per run (every pass over its channels
      // reads them); its channels rounded up to 8 go to a scratch row of 32 a query, and the
      // first `tail` are added to acc.
      alignas(64) uint32_t TW[kBatch * kBits * kSub];
      const size_t tail_at = kScaleBytes + LaneWords::tail_offset(d, kBits);
      for (int bi = 0; bi < nb; ++bi) {
        for (int p = 0; p < kParts; ++p) {
          VU w[kBits];
          LoadTailWords<kBits>(run + size_t(bi) * bb + tail_at, tb, p * kLanes, w);
          for (int m = 0; m < kBits; ++m) hn::Store(w[m], du, TW + (size_t(bi) * kBits + m) * kSub + p * kLanes);
        }
      }
      alignas(64) float T[kRows * kGroup] = {};
      WithTailChannels(tail, [&](auto kt) {
        AccumulateGroup<kBits, kRows>(L, reinterpret_cast<const uint8_t*>(TW), size_t(kBits) * kSub * 4, nb, n_groups,
                                      W, T, size_t(kGroup), run + next_bytes, share, next_bytes,
                                      std::make_index_sequence<kt() / kQuad>());
      });
      for (int r = 0; r < kRows; ++r) {
        float* a = acc + size_t(r) * acc_stride + size_t(n_groups) * kGroup;
        for (int c = 0; c < tail; ++c) a[c] += T[r * kGroup + c];
      }
    }
  });
}

template <int kBits>
void AccumulateT(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, size_t bb, int d, int64_t i0,
                 int64_t i1, const float* table16, float* acc, size_t acc_stride) {
  ForRowPasses(n_q, [&](auto rows, int r) {
    AccumulateRows<kBits, rows()>(w + size_t(r) * w_stride, w_stride, blocks, bb, d, i0, i1, table16,
                                  acc + size_t(r) * acc_stride, acc_stride);
  });
}

void TurboLanesAccumulate(int bits, const float* w, size_t w_stride, int n_q, const uint8_t* blocks, size_t bb, int d,
                          int64_t i0, int64_t i1, const float* table16, float* acc, size_t acc_stride) {
  if (i1 <= i0) return;
  WithBits(bits, [&](auto b) { AccumulateT<b()>(w, w_stride, n_q, blocks, bb, d, i0, i1, table16, acc, acc_stride); });
}

// TurboLanePart::prepare_query's per-row work, a vector at a time with its operations (separate
// products and sums, in its order), so every target gives its bits.

// tab[16 k + i] = ((0 + q[4k] l(i, 0)) + q[4k + 1] l(i, 1)) + ... with l(i, j) = table16[bit j of i].
void TurboNibbleTables(const float* HWY_RESTRICT q, int d, const float* HWY_RESTRICT table16,
                       float* HWY_RESTRICT tab) {
  const hn::ScalableTag<float> df;
  const int N = int(hn::Lanes(df));
  alignas(64) float levels[4][16];
  for (int j = 0; j < 4; ++j) {
    for (int i = 0; i < 16; ++i) levels[j][i] = table16[(i >> j) & 1];
  }
  for (int h = 0; h < 16; h += N) {
    const auto l0 = hn::Load(df, levels[0] + h), l1 = hn::Load(df, levels[1] + h);
    const auto l2 = hn::Load(df, levels[2] + h), l3 = hn::Load(df, levels[3] + h);
    for (int k = 0; k < d / 4; ++k) {
      const float* x = q + 4 * k;
      auto t = hn::Add(hn::Zero(df), hn::Mul(hn::Set(df, x[0]), l0));
      t = hn::Add(t, hn::Mul(hn::Set(df, x[1]), l1));
      t = hn::Add(t, hn::Mul(hn::Set(df, x[2]), l2));
      t = hn::Add(t, hn::Mul(hn::Set(df, x[3]), l3));
      hn::StoreU(t, df, tab + 16 * size_t(k) + size_t(h));
    }
  }
}

// max |q[c]| over c < d, or NaN when a value is not finite (max is exact in any order).
float TurboAbsMaxIfFinite(const float* HWY_RESTRICT q, int d) {
  const hn::ScalableTag<float> df;
  const int N = int(hn::Lanes(df));
  auto top = hn::Zero(df);
  auto finite = hn::Eq(top, top);
  int c = 0;
  for (; c + N <= d; c += N) {
    const auto v = hn::LoadU(df, q + c);
    finite = hn::And(finite, hn::IsFinite(v));
    top = hn::Max(top, hn::Abs(v));
  }
  float t = hn::GetLane(hn::MaxOfLanes(df, top));
  bool ok = hn::AllTrue(df, finite);
  for (; c < d; ++c) {
    ok = ok && std::isfinite(q[c]);
    t = std::max(t, std::fabs(q[c]));
  }
  return ok ? t : std::numeric_limits<float>::quiet_NaN();
}

// out[c] = int16(lrint(q[c] * scale)) (rounded to nearest, ties to even), |q[c] * scale| < 2^15.
void TurboToFixed16(const float* HWY_RESTRICT q, int d, float scale, int16_t* HWY_RESTRICT out) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<int16_t, decltype(df)> d16;
  const int N = int(hn::Lanes(df));
  const auto s = hn::Set(df, scale);
  int c = 0;
  for (; c + N <= d; c += N) {
    hn::StoreU(hn::DemoteTo(d16, hn::NearestInt(hn::Mul(hn::LoadU(df, q + c), s))), d16, out + c);
  }
  for (; c < d; ++c) out[c] = int16_t(std::lrint(q[c] * scale));
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq::kv::turbo_lanes {
HWY_EXPORT(TurboLanesScores);
HWY_EXPORT(TurboLanesTableScores);
HWY_EXPORT(TurboLanesAccumulate);
HWY_EXPORT(TurboNibbleTables);
HWY_EXPORT(TurboAbsMaxIfFinite);
HWY_EXPORT(TurboToFixed16);

void nibble_tables(const float* q, int d, const float* table16, float* tab) {
  HWY_DYNAMIC_DISPATCH(TurboNibbleTables)(q, d, table16, tab);
}

float abs_max_if_finite(const float* q, int d) { return HWY_DYNAMIC_DISPATCH(TurboAbsMaxIfFinite)(q, d); }

void to_fixed16(const float* q, int d, float scale, int16_t* out) {
  HWY_DYNAMIC_DISPATCH(TurboToFixed16)(q, d, scale, out);
}

void scores(int bits, bool add, const float* q, int n_q, size_t qs, const uint8_t* blocks, size_t bb, int d,
            int64_t i0, int64_t i1, const float* table16, float* out, size_t out_stride) {
  HWY_DYNAMIC_DISPATCH(TurboLanesScores)(bits, add, q, n_q, qs, blocks, bb, d, i0, i1, table16, out, out_stride);
}

void table_scores(bool add, const float* states, int n_q, size_t qs, const uint8_t* blocks, size_t bb, int n_words,
                  int64_t i0, int64_t i1, float* out, size_t out_stride) {
  HWY_DYNAMIC_DISPATCH(TurboLanesTableScores)(add, states, n_q, qs, blocks, bb, n_words, i0, i1, out, out_stride);
}

void accumulate(int bits, const float* w, size_t w_stride, int n_q, const uint8_t* blocks, size_t bb, int d,
                int64_t i0, int64_t i1, const float* table16, float* acc, size_t acc_stride) {
  HWY_DYNAMIC_DISPATCH(TurboLanesAccumulate)(bits, w, w_stride, n_q, blocks, bb, d, i0, i1, table16, acc, acc_stride);
}

}  // namespace vq::kv::turbo_lanes
#endif
