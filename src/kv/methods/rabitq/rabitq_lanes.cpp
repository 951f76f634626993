// RaBitQ's one-bit popcount scores on the lane layout (see rabitq_lanes.h).
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL  // vpopcntd (AVX512_VPOPCNTDQ) where the CPU has it
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/methods/rabitq/rabitq_lanes.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include <algorithm>
#include <cstring>

#include "hwy/highway.h"
#include "src/kv/kernels/fused_kernels-inl.h"
#include "src/kv/methods/rabitq/rabitq_lanes.h"
#include "src/kv/methods/rabitq/rabitq_layout.h"

HWY_BEFORE_NAMESPACE();
namespace vq::kv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
using DU = hn::RebindToUnsigned<DF>;
using VU = hn::Vec<DU>;
using DI = hn::RebindToSigned<DF>;
constexpr int kLanes = int(hn::MaxLanes(DF()));
constexpr int kSub = 16;    // tokens per block
constexpr int kGroup = 32;  // channels per word
constexpr int kParts = kSub / kLanes;
constexpr int kPlanes = rabitq::kQueryBits;
constexpr size_t kScaleBytes = kSub * 2;
static_assert(kSub % kLanes == 0, "16 tokens must be whole vectors");
// Queries scored per pass over a block: their kPlanes counters each stay in registers beside the
// word (17 of AVX-512's 32 at four; 9 of AVX2's 16 at two).
constexpr int kRowsWide = kLanes >= 16 ? 4 : 2;

// One query's part of the state, as the kernel reads it: the words of its bit planes, group-major
// per plane ([plane][group]), and its three scalars.
struct SignQuery {
  const uint32_t* words;  // kPlanes * n_groups
  float delta, lower, code_sum;
};

#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
// Without vpopcntd a 32-bit popcount is a byte popcount (two table lookups) and two widening
// steps; the byte counts are summed first, over up to kByteGroups groups (at most 8 each, so 248
// fits a byte), and widened once per batch.
constexpr int kByteGroups = 31;
using DB = hn::Repartition<uint8_t, DU>;
using D16 = hn::Repartition<uint16_t, DU>;

// The sums of each 32-bit lane's four bytes.
HWY_INLINE VU WidenByteSums(hn::Vec<DB> b) {
  const DU du;
  const D16 d16;
  const auto h = hn::BitCast(d16, b);
  const auto s16 = hn::Add(hn::And(h, hn::Set(d16, uint16_t{0xFF})), hn::ShiftRight<8>(h));
  const VU w = hn::BitCast(du, s16);
  return hn::Add(hn::And(w, hn::Set(du, 0xFFFFu)), hn::ShiftRight<16>(w));
}
#endif

// The lanes' popcounts of x_b (ones) and of x_b AND each query plane (c), summed over the groups.
template <int kRows>
HWY_INLINE void CountBlockPart(const SignQuery* q, int n_groups, const uint32_t* HWY_RESTRICT words, int p,
                               VU& ones, VU (&c)[kRows][kPlanes]) {
  const DU du;
  ones = hn::Zero(du);
  for (int r = 0; r < kRows; ++r) {
    for (int j = 0; j < kPlanes; ++j) c[r][j] = hn::Zero(du);
  }
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
  const DB db;
  for (int g0 = 0; g0 < n_groups; g0 += kByteGroups) {
    const int g1 = std::min(n_groups, g0 + kByteGroups);
    auto ones8 = hn::Zero(db);
    hn::Vec<DB> c8[kRows][kPlanes];
    for (int r = 0; r < kRows; ++r) {
      for (int j = 0; j < kPlanes; ++j) c8[r][j] = hn::Zero(db);
    }
    for (int g = g0; g < g1; ++g) {
      const VU w = hn::LoadU(du, words + size_t(g) * kSub + p * kLanes);
      ones8 = hn::Add(ones8, hn::PopulationCount(hn::BitCast(db, w)));
      for (int r = 0; r < kRows; ++r) {
        for (int j = 0; j < kPlanes; ++j) {
          const VU qw = hn::Set(du, q[r].words[size_t(j) * n_groups + g]);
          c8[r][j] = hn::Add(c8[r][j], hn::PopulationCount(hn::BitCast(db, hn::And(w, qw))));
        }
      }
    }
    ones = hn::Add(ones, WidenByteSums(ones8));
    for (int r = 0; r < kRows; ++r) {
      for (int j = 0; j < kPlanes; ++j) c[r][j] = hn::Add(c[r][j], WidenByteSums(c8[r][j]));
    }
  }
#else
  for (int g = 0; g < n_groups; ++g) {
    const VU w = hn::LoadU(du, words + size_t(g) * kSub + p * kLanes);
    ones = hn::Add(ones, hn::PopulationCount(w));
    for (int r = 0; r < kRows; ++r) {
      for (int j = 0; j < kPlanes; ++j) {
        const VU qw = hn::Set(du, q[r].words[size_t(j) * n_groups + g]);
        c[r][j] = hn::Add(c[r][j], hn::PopulationCount(hn::And(w, qw)));
      }
    }
  }
#endif
}

template <int kRows>
HWY_INLINE void ScoreBlock(const SignQuery* q, int n_groups, int d, const uint8_t* HWY_RESTRICT blk,
                           float* HWY_RESTRICT out, size_t out_stride) {
  const DF df;
  const DI di;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const uint32_t* words = reinterpret_cast<const uint32_t*>(blk + kScaleBytes);
  const hwy::float16_t* factors = reinterpret_cast<const hwy::float16_t*>(blk);
  for (int p = 0; p < kParts; ++p) {
    VU ones;
    VU c[kRows][kPlanes];
    CountBlockPart<kRows>(q, n_groups, words, p, ones, c);
    const VF half_factor = hn::Mul(hn::Set(df, 0.5f), hn::PromoteTo(df, hn::LoadU(dh, factors + p * kLanes)));
    // 2 popcount(x_b) - d and 2 <x_b, q_u> - sum q_u are integers below 2^24: exact in float.
    const VF ones_term = hn::ConvertTo(df, hn::Sub(hn::ShiftLeft<1>(hn::BitCast(di, ones)), hn::Set(di, d)));
    for (int r = 0; r < kRows; ++r) {
      VU dot = c[r][kPlanes - 1];
      for (int j = kPlanes - 2; j >= 0; --j) dot = hn::Add(hn::ShiftLeft<1>(dot), c[r][j]);
      const VF dot_term = hn::ConvertTo(
          df, hn::Sub(hn::ShiftLeft<1>(hn::BitCast(di, dot)), hn::Set(di, int32_t(q[r].code_sum))));
      const VF two_yq = hn::Add(hn::Mul(hn::Set(df, q[r].delta), dot_term), hn::Mul(hn::Set(df, q[r].lower), ones_term));
      hn::StoreU(hn::Mul(half_factor, two_yq), df, out + size_t(r) * out_stride + p * kLanes);
    }
  }
}

template <int kRows>
void ScoreRows(const SignQuery* q, const uint8_t* blocks, size_t bb, int d, int64_t i0, int64_t i1, float* out,
               size_t out_stride) {
  const int n_groups = d / kGroup;
  ScoreLaneBlocks<kRows, kSub>(blocks, bb, i0, i1, out, out_stride, [&](const uint8_t* blk, float* dst, size_t stride) {
    ScoreBlock<kRows>(q, n_groups, d, blk, dst, stride);
  });
}

void RabitqSignScores(const float* states, int n_q, size_t qs, const uint8_t* blocks, size_t bb, int d, int64_t i0,
                      int64_t i1, float* out, size_t out_stride) {
  if (i1 <= i0 || n_q <= 0) return;
  const int n_groups = d / kGroup;
  // The planes' 64-bit words read as 32-bit ones (little-endian: word g holds channels 32g..),
  // once per call; a float of the state is one 32-bit word.
  constexpr int kMaxRows = 4;
  uint32_t words[kMaxRows][kPlanes * (4096 / kGroup)];
  SignQuery sq[kMaxRows];
  for (int r0 = 0; r0 < n_q; r0 += kMaxRows) {
    const int n = std::min(kMaxRows, n_q - r0);
    for (int r = 0; r < n; ++r) {
      const float* s = states + size_t(r0 + r) * qs;
      for (int j = 0; j < kPlanes; ++j) {
        std::memcpy(&words[r][size_t(j) * n_groups], s + rabitq::QueryState::plane_offset(d, j),
                    size_t(n_groups) * 4);
      }
      sq[r] = SignQuery{words[r], rabitq::QueryState::delta(s), rabitq::QueryState::lower(s),
                        rabitq::QueryState::code_sum(s)};
    }
    float* o = out + size_t(r0) * out_stride;
    int r = 0;
    for (; r + kRowsWide <= n; r += kRowsWide) {
      ScoreRows<kRowsWide>(sq + r, blocks, bb, d, i0, i1, o + size_t(r) * out_stride, out_stride);
    }
    for (; r < n; ++r) ScoreRows<1>(sq + r, blocks, bb, d, i0, i1, o + size_t(r) * out_stride, out_stride);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq::kv {
HWY_EXPORT(RabitqSignScores);

void rabitq_sign_scores_lanes(const float* states, int n_q, size_t qs, const uint8_t* blocks, size_t bb, int d,
                              int64_t i0, int64_t i1, float* out, size_t out_stride) {
  HWY_DYNAMIC_DISPATCH(RabitqSignScores)(states, n_q, qs, blocks, bb, d, i0, i1, out, out_stride);
}

}  // namespace vq::kv
#endif
