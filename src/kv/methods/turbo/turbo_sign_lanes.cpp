// One-bit TurboQuant value rows as per-channel token bit planes: layout, the table-lookup
// accumulation and the value codec (see turbo_sign_lanes.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/methods/turbo/turbo_sign_lanes.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include <algorithm>
#include <cstring>

#include "hwy/highway.h"
#include "src/core/fp16.h"
#include "src/kv/kernels/fused_kernels-inl.h"
#include "src/kv/methods/turbo/turbo_sign_lanes.h"

HWY_BEFORE_NAMESPACE();
namespace vq::kv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
using DU = hn::RebindToUnsigned<DF>;
using VU = hn::Vec<DU>;
using DI = hn::RebindToSigned<DF>;
using DU16 = hn::Rebind<uint16_t, DF>;
constexpr int kLanes = int(hn::MaxLanes(DF()));
constexpr int kSub = 16;      // tokens per block
constexpr int kNibbles = kSub / 4;
constexpr int kBatch = 16;    // blocks whose tables are built at once (a run of 256 tokens)
constexpr int kTable = 16;    // floats per table
constexpr size_t kScaleBytes = kSub * 2;

// t[idx & 15] per lane; t is 64-byte aligned. The bits of idx above the low four are ignored
// (vpermps reads four on AVX-512; on AVX2 bit 3 picks the upper half through the sign bit). The
// table stays in memory (L1): vpermps takes it as its memory operand, and keeping a block's tables
// in registers across a strip of channels instead measured 7% slower.
HWY_INLINE VF Lookup16(const float* HWY_RESTRICT t, VU idx) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  return VF{_mm512_permutexvar_ps(idx.raw, _mm512_load_ps(t))};
#elif HWY_TARGET == HWY_AVX2
  const __m256 lo = _mm256_permutevar8x32_ps(_mm256_load_ps(t), idx.raw);
  const __m256 hi = _mm256_permutevar8x32_ps(_mm256_load_ps(t + 8), idx.raw);
  return VF{_mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(idx.raw, 28)))};
#else
  const DI di;
  return hn::GatherIndex(DF(), t, hn::BitCast(di, hn::And(idx, hn::Set(DU(), 15u))));
#endif
}

// tab = sum_j w[j] * pattern[j] (16 floats each): entry i is sum_j w_j level(bit j of i), the
// same operations in the same order on every target with fused multiply-adds.
HWY_INLINE void BuildTable(const float* HWY_RESTRICT w4, const float* HWY_RESTRICT patterns, float* HWY_RESTRICT tab) {
  const DF df;
  for (int p = 0; p < kTable; p += kLanes) {
    VF t = hn::Mul(hn::Set(df, w4[0]), hn::Load(df, patterns + p));
    for (int j = 1; j < 4; ++j) t = hn::MulAdd(hn::Set(df, w4[j]), hn::Load(df, patterns + j * kTable + p), t);
    hn::Store(t, df, tab + p);
  }
}

// acc rows += the channels of vector cv over the run's nb blocks, from the run's tables
// T[block][nibble][row][16]. Two accumulator sets, alternating by nibble, halve the chains of
// dependent adds.
template <int kRows>
HWY_INLINE void AccumulateChannels(const uint8_t* HWY_RESTRICT run, size_t bb, int nb, int cv,
                                   const float* HWY_RESTRICT T, float* HWY_RESTRICT acc, size_t acc_stride) {
  const DF df;
  const DU du;
  const DU16 d16;
  VF A[2][kRows];
  for (int e = 0; e < 2; ++e) {
    for (int r = 0; r < kRows; ++r) A[e][r] = hn::Zero(df);
  }
  for (int bi = 0; bi < nb; ++bi) {
    const uint16_t* planes = reinterpret_cast<const uint16_t*>(run + size_t(bi) * bb + kScaleBytes);
    VU x = hn::PromoteTo(du, hn::LoadU(d16, planes + size_t(cv) * kLanes));
    const float* tb = T + size_t(bi) * kNibbles * kRows * kTable;
    for (int n = 0; n < kNibbles; ++n) {
      for (int r = 0; r < kRows; ++r) {
        A[n & 1][r] = hn::Add(A[n & 1][r], Lookup16(tb + (size_t(n) * kRows + r) * kTable, x));
      }
      x = hn::ShiftRight<4>(x);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    float* dst = acc + size_t(r) * acc_stride + size_t(cv) * kLanes;
    hn::StoreU(hn::Add(hn::LoadU(df, dst), hn::Add(A[0][r], A[1][r])), df, dst);
  }
}

template <int kRows>
void AccumulateRows(const float* w, size_t w_stride, const uint8_t* blocks, size_t bb, int d, int64_t i0, int64_t i1,
                    const float* patterns, float* acc, size_t acc_stride) {
  alignas(64) float T[kBatch * kNibbles * kRows * kTable];
  alignas(64) float W[kRows * kSub];
  const int n_cv = d / kLanes;
  const int64_t end_block = (i1 + kSub - 1) / kSub;
  for (int64_t b0 = i0 / kSub; b0 < end_block; b0 += kBatch) {
    const int nb = int(std::min<int64_t>(kBatch, end_block - b0));
    const uint8_t* run = blocks + size_t(b0) * bb;
    const size_t run_bytes = size_t(nb) * bb;
    if (b0 == i0 / kSub) PrefetchBytes(run, std::min<size_t>(run_bytes, 4 * bb));  // nobody asked for the first
    for (int bi = 0; bi < nb; ++bi) {
      // W[r][t] = w_r(token) * scale(token), zero outside [i0, i1)
      StageBlockWeights<kRows, kSub>(w, w_stride, run + size_t(bi) * bb, (b0 + bi) * kSub, i0, i1, W);
      for (int n = 0; n < kNibbles; ++n) {
        for (int r = 0; r < kRows; ++r) {
          BuildTable(W + r * kSub + 4 * n, patterns, T + ((size_t(bi) * kNibbles + n) * kRows + r) * kTable);
        }
      }
    }
    // The next run (or the caller's next call: attention asks for about a run at a time) is
    // asked for a share with each pass over the channels (see SpreadPrefetch).
    SpreadPrefetch next(run + run_bytes, run_bytes, size_t(n_cv));
    for (int cv = 0; cv < n_cv; ++cv) {
      next.Step();
      AccumulateChannels<kRows>(run, bb, nb, cv, T, acc, acc_stride);
    }
  }
}

void SignLanesAccumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, size_t bb, int d,
                         int64_t i0, int64_t i1, const float* patterns, float* acc, size_t acc_stride) {
  if (i1 <= i0) return;
  int r = 0;
  for (; r + 4 <= n_q; r += 4) {
    AccumulateRows<4>(w + size_t(r) * w_stride, w_stride, blocks, bb, d, i0, i1, patterns, acc + size_t(r) * acc_stride,
                      acc_stride);
  }
  for (; r < n_q; ++r) {
    AccumulateRows<1>(w + size_t(r) * w_stride, w_stride, blocks, bb, d, i0, i1, patterns, acc + size_t(r) * acc_stride,
                      acc_stride);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq::kv::sign_lanes {
HWY_EXPORT(SignLanesAccumulate);

namespace {
constexpr int kSub = 16;
constexpr size_t kScaleBytes = kSub * 2;
}  // namespace

bool apply(int d, int bits) { return bits == 1 && d % 32 == 0 && d > 0 && d <= 4096; }

size_t block_bytes(int d) { return kScaleBytes + size_t(2) * d; }  // = 16 rows of 2 + d / 8 bytes

void put(const uint8_t* codes, uint16_t scale, int t, int d, uint8_t* block) {
  std::memcpy(block + 2 * t, &scale, 2);
  for (int c = 0; c < d; ++c) {
    uint16_t plane;
    std::memcpy(&plane, block + kScaleBytes + 2 * size_t(c), 2);
    plane = uint16_t((plane & ~(1u << t)) | (uint32_t(codes[c] & 1) << t));
    std::memcpy(block + kScaleBytes + 2 * size_t(c), &plane, 2);
  }
}

int code(const uint8_t* block, int t, int c) {
  uint16_t plane;
  std::memcpy(&plane, block + kScaleBytes + 2 * size_t(c), 2);
  return (plane >> t) & 1;
}

void make_patterns(float level0, float level1, float* patterns) {
  for (int j = 0; j < 4; ++j) {
    for (int i = 0; i < 16; ++i) patterns[j * 16 + i] = (i >> j) & 1 ? level1 : level0;
  }
}

void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, size_t bb, int d, int64_t i0,
                int64_t i1, const float* patterns, float* acc, size_t acc_stride) {
  HWY_DYNAMIC_DISPATCH(SignLanesAccumulate)(w, w_stride, n_q, blocks, bb, d, i0, i1, patterns, acc, acc_stride);
}

}  // namespace vq::kv::sign_lanes
#endif
