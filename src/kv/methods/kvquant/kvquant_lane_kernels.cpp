// KVQuant's key kernel, compiled per SIMD target (kvquant_lanes.cpp describes the layout and why).
// Per pair of RoPE channels and vector of 16 tokens: two code lookups in the channels' own tables
// of their levels in their ranges, the rotation by each token's own angle (two multiplies, two
// multiply-adds, the angles loaded from the table's row for the pair), then two multiply-adds
// per query row. Nothing is horizontally summed: tokens are in the lanes.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/methods/kvquant/kvquant_lane_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "hwy/highway.h"
#include "src/kv/kernels/fused_kernels-inl.h"
#include "src/kv/methods/kvquant/kvquant_lane_kernels.h"
#include "src/kv/methods/turbo/lane_codes-inl.h"

HWY_BEFORE_NAMESPACE();
namespace vq::kv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using lane_codes::CodeBits;
using lane_codes::DF;
using lane_codes::DU;
using lane_codes::kLanes;
using lane_codes::Levels;
using lane_codes::LoadLevels;
using lane_codes::Lookup;
using lane_codes::WithBits;
using VF = hn::Vec<DF>;
using VU = hn::Vec<DU>;
using kvquant_lanes::LaneValues;
using kvquant_lanes::RopeKeys;
using DI = hn::RebindToSigned<DF>;
using VI = hn::Vec<DI>;

constexpr int kSub = 16;    // tokens per block
constexpr int kGroup = 32;  // channels per group of words
constexpr int kParts = kSub / kLanes;
constexpr int kRows = 4;
constexpr int kSets = 2;  // accumulator sets, alternating by pair, so that the FMA latency never limits

// Pair-major operands, so that each array needs one base pointer per group of pairs and every
// pair's operands sit at fixed offsets from it: the two channels' level tables (32 floats), the
// angles (kCols cos then kCols sin) and the four query rows' two components (8 floats).
constexpr size_t kCols = kvquant_lanes::kAngleColumns;
constexpr size_t kPairTable = 32, kPairAngles = 2 * kCols, kPairQuery = 2 * kRows;

// The block's scores for pair K of a group: codes kA of words wa and kB of words wb; T, C and Q
// point at the group's first pair.
template <int kBits, int kA, int kB, int kSet, int K>
HWY_INLINE void ScorePair(const VU* wa, const VU* wb, const float* HWY_RESTRICT T, const float* HWY_RESTRICT C,
                          const float* HWY_RESTRICT Q, VF (*acc)[kRows]) {
  const DF df;
  const VF ka = Lookup<kBits>(LoadLevels(T + K * kPairTable), CodeBits<kBits, kA>(wa));
  const VF kb = Lookup<kBits>(LoadLevels(T + K * kPairTable + 16), CodeBits<kBits, kB>(wb));
  const VF cs = hn::LoadU(df, C + K * kPairAngles);
  const VF sn = hn::LoadU(df, C + K * kPairAngles + kCols);
  const VF ra = hn::MulSub(ka, cs, hn::Mul(kb, sn));  // x_a cos - x_b sin
  const VF rb = hn::MulAdd(ka, sn, hn::Mul(kb, cs));  // x_a sin + x_b cos
  VF* A = acc[kSet];
  const float* q = Q + K * kPairQuery;
  for (int r = 0; r < kRows; ++r) A[r] = hn::MulAdd(hn::Set(df, q[2 * r]), ra, hn::MulAdd(hn::Set(df, q[2 * r + 1]), rb, A[r]));
}

// NeoX pairs: channel 32g + k of group g with the same channel of group g + G/2 (pair 32g + k).
template <int kBits, size_t... K>
HWY_INLINE void NeoxGroup(const VU* wa, const VU* wb, const float* T, const float* C, const float* Q, VF (*acc)[kRows],
                          std::index_sequence<K...>) {
  (ScorePair<kBits, int(K), int(K), int(K) % kSets, int(K)>(wa, wb, T, C, Q, acc), ...);
}

// Adjacent pairs: channels 2kk and 2kk + 1 of group g (pair 16g + kk).
template <int kBits, size_t... KK>
HWY_INLINE void NormGroup(const VU* w, const float* T, const float* C, const float* Q, VF (*acc)[kRows],
                          std::index_sequence<KK...>) {
  (ScorePair<kBits, 2 * int(KK), 2 * int(KK) + 1, int(KK) % kSets, int(KK)>(w, w, T, C, Q, acc), ...);
}

// Slot `slot`'s channel indices of the 16 tokens, lanes p * kLanes ..
HWY_INLINE VU LoadIndices(const uint8_t* indices, int ib, int slot, int p) {
  const DU du;
  if (ib == 1) return hn::PromoteTo(du, hn::LoadU(hn::Rebind<uint8_t, DU>(), indices + slot * kSub + p * kLanes));
  return hn::PromoteTo(du, hn::LoadU(hn::Rebind<uint16_t, DU>(),
                                     reinterpret_cast<const uint16_t*>(indices) + slot * kSub + p * kLanes));
}

HWY_INLINE VF LoadHalves(const uint8_t* p16, int first) {
  return hn::PromoteTo(DF(), hn::LoadU(hn::Rebind<hwy::float16_t, DF>(), reinterpret_cast<const hwy::float16_t*>(p16) + first));
}

// The query components the outlier slots read, row-major for lookups by pair where AVX-512's
// two-table permutes reach them (at most kLookupPairs pairs): [row][a, b][kLookupPairs].
constexpr int kLookupPairs = 128;
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr bool kQueryLookups = true;
// t[j] per lane for j < pairs (t 64-byte aligned, pairs <= kLookupPairs): permutes of 32 entries
// from two registers, joined by j's bits 5 and 6. The values a gather would load.
HWY_INLINE VF LookupPairs(const float* HWY_RESTRICT t, int pairs, VU j) {
  const __m512i idx = j.raw;
  const auto table32 = [&](int at) HWY_ATTR { return _mm512_permutex2var_ps(_mm512_load_ps(t + at), idx, _mm512_load_ps(t + at + 16)); };
  const __mmask16 bit5 = _mm512_test_epi32_mask(idx, _mm512_set1_epi32(32));
  __m512 v = _mm512_mask_blend_ps(bit5, table32(0), table32(32));
  if (pairs > 64) {
    const __m512 w = _mm512_mask_blend_ps(bit5, table32(64), table32(96));
    v = _mm512_mask_blend_ps(_mm512_test_epi32_mask(idx, _mm512_set1_epi32(64)), v, w);
  }
  return VF{v};
}
#else
constexpr bool kQueryLookups = false;
#endif

// acc rows += each outlier slot's share of the part's 16-token lanes: its sparse value (the key's
// difference from its dense decode) times the turned query's component for its channel. qo: the
// components by row for LookupPairs, or null (gathered from qp).
template <bool kNeox>
HWY_INLINE void AddKeyOutliers(const RopeKeys& k, const float* qp, const float* qo, const uint8_t* blk, int p,
                               size_t col, VF (*acc)[kRows]) {
  (void)qo;  // read only where kQueryLookups
  const DF df;
  const DU du;
  const uint8_t* counts = blk + k.words_bytes;
  const uint8_t* values = counts + kSub;
  const uint8_t* indices = values + size_t(2) * k.S * kSub;
  const VU n = hn::PromoteTo(du, hn::LoadU(hn::Rebind<uint8_t, DU>(), counts + p * kLanes));
  const VU half = hn::Set(du, uint32_t(k.d / 2));
  const VU at = hn::Iota(du, uint32_t(col + size_t(p) * kLanes));
  for (int slot = 0; slot < k.S; ++slot) {
    auto valid = hn::Lt(hn::Set(du, uint32_t(slot)), n);
    if (hn::AllFalse(du, valid)) break;  // counts only fall from here
    VU c = LoadIndices(indices, k.ib, slot, p);
    valid = hn::And(valid, hn::Lt(c, hn::Set(du, uint32_t(k.d))));
    c = hn::IfThenElseZero(valid, c);
    const VF delta = hn::IfThenElseZero(hn::RebindMask(df, valid), LoadHalves(values, slot * kSub + p * kLanes));
    VU j;
    hn::Mask<DU> first;
    if constexpr (kNeox) {
      first = hn::Lt(c, half);
      j = hn::IfThenElse(first, c, hn::Sub(c, half));
    } else {
      first = hn::Eq(hn::And(c, hn::Set(du, 1u)), hn::Zero(du));
      j = hn::ShiftRight<1>(c);
    }
    const VU ti = hn::Add(hn::Mul(j, hn::Set(du, uint32_t(kPairAngles))), at);
    const VF cs = hn::GatherIndex(df, k.angles, hn::BitCast(DI(), ti));
    const VF sn = hn::GatherIndex(df, k.angles, hn::BitCast(DI(), hn::Add(ti, hn::Set(du, uint32_t(kCols)))));
    const auto f = hn::RebindMask(df, first);
    const VF fa = hn::Mul(delta, hn::IfThenElse(f, cs, hn::Neg(sn)));
    const VF fb = hn::Mul(delta, hn::IfThenElse(f, sn, cs));
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
    if (qo != nullptr) {
      for (int r = 0; r < kRows; ++r) {
        const VF va = LookupPairs(qo + size_t(2 * r) * kLookupPairs, k.d / 2, j);
        const VF vb = LookupPairs(qo + size_t(2 * r + 1) * kLookupPairs, k.d / 2, j);
        acc[0][r] = hn::MulAdd(fa, va, hn::MulAdd(fb, vb, acc[0][r]));
      }
      continue;
    }
#endif
    const VU qi = hn::Mul(j, hn::Set(du, uint32_t(kPairQuery)));
    for (int r = 0; r < kRows; ++r) {
      const VU qa = hn::Add(qi, hn::Set(du, uint32_t(2 * r)));
      const VF va = hn::GatherIndex(df, qp, hn::BitCast(DI(), qa));
      const VF vb = hn::GatherIndex(df, qp, hn::BitCast(DI(), hn::Add(qa, hn::Set(du, 1u))));
      acc[0][r] = hn::MulAdd(fa, va, hn::MulAdd(fb, vb, acc[0][r]));
    }
  }
}

// fn(wa, wb, j0) for each group of pairs of part p: the code words of the pairs' first and second
// channels (under NeoX, group g and group g + G/2; adjacent pairs share one group's words) and the
// group's first pair.
template <int kBits, bool kNeox, class Fn>
HWY_INLINE void ForPairGroups(const RopeKeys& k, const uint8_t* blk, int p, const Fn& fn) {
  const DU du;
  const uint32_t* words = reinterpret_cast<const uint32_t*>(blk);
  const int n_groups = k.d / kGroup;
  if constexpr (kNeox) {
    for (int g = 0; g < n_groups / 2; ++g) {
      VU wa[kBits], wb[kBits];
      for (int m = 0; m < kBits; ++m) {
        wa[m] = hn::LoadU(du, words + size_t(g * kBits + m) * kSub + p * kLanes);
        wb[m] = hn::LoadU(du, words + size_t((g + n_groups / 2) * kBits + m) * kSub + p * kLanes);
      }
      fn(wa, wb, size_t(g) * kGroup);
    }
  } else {
    for (int g = 0; g < n_groups; ++g) {
      VU w[kBits];
      for (int m = 0; m < kBits; ++m) w[m] = hn::LoadU(du, words + size_t(g * kBits + m) * kSub + p * kLanes);
      fn(w, w, size_t(g) * (kGroup / 2));
    }
  }
}

template <int kBits, bool kNeox>
HWY_INLINE void ScoreBlock(const RopeKeys& k, const float* qp, const float* qo, const uint8_t* HWY_RESTRICT blk,
                           size_t col, float* HWY_RESTRICT out, size_t out_stride) {
  const DF df;
  for (int p = 0; p < kParts; ++p) {
    VF acc[kSets][kRows];
    for (int e = 0; e < kSets; ++e) {
      for (int r = 0; r < kRows; ++r) acc[e][r] = hn::Zero(df);
    }
    const size_t c = col + size_t(p) * kLanes;
    ForPairGroups<kBits, kNeox>(k, blk, p, [&](const VU* wa, const VU* wb, size_t j0) {
      const float* T = k.tables + j0 * kPairTable;
      const float* C = k.angles + j0 * kPairAngles + c;
      if constexpr (kNeox) {
        NeoxGroup<kBits>(wa, wb, T, C, qp + j0 * kPairQuery, acc, std::make_index_sequence<kGroup>());
      } else {
        NormGroup<kBits>(wa, T, C, qp + j0 * kPairQuery, acc, std::make_index_sequence<kGroup / 2>());
      }
    });
    if (k.S > 0) AddKeyOutliers<kNeox>(k, qp, qo, blk, p, col, acc);
    for (int r = 0; r < kRows; ++r) hn::StoreU(hn::Add(acc[0][r], acc[1][r]), df, out + size_t(r) * out_stride + p * kLanes);
  }
}

template <int kBits, bool kNeox>
void ScoreRows(const RopeKeys& k, const float* qp, const float* qo, const uint8_t* blocks, size_t bb, int64_t i0,
               int64_t i1, int64_t col0, float* out, size_t out_stride) {
  const int64_t first_block = i0 / kSub;
  ScoreLaneBlocks<kRows, kSub>(blocks, bb, i0, i1, out, out_stride, [&](const uint8_t* blk, float* dst, size_t stride) {
    const int64_t b = (blk - blocks) / int64_t(bb);
    ScoreBlock<kBits, kNeox>(k, qp, qo, blk, size_t(col0 + kSub * (b - first_block)), dst, stride);
  });
}

// ---- many query rows (prefill): each block's turned keys decoded once ----------------------
// ScorePair's keys without the rows: ra, rb of pair K stored at buf + 2 K kLanes (the group's first
// pair at buf).
template <int kBits, int kA, int kB, int K>
HWY_INLINE void DecodePair(const VU* wa, const VU* wb, const float* HWY_RESTRICT T, const float* HWY_RESTRICT C,
                           float* HWY_RESTRICT buf) {
  const DF df;
  const VF ka = Lookup<kBits>(LoadLevels(T + K * kPairTable), CodeBits<kBits, kA>(wa));
  const VF kb = Lookup<kBits>(LoadLevels(T + K * kPairTable + 16), CodeBits<kBits, kB>(wb));
  const VF cs = hn::LoadU(df, C + K * kPairAngles);
  const VF sn = hn::LoadU(df, C + K * kPairAngles + kCols);
  hn::StoreU(hn::MulSub(ka, cs, hn::Mul(kb, sn)), df, buf + 2 * K * kLanes);
  hn::StoreU(hn::MulAdd(ka, sn, hn::Mul(kb, cs)), df, buf + (2 * K + 1) * kLanes);
}

template <int kBits, size_t... K>
HWY_INLINE void DecodeNeoxGroup(const VU* wa, const VU* wb, const float* T, const float* C, float* buf,
                                std::index_sequence<K...>) {
  (DecodePair<kBits, int(K), int(K), int(K)>(wa, wb, T, C, buf), ...);
}

template <int kBits, size_t... KK>
HWY_INLINE void DecodeNormGroup(const VU* w, const float* T, const float* C, float* buf, std::index_sequence<KK...>) {
  (DecodePair<kBits, 2 * int(KK), 2 * int(KK) + 1, int(KK)>(w, w, T, C, buf), ...);
}

// A block's turned keys, [part][pair][a, b][kLanes]: the values ScoreBlock computes for each pair.
template <int kBits, bool kNeox>
void DecodeBlock(const RopeKeys& k, const uint8_t* HWY_RESTRICT blk, size_t col, float* HWY_RESTRICT buf) {
  const int pairs = k.d / 2;
  for (int p = 0; p < kParts; ++p) {
    const size_t c = col + size_t(p) * kLanes;
    float* const bp = buf + size_t(p) * pairs * 2 * kLanes;
    ForPairGroups<kBits, kNeox>(k, blk, p, [&](const VU* wa, const VU* wb, size_t j0) {
      const float* T = k.tables + j0 * kPairTable;
      const float* C = k.angles + j0 * kPairAngles + c;
      if constexpr (kNeox) {
        DecodeNeoxGroup<kBits>(wa, wb, T, C, bp + j0 * 2 * kLanes, std::make_index_sequence<kGroup>());
      } else {
        DecodeNormGroup<kBits>(wa, T, C, bp + j0 * 2 * kLanes, std::make_index_sequence<kGroup / 2>());
      }
    });
  }
}

// ScorePair's products from a decoded pair K (its ra, rb at buf + 2 K kLanes).
template <int kSet, int K>
HWY_INLINE void ScoreDecodedPair(const float* buf, const float* Q, VF (*acc)[kRows]) {
  const DF df;
  const VF ra = hn::LoadU(df, buf + 2 * K * kLanes);
  const VF rb = hn::LoadU(df, buf + (2 * K + 1) * kLanes);
  VF* A = acc[kSet];
  const float* q = Q + K * kPairQuery;
  for (int r = 0; r < kRows; ++r) A[r] = hn::MulAdd(hn::Set(df, q[2 * r]), ra, hn::MulAdd(hn::Set(df, q[2 * r + 1]), rb, A[r]));
}

template <size_t... K>
HWY_INLINE void ScoreDecodedPairs(const float* buf, const float* Q, VF (*acc)[kRows], std::index_sequence<K...>) {
  (ScoreDecodedPair<int(K) % kSets, int(K)>(buf, Q, acc), ...);
}

// ScoreBlock's scores of four rows (qp) from a decoded block: the same products in the same order
// (pair j into accumulator set j mod 2, as ScorePair's groups assign them; the outliers last), so
// the same bits.
template <bool kNeox>
HWY_INLINE void ScoreDecodedBlock(const RopeKeys& k, const float* qp, const float* buf, const uint8_t* blk, size_t col,
                                  float* out, size_t out_stride) {
  const DF df;
  const int pairs = k.d / 2;
  constexpr int kStep = kGroup / 2;  // pairs per step: a whole number of groups' pairs either way
  for (int p = 0; p < kParts; ++p) {
    VF acc[kSets][kRows];
    for (int e = 0; e < kSets; ++e) {
      for (int r = 0; r < kRows; ++r) acc[e][r] = hn::Zero(df);
    }
    const float* bp = buf + size_t(p) * pairs * 2 * kLanes;
    for (int j0 = 0; j0 < pairs; j0 += kStep) {
      ScoreDecodedPairs(bp + size_t(j0) * 2 * kLanes, qp + size_t(j0) * kPairQuery, acc, std::make_index_sequence<kStep>());
    }
    if (k.S > 0) AddKeyOutliers<kNeox>(k, qp, nullptr, blk, p, col, acc);
    for (int r = 0; r < kRows; ++r) hn::StoreU(hn::Add(acc[0][r], acc[1][r]), df, out + size_t(r) * out_stride + p * kLanes);
  }
}

// Blocks outside, groups of four rows inside: each block is decoded once for all of them.
// qp: the groups' pair-major query components, kPairQuery * pairs floats per group.
template <int kBits, bool kNeox>
void ScoreManyRows(const RopeKeys& k, const float* qp, int n_q, const uint8_t* blocks, size_t bb, int64_t i0, int64_t i1,
                   int64_t col0, float* out, size_t out_stride) {
  const int pairs = k.d / 2;
  // The decoded block (16 tokens x d floats), on the heap and kept per thread: a static array
  // would be static TLS, reserved and cleared for every thread the process starts.
  static thread_local std::vector<float> buf_store;
  buf_store.resize(size_t(kSub) * size_t(k.d));
  float* const buf = buf_store.data();
  alignas(64) float tmp[kRows * kSub];
  const int64_t first_block = i0 / kSub;
  for (int64_t b = first_block; b * kSub < i1; ++b) {
    const uint8_t* blk = blocks + size_t(b) * bb;
    const size_t col = size_t(col0 + kSub * (b - first_block));
    DecodeBlock<kBits, kNeox>(k, blk, col, buf);
    const int64_t first = b * kSub;
    const int64_t a = std::max(i0, first), e = std::min(i1, first + kSub);
    const bool whole = a == first && e == first + kSub;
    for (int r0 = 0; r0 < n_q; r0 += kRows) {
      const int n = std::min(kRows, n_q - r0);
      const float* q = qp + size_t(r0 / kRows) * pairs * kPairQuery;
      float* o = out + size_t(r0) * out_stride + size_t(a - i0);
      if (whole && n == kRows) {
        ScoreDecodedBlock<kNeox>(k, q, buf, blk, col, o, out_stride);
        continue;
      }
      ScoreDecodedBlock<kNeox>(k, q, buf, blk, col, tmp, size_t(kSub));
      for (int r = 0; r < n; ++r) {
        for (int64_t x = a; x < e; ++x) o[size_t(r) * out_stride + size_t(x - a)] = tmp[r * kSub + (x - first)];
      }
    }
  }
}

void KvquantRopeScores(const RopeKeys& k, const float* q, int n_q, size_t qs, const uint8_t* blocks, size_t bb,
                       int64_t i0, int64_t i1, int64_t col0, float* out, size_t out_stride) {
  if (i1 <= i0) return;
  HWY_ASSERT(k.cols == kCols);
  const int pairs = k.d / 2;
  if (n_q > kRows) {
    // Many rows (prefill): [group of four rows][pair][row][a, b], then each block decoded once.
    static thread_local std::vector<float> qp_all;
    const int groups = (n_q + kRows - 1) / kRows;
    qp_all.resize(size_t(groups) * size_t(pairs) * kPairQuery);
    for (int g = 0; g < groups; ++g) {
      float* qg = qp_all.data() + size_t(g) * size_t(pairs) * kPairQuery;
      for (int j = 0; j < pairs; ++j) {
        const int a = k.neox ? j : 2 * j, b = k.neox ? j + pairs : 2 * j + 1;
        for (int r = 0; r < kRows; ++r) {
          const int row = g * kRows + r;
          qg[size_t(j) * kPairQuery + 2 * r] = row < n_q ? q[size_t(row) * qs + size_t(a)] : 0.0f;
          qg[size_t(j) * kPairQuery + 2 * r + 1] = row < n_q ? q[size_t(row) * qs + size_t(b)] : 0.0f;
        }
      }
    }
    WithBits(k.bits, [&](auto bits) {
      if (k.neox) {
        ScoreManyRows<bits(), true>(k, qp_all.data(), n_q, blocks, bb, i0, i1, col0, out, out_stride);
      } else {
        ScoreManyRows<bits(), false>(k, qp_all.data(), n_q, blocks, bb, i0, i1, col0, out, out_stride);
      }
    });
    return;
  }
  // [pair][row][a, b]: four rows' components of each pair; rows past n_q are zero. And the same
  // components row-major for the outlier slots' lookups, where they apply.
  alignas(64) static thread_local float qp_buf[2048 * kPairQuery];
  alignas(64) static thread_local float qo_buf[kRows * 2 * kLookupPairs];
  float* const qp = qp_buf;
  const float* const qo = kQueryLookups && k.S > 0 && pairs <= kLookupPairs ? qo_buf : nullptr;
  for (int r0 = 0; r0 < n_q; r0 += kRows) {
    const int n = std::min(kRows, n_q - r0);
    for (int j = 0; j < pairs; ++j) {
      const int a = k.neox ? j : 2 * j, b = k.neox ? j + pairs : 2 * j + 1;
      for (int r = 0; r < kRows; ++r) {
        const float* row = q + size_t(r0 + r) * qs;
        qp[size_t(j) * kPairQuery + 2 * r] = r < n ? row[a] : 0.0f;
        qp[size_t(j) * kPairQuery + 2 * r + 1] = r < n ? row[b] : 0.0f;
        if (qo != nullptr) {
          qo_buf[size_t(2 * r) * kLookupPairs + j] = qp[size_t(j) * kPairQuery + 2 * r];
          qo_buf[size_t(2 * r + 1) * kLookupPairs + j] = qp[size_t(j) * kPairQuery + 2 * r + 1];
        }
      }
    }
    float* o = out + size_t(r0) * out_stride;
    const auto run = [&](float* dst, size_t stride) {
      WithBits(k.bits, [&](auto bits) {
        if (k.neox) {
          ScoreRows<bits(), true>(k, qp, qo, blocks, bb, i0, i1, col0, dst, stride);
        } else {
          ScoreRows<bits(), false>(k, qp, qo, blocks, bb, i0, i1, col0, dst, stride);
        }
      });
    };
    if (n == kRows) {
      run(o, out_stride);
      continue;
    }
    // Fewer rows: all four are scored into a scratch, and the real ones copied out. The scratch
    // is kept per thread, so that decode with one to three query rows per KV head allocates nothing.
    static thread_local std::vector<float> tmp;
    tmp.resize(size_t(kRows) * size_t(i1 - i0));
    run(tmp.data(), size_t(i1 - i0));
    for (int r = 0; r < n; ++r) std::memcpy(o + size_t(r) * out_stride, tmp.data() + size_t(r) * (i1 - i0), size_t(i1 - i0) * 4);
  }
}


// ---- values: the zeros and the outliers ----------------------------------------------------

// Rows four at a time: the zeros' share stays in vectors over the whole range (one sum of lanes
// at the end). Each block's outlier deltas come out a slot of 16 tokens at a time; they are added
// into a channel-major scratch of the four rows (two tokens' outliers may share a channel, so one
// token at a time, four rows in one short vector: the weights are stored token-major for that,
// wt4), which joins acc once at the end.
void ValueExtrasRows(const LaneValues& v, const float* w, size_t w_stride, int n_q, const uint8_t* blocks, size_t bb,
                  int64_t i0, int64_t i1, float* acc, size_t acc_stride) {
  const DF df;
  const DU du;
  constexpr int kSlotsAtOnce = 8;
  alignas(64) float wt[kRows][kSub];
  alignas(64) float wt4[kSub][kRows];
  alignas(64) float delta[kSlotsAtOnce * kSub];
  alignas(64) uint32_t chan[kSlotsAtOnce * kSub];
  alignas(64) static thread_local float acc4_buf[4096 * kRows];  // [channel][row]
  float* const acc4 = acc4_buf;
  const hn::CappedTag<float, kRows> d4;  // four rows in one short vector (one lane on the scalar target)
  const size_t n4 = hn::Lanes(d4);
  for (int r0 = 0; r0 < n_q; r0 += kRows) {
    const int nr = std::min(kRows, n_q - r0);
    VF zacc[kRows];
    for (int r = 0; r < kRows; ++r) zacc[r] = hn::Zero(df);
    if (v.S > 0) std::fill_n(acc4, size_t(v.d) * kRows, 0.0f);
    for (int64_t b = i0 / kSub; b * kSub < i1; ++b) {
      const uint8_t* blk = blocks + size_t(b) * bb;
      const uint8_t* zeros = blk + v.zeros_at;
      const uint8_t* values = zeros + 2 * kSub;
      const uint8_t* indices = values + size_t(2) * v.S * kSub;
      const int64_t first = b * kSub;
      const int t0 = int(std::max<int64_t>(i0 - first, 0)), t1 = int(std::min<int64_t>(i1 - first, kSub));
      for (int r = 0; r < kRows; ++r) {
        const float* wr = w + size_t(r0 + std::min(r, nr - 1)) * w_stride;
        if (r >= nr) {
          std::fill_n(wt[r], kSub, 0.0f);
        } else if (t0 == 0 && t1 == kSub) {
          for (int p = 0; p < kParts; ++p) hn::Store(hn::LoadU(df, wr + (first - i0) + p * kLanes), df, wt[r] + p * kLanes);
        } else {
          for (int t = 0; t < kSub; ++t) wt[r][t] = t >= t0 && t < t1 ? wr[first + t - i0] : 0.0f;
        }
      }
      for (int p = 0; p < kParts; ++p) {
        const VF z = LoadHalves(zeros, p * kLanes);
        VF wv[kRows];
        for (int r = 0; r < kRows; ++r) {
          wv[r] = hn::Load(df, wt[r] + p * kLanes);
          zacc[r] = hn::MulAdd(wv[r], z, zacc[r]);
        }
        if (v.S > 0) hn::StoreInterleaved4(wv[0], wv[1], wv[2], wv[3], df, wt4[p * kLanes]);
      }
      if (v.S == 0) continue;
      for (int s0 = 0; s0 < v.S; s0 += kSlotsAtOnce) {
        const int ns = std::min(kSlotsAtOnce, v.S - s0);
        // Each slot's sparse value and channel; 0 for a damaged index.
        for (int p = 0; p < kParts; ++p) {
          for (int e = 0; e < ns; ++e) {
            VU c = LoadIndices(indices, v.ib, s0 + e, p);
            const auto valid = hn::Lt(c, hn::Set(du, uint32_t(v.d)));
            c = hn::IfThenElseZero(valid, c);
            const VF dv = hn::IfThenElseZero(hn::RebindMask(df, valid), LoadHalves(values, (s0 + e) * kSub + p * kLanes));
            hn::Store(dv, df, delta + e * kSub + p * kLanes);
            hn::Store(c, du, chan + e * kSub + p * kLanes);
          }
        }
        for (int e = 0; e < ns; ++e) {
          for (int t = t0; t < t1; ++t) {
            float* a = acc4 + size_t(chan[e * kSub + t]) * kRows;
            const auto dl = hn::Set(d4, delta[e * kSub + t]);
            for (size_t r = 0; r < kRows; r += n4) {
              hn::Store(hn::MulAdd(hn::Load(d4, wt4[t] + r), dl, hn::Load(d4, a + r)), d4, a + r);
            }
          }
        }
      }
    }
    for (int r = 0; r < nr; ++r) acc[size_t(r0 + r) * acc_stride + v.d] += hn::GetLane(hn::SumOfLanes(df, zacc[r]));
    if (v.S == 0) continue;
    // acc4 back to rows: kLanes channels of all four rows per step (the lane layout takes head
    // sizes that are multiples of 32), the rows past n_q dropped.
    for (int c = 0; c < v.d; c += int(kLanes)) {
      VF o[kRows];
      hn::LoadInterleaved4(df, acc4 + size_t(c) * kRows, o[0], o[1], o[2], o[3]);
      for (int r = 0; r < nr; ++r) {
        float* a = acc + size_t(r0 + r) * acc_stride + c;
        hn::StoreU(hn::Add(hn::LoadU(df, a), o[r]), df, a);
      }
    }
  }
}

void KvquantValueExtras(const LaneValues& v, const float* w, size_t w_stride, int n_q, const uint8_t* blocks,
                        size_t bb, int64_t i0, int64_t i1, float* acc, size_t acc_stride) {
  if (i1 <= i0) return;
  ValueExtrasRows(v, w, w_stride, n_q, blocks, bb, i0, i1, acc, acc_stride);
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq::kv::kvquant_lanes {
HWY_EXPORT(KvquantRopeScores);
HWY_EXPORT(KvquantValueExtras);

void rope_scores(const RopeKeys& k, const float* q, int n_q, size_t qs, const uint8_t* blocks, size_t bb, int64_t i0,
                 int64_t i1, int64_t col0, float* out, size_t out_stride) {
  HWY_DYNAMIC_DISPATCH(KvquantRopeScores)(k, q, n_q, qs, blocks, bb, i0, i1, col0, out, out_stride);
}

void value_extras(const LaneValues& v, const float* w, size_t w_stride, int n_q, const uint8_t* blocks, size_t bb,
                  int64_t i0, int64_t i1, float* acc, size_t acc_stride) {
  HWY_DYNAMIC_DISPATCH(KvquantValueExtras)(v, w, w_stride, n_q, blocks, bb, i0, i1, acc, acc_stride);
}

}  // namespace vq::kv::kvquant_lanes
#endif
