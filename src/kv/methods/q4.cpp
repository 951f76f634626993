// q4: 4-bit codes per group of 32 channels with an fp16 scale (4.5 bits), quantized like
// llama.cpp's q4_0, stored in blocks of 16 tokens (q4_layout.h): keys with tokens in the vector
// lanes, values with channels in the lanes. Optional randomized Hadamard rotation (rot=1).
//
// Both fused paths are integer byte dot products (DotBytes: vpdpbusd on CPUs with AVX-512 VNNI,
// 64 multiply-adds per instruction against an FMA's 16) of the unsigned 4-bit codes with a
// signed 16-bit fixed-point operand split into two byte planes:
//   scores:     the query, held per group of 32 channels (q4::QueryState, prepared once per
//               step); tokens in lanes, so no horizontal sums.
//   accumulate: the softmax weights times the tokens' group scales, held per run of 256 tokens
//               (RunWeights); channels in lanes, the sum over tokens inside each lane.
// The fixed point holds each operand within 1/65024 of its group's (run's) largest magnitude,
// finer than fp16 and far finer than the 4-bit codes; the tests check the fused paths against
// decode-then-dot within the bound that implies, and the scores exactly against the held query.
// This is a deliberate deviation from float arithmetic (llama.cpp's quantized-cache dot products
// hold the query at 8 bits); it halves the work per token.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL  // byte dot products (VNNI) where the CPU has them
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/methods/q4.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include <cstring>
#include <type_traits>

#include "hwy/highway.h"
#include "src/kv/byte_dot-inl.h"
#include "src/kv/fused_kernels-inl.h"
#include "src/kv/methods/q4_layout.h"

HWY_BEFORE_NAMESPACE();
#include "src/kv/byte_dot_target.h"  // IWYU pragma: keep
namespace vq::kv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
using DU = hn::RebindToUnsigned<DF>;
using VU = hn::Vec<DU>;
using DI = hn::RebindToSigned<DF>;
using VI = hn::Vec<DI>;
typedef int32_t AliasedI32 __attribute__((may_alias));
constexpr int kLanes = int(hn::MaxLanes(DF()));
constexpr int kParts = q4::kBlockTokens / kLanes;  // vectors per 16 tokens
static_assert(q4::kBlockTokens % kLanes == 0, "16 tokens must be whole vectors");

// Scores are exact integer dot products of the 4-bit codes with the query held in 16-bit fixed
// point per group of 32 channels (q4_layout.h, QueryState): per chunk, the codes of even and of
// odd channels are masked out as bytes, each 32-bit lane one token, and multiplied by the
// matching query bytes with DotBytes, once per query byte plane. Per group, the two planes'
// integer sums are joined (high * 256 + low: exact below 2^24), turned to float once, scaled by
// the query's group scale, offset by -8 * (the group's query sum), and weighted by the tokens'
// fp16 scales.
// One group's kChunks chunks (4, or fewer in a ragged last group) of the 16 tokens, added to acc.
// A compile-time trip count lets the chunk loop unroll with the sums fixed in registers.
template <int kRows, int kChunks>
HWY_INLINE void ScoreGroup(const float* HWY_RESTRICT q, size_t qs, const uint32_t* HWY_RESTRICT words,
                           const hwy::float16_t* HWY_RESTRICT scales, int C, int g, VF (*acc)[kParts]) {
  const DF df;
  const DU du;
  const DI di;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const VU low_nibbles = hn::Set(du, 0x0F0F0F0Fu);
  // Sums per row and byte plane (hi, lo): eight chains at four rows; the chains of successive
  // blocks overlap out of order.
  VI sum[kRows][2][kParts];
  for (int r = 0; r < kRows; ++r) {
    for (int k = 0; k < 2; ++k) {
      for (int p = 0; p < kParts; ++p) sum[r][k][p] = hn::Zero(di);
    }
  }
  const int c0 = g * (q4::kGroup / q4::kChunk);
  for (int i = 0; i < kChunks; ++i) {
    const int c = c0 + i;
    VI codes[2][kParts];  // even and odd channels' codes, one byte each
    for (int p = 0; p < kParts; ++p) {
      const VU x = hn::LoadU(du, words + c * q4::kBlockTokens + p * kLanes);
      codes[0][p] = hn::BitCast(di, hn::And(x, low_nibbles));
      codes[1][p] = hn::BitCast(di, hn::And(hn::ShiftRight<4>(x), low_nibbles));
    }
    for (int r = 0; r < kRows; ++r) {
      // hi even, hi odd, lo even, lo odd: bits kept in the float state array, read through a
      // may_alias type so that each becomes one broadcast load
      const AliasedI32* w = reinterpret_cast<const AliasedI32*>(q + size_t(r) * qs + q4::QueryState::chunk_word(c, 0));
      for (int k = 0; k < 4; ++k) {
        for (int p = 0; p < kParts; ++p) sum[r][k / 2][p] = DotBytesWord(di, sum[r][k / 2][p], codes[k % 2][p], w + k);
      }
    }
  }
  for (int p = 0; p < kParts; ++p) {
    const VF s = hn::PromoteTo(df, hn::LoadU(dh, scales + g * q4::kBlockTokens + p * kLanes));
    for (int r = 0; r < kRows; ++r) {
      const float* f = q + size_t(r) * qs + q4::QueryState::group_word(C, g);
      const VI joined = hn::Add(hn::ShiftLeft<8>(sum[r][0][p]), sum[r][1][p]);  // exact: |joined| < 2^24
      const VF part = hn::MulAdd(hn::ConvertTo(df, joined), hn::Set(df, f[0]), hn::Set(df, f[1]));
      acc[r][p] = hn::MulAdd(s, part, acc[r][p]);
    }
  }
}

template <int kRows>
HWY_INLINE void ScoreBlock(const float* HWY_RESTRICT q, size_t qs, const uint8_t* HWY_RESTRICT blk, int d,
                           float* HWY_RESTRICT out, size_t out_stride) {
  const DF df;
  const int C = q4::n_chunks(d);
  const uint32_t* words = reinterpret_cast<const uint32_t*>(blk);
  const hwy::float16_t* scales = reinterpret_cast<const hwy::float16_t*>(blk + q4::codes_bytes(d));
  VF acc[kRows][kParts];
  for (int r = 0; r < kRows; ++r) {
    for (int p = 0; p < kParts; ++p) acc[r][p] = hn::Zero(df);
  }
  constexpr int kPerGroup = q4::kGroup / q4::kChunk;
  const int full = C / kPerGroup;
  for (int g = 0; g < full; ++g) ScoreGroup<kRows, kPerGroup>(q, qs, words, scales, C, g, acc);
  switch (C % kPerGroup) {
    case 1: ScoreGroup<kRows, 1>(q, qs, words, scales, C, full, acc); break;
    case 2: ScoreGroup<kRows, 2>(q, qs, words, scales, C, full, acc); break;
    case 3: ScoreGroup<kRows, 3>(q, qs, words, scales, C, full, acc); break;
    default: break;
  }
  for (int r = 0; r < kRows; ++r) {
    for (int p = 0; p < kParts; ++p) hn::StoreU(acc[r][p], df, out + size_t(r) * out_stride + p * kLanes);
  }
}

template <int kRows>
void ScoreRows(const float* q, size_t qs, const uint8_t* blocks, int64_t i0, int64_t i1, int d, float* out,
               size_t out_stride) {
  const size_t bb = q4::block_bytes(d);
  alignas(64) float tmp[kRows * q4::kBlockTokens];
  for (int64_t b = i0 / q4::kBlockTokens; b * q4::kBlockTokens < i1; ++b) {
    const uint8_t* blk = blocks + size_t(b) * bb;
    PrefetchBytes(blk + 6 * bb, bb);
    const int64_t first = b * q4::kBlockTokens;
    if (first >= i0 && first + q4::kBlockTokens <= i1) {  // whole block in range: straight to out
      ScoreBlock<kRows>(q, qs, blk, d, out + size_t(first - i0), out_stride);
      continue;
    }
    ScoreBlock<kRows>(q, qs, blk, d, tmp, q4::kBlockTokens);
    const int64_t t0 = std::max(i0, b * q4::kBlockTokens), t1 = std::min(i1, (b + 1) * q4::kBlockTokens);
    for (int r = 0; r < kRows; ++r) {
      for (int64_t i = t0; i < t1; ++i) out[size_t(r) * out_stride + size_t(i - i0)] = tmp[r * q4::kBlockTokens + (i - b * q4::kBlockTokens)];
    }
  }
}

void Q4Scores(const float* q, int n_q, size_t qs, const uint8_t* blocks, int64_t i0, int64_t i1, int d, float* out,
              size_t out_stride) {
  if (i1 <= i0) return;
  int r = 0;
  for (; r + 4 <= n_q; r += 4) ScoreRows<4>(q + size_t(r) * qs, qs, blocks, i0, i1, d, out + size_t(r) * out_stride, out_stride);
  for (; r < n_q; ++r) ScoreRows<1>(q + size_t(r) * qs, qs, blocks, i0, i1, d, out + size_t(r) * out_stride, out_stride);
}

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

// Stores the byte planes of T (|T| <= 32512): lo = T's low byte, hi = low byte of (T + 128) >> 8.
HWY_INLINE void StorePlanes(VI T, int8_t* HWY_RESTRICT lo, int8_t* HWY_RESTRICT hi) {
  const DI di;
  const VI H = hn::ShiftRight<8>(hn::Add(T, hn::Set(di, 128)));
#if HWY_TARGET == HWY_AVX3_DL
  // One byte permute gathers byte 0 of each lane of T, then of H, into 32 bytes [lo | hi].
  alignas(64) static constexpr uint8_t kIdx[64] = {0,  4,  8,  12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60,
                                                   64, 68, 72, 76, 80, 84, 88, 92, 96, 100, 104, 108, 112, 116, 120, 124};
  const __m512i both = _mm512_permutex2var_epi8(T.raw, _mm512_load_si512(kIdx), H.raw);
  (void)hi;  // hi == lo + 16 here (RunWeights' layout)
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo), _mm512_castsi512_si256(both));
#else
  const hn::Rebind<int8_t, DI> d8;
  const VI L = hn::Sub(T, hn::ShiftLeft<8>(H));
  hn::StoreU(hn::DemoteTo(d8, L), d8, lo);
  hn::StoreU(hn::DemoteTo(d8, H), d8, hi);
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
    for (int p = 0; p < kParts; ++p) {
      const VF sn = hn::Mul(hn::PromoteTo(df, hn::LoadU(dh, sc + p * kLanes)), s_inv);
      for (int r = 0; r < kRows; ++r) {
        // |wn * sn| <= 32512 up to rounding, far inside the conversion's range
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
        const VI T{_mm512_cvtps_epi32(hn::Mul(hn::Load(df, &out->wn[bi][r][p * kLanes]), sn).raw)};
#else
        const VI T = hn::NearestInt(hn::Mul(hn::Load(df, &out->wn[bi][r][p * kLanes]), sn));
#endif
        StorePlanes(T, &out->planes[bi][r][0][p * kLanes], &out->planes[bi][r][1][p * kLanes]);
        held[r] = hn::Add(held[r], T);
      }
    }
  }
  for (int r = 0; r < kRows; ++r) {
    out->factor[r] = out->w_max[r] * scale_max / kFixedOne;
    const float sum = float(hn::GetLane(hn::SumOfLanes(di, held[r])));  // |sum| < 2^24: exact
    out->offset[r] = -8.0f * out->factor[r] * sum;
  }
}

// The run's contribution to the kNcc 16-channel chunks of one group from cc0: per half-block,
// the codes of each channel's tokens 0..3 and 4..7 become bytes (one mask, one shift), then each
// row's four weight words (two tokens sets x two planes) are broadcast once and used for every
// chunk. Sums per row, plane and chunk: 16 independent chains at four rows and two chunks.
template <int kRows, int kNcc>
HWY_INLINE void AccumulateGroup(const uint8_t* HWY_RESTRICT run, size_t bb, int nb, int cc0,
                                const RunWeights<kRows>& W, float* HWY_RESTRICT acc, size_t acc_stride,
                                const uint8_t* next, size_t next_bytes, int g, int G) {
  // This group's share of the next run's bytes, spread over its blocks.
  const size_t share = (next_bytes + size_t(G) - 1) / size_t(G), begin = size_t(g) * share;
  const size_t end = std::min(next_bytes, begin + share), per_block = (share + size_t(nb) - 1) / size_t(nb);
  const DF df;
  const DU du;
  const DI di;
  const VU low_nibbles = hn::Set(du, 0x0F0F0F0Fu);
  VI sum[kRows][2][kNcc][kParts];
  for (int r = 0; r < kRows; ++r) {
    for (int e = 0; e < 2; ++e) {
      for (int k = 0; k < kNcc; ++k) {
        for (int p = 0; p < kParts; ++p) sum[r][e][k][p] = hn::Zero(di);
      }
    }
  }
  for (int bi = 0; bi < nb; ++bi) {
    const size_t p0 = begin + size_t(bi) * per_block;
    if (p0 < end) PrefetchBytes(next + p0, std::min(per_block, end - p0));
    const uint8_t* blk = run + size_t(bi) * bb + size_t(cc0) * 128;
    for (int h = 0; h < 2; ++h) {
      VI first4[kNcc][kParts], last4[kNcc][kParts];  // tokens 8h..8h+3 and 8h+4..8h+7
      for (int k = 0; k < kNcc; ++k) {
        for (int p = 0; p < kParts; ++p) {
          const VU x = hn::LoadU(du, reinterpret_cast<const uint32_t*>(blk + k * 128 + h * 64) + p * kLanes);
          first4[k][p] = hn::BitCast(di, hn::And(x, low_nibbles));
          last4[k][p] = hn::BitCast(di, hn::And(hn::ShiftRight<4>(x), low_nibbles));
        }
      }
      for (int r = 0; r < kRows; ++r) {
        const AliasedI32* lo = reinterpret_cast<const AliasedI32*>(&W.planes[bi][r][0][8 * h]);
        const AliasedI32* hi = reinterpret_cast<const AliasedI32*>(&W.planes[bi][r][1][8 * h]);
        for (int k = 0; k < kNcc; ++k) {
          for (int p = 0; p < kParts; ++p) {
            sum[r][0][k][p] = DotBytesWord(di, DotBytesWord(di, sum[r][0][k][p], first4[k][p], hi), last4[k][p], hi + 1);
            sum[r][1][k][p] = DotBytesWord(di, DotBytesWord(di, sum[r][1][k][p], first4[k][p], lo), last4[k][p], lo + 1);
          }
        }
      }
    }
  }
  for (int r = 0; r < kRows; ++r) {
    const VF factor = hn::Set(df, W.factor[r]), offset = hn::Set(df, W.offset[r]);
    for (int k = 0; k < kNcc; ++k) {
      for (int p = 0; p < kParts; ++p) {
        // |hi sum| <= 256 tokens * 128 * 15 < 2^23, so hi * 256 + lo fits 32 bits.
        const VI joined = hn::Add(hn::ShiftLeft<8>(sum[r][0][k][p]), sum[r][1][k][p]);
        float* a = acc + size_t(r) * acc_stride + size_t(cc0 + k) * q4::values::kChunk + p * kLanes;
        hn::StoreU(hn::MulAdd(hn::ConvertTo(df, joined), factor, hn::Add(hn::LoadU(df, a), offset)), df, a);
      }
    }
  }
}

// acc rows += sum over tokens [i0, i1) of w * v, for kRows rows. Values have channels in the
// lanes (q4_layout.h): per half-block, the codes of tokens 0..3 and 4..7 of every channel are
// masked out as bytes and multiplied by the four tokens' weight bytes with DotBytes, once per
// weight plane, summing over tokens inside each lane. The integer sums of a run (per row, plane
// and 16 channels) are joined (hi * 256 + lo, below 2^31) and turned to float once per run.
template <int kRows>
void AccumulateRows(const float* w, size_t w_stride, const uint8_t* blocks, int64_t i0, int64_t i1, int d, float* acc,
                    size_t acc_stride) {
  constexpr int B = q4::kBlockTokens;
  const size_t bb = q4::values::block_bytes(d);
  const int VC = q4::values::n_chunks(d), G = q4::n_groups(d);
  RunWeights<kRows> W;
  for (int64_t b0 = i0 / B; b0 * B < i1; b0 += kRunBlocks) {
    const int nb = int(std::min<int64_t>(kRunBlocks, (i1 + B - 1) / B - b0));
    const uint8_t* run = blocks + size_t(b0) * bb;
    // The bytes after this run (the next run, or the start of the caller's next call: attention
    // asks for one run at a time) are asked for while this run is computed, a share with each
    // group and block; a burst of a whole run's prefetches would fill the line-fill buffers and
    // stall. A prefetch past the end of the cache's memory is harmless: prefetches never fault.
    const size_t next_bytes = size_t(nb) * bb;
    NormalizeRunWeights<kRows>(w, w_stride, i0, i1, b0, nb, &W);
    for (int g = 0; g < G; ++g) {
      StageRunWeights<kRows>(run, nb, d, g, &W);
      const int cc0 = 2 * g;
      if (cc0 + 1 < VC) {
        AccumulateGroup<kRows, 2>(run, bb, nb, cc0, W, acc, acc_stride, run + size_t(nb) * bb, next_bytes, g, G);
      } else {
        AccumulateGroup<kRows, 1>(run, bb, nb, cc0, W, acc, acc_stride, run + size_t(nb) * bb, next_bytes, g, G);
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
#include <fmt/format.h>

#include "src/kv/methods/baseline.h"
#include "veloxquant/error.h"

namespace vq::kv {
HWY_EXPORT(Q4Scores);
HWY_EXPORT(Q4Accumulate);

namespace {

void check_dim(int d) {
  VQ_CHECK(d <= q4::kGroup * q4::kMaxGroups, fmt::format("q4: head_dim {} above 2048", d));
}

class Q4KeyCodec final : public KeyCodec {
 public:
  explicit Q4KeyCodec(int d) : d_(d) { check_dim(d); }
  int head_dim() const override { return d_; }
  int block_tokens() const override { return q4::kBlockTokens; }
  size_t block_bytes() const override { return q4::block_bytes(d_); }
  void encode(const float* keys, int64_t, uint8_t* block) const override {
    for (int t = 0; t < q4::kBlockTokens; ++t) q4::encode_token(keys + size_t(t) * d_, d_, t, block);
  }
  bool encodes_single_tokens() const override { return true; }
  void encode_token(const float* key, int64_t, int slot, uint8_t* block) const override {
    q4::encode_token(key, d_, slot, block);
  }
  void decode(const uint8_t* block, int64_t, float* keys) const override { q4::decode_block(block, d_, keys); }
  // The state is q4::QueryState's 32-bit words, kept in the float array the contract provides.
  size_t query_state_floats() const override { return q4::QueryState::words(d_); }
  void prepare_query(const float* q, float* state) const override {
    q4::QueryState::prepare(q, d_, state);
  }
  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1, float* out,
              size_t out_stride) const override {
    HWY_DYNAMIC_DISPATCH(Q4Scores)(states, n_q, q4::QueryState::words(d_), blocks,
                                   i0, i1, d_, out, out_stride);
  }

 private:
  int d_;
};

class Q4ValueCodec final : public ValueCodec {
 public:
  explicit Q4ValueCodec(int d) : d_(d) { check_dim(d); }
  int head_dim() const override { return d_; }
  int block_tokens() const override { return q4::kBlockTokens; }
  size_t block_bytes() const override { return q4::values::block_bytes(d_); }
  void encode(const float* values, int64_t, uint8_t* block) const override {
    for (int t = 0; t < q4::kBlockTokens; ++t) q4::values::encode_token(values + size_t(t) * d_, d_, t, block);
  }
  bool encodes_single_tokens() const override { return true; }
  void encode_token(const float* value, int64_t, int slot, uint8_t* block) const override {
    q4::values::encode_token(value, d_, slot, block);
  }
  void decode(const uint8_t* block, int64_t, float* values) const override { q4::values::decode_block(block, d_, values); }
  size_t accum_floats() const override { return size_t(q4::values::n_chunks(d_)) * q4::values::kChunk; }
  void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1,
                  float* acc) const override {
    HWY_DYNAMIC_DISPATCH(Q4Accumulate)(w, w_stride, n_q, blocks, i0, i1, d_, acc, accum_floats());
  }
  void finalize(const float* acc, int n_q, float* out) const override {
    for (int r = 0; r < n_q; ++r) std::copy_n(acc + r * accum_floats(), d_, out + size_t(r) * d_);
  }

 private:
  int d_;
};

}  // namespace

const MethodDef& q4_method() {
  static const MethodDef def{
      {"q4", "4-bit per group of 32 with an fp16 scale (llama.cpp q4_0 rounding, 16 tokens interleaved)",
       baseline_params()},
      [](const ParamValues& v) {
        return make_baseline({[](int d) -> std::unique_ptr<KeyCodec> { return std::make_unique<Q4KeyCodec>(d); },
                              [](int d) -> std::unique_ptr<ValueCodec> { return std::make_unique<Q4ValueCodec>(d); },
                              [](int d) { return q4::bits_per_element(d); },
                              [](int d) { return q4::values::bits_per_element(d); }},
                             v);
      }};
  return def;
}

}  // namespace vq::kv
#endif
