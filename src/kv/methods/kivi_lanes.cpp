// KIVI with tokens in the vector lanes: layouts and kernels (see kivi_lanes.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/methods/kivi_lanes.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include <algorithm>
#include <cstring>
#include <utility>

#include "hwy/highway.h"
#include "src/core/fp16.h"
#include "src/kv/fused_kernels-inl.h"
#include "src/kv/methods/kivi_lanes.h"

HWY_BEFORE_NAMESPACE();
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

// The code values 0 .. 2^b - 1 repeated over 16 entries: a lookup by the low four bits of a lane
// gives the code in its low b bits.
template <int kBits>
HWY_INLINE VF CodeTable() {
  alignas(64) static constexpr float k2[16] = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3};
  alignas(64) static constexpr float k4[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  return hn::LoadU(DF(), kBits == 2 ? k2 : k4);
}

// Channel k's codes of the 16 tokens in x, as floats.
template <int kBits, int k>
HWY_INLINE VF Code(VF table, VU x) {
  const VU s = k == 0 ? x : hn::ShiftRight<(kBits * k) % 32>(x);
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  return VF{_mm512_permutexvar_ps(s.raw, table.raw)};
#else
  (void)table;
  const hn::RebindToSigned<DF> di;
  return hn::ConvertTo(DF(), hn::BitCast(di, hn::And(s, hn::Set(DU(), (1u << kBits) - 1))));
#endif
}

// ---- keys: scores -------------------------------------------------------------------------

// Independent accumulator sets in the score loop (channels alternate between them to hide the
// FMA latency): two on AVX-512; one on AVX2, where kRows x kParts vectors already fill half the
// 16 registers and a second set spilled to the stack.
constexpr int kSets = kParts == 1 ? 2 : 1;

template <int kBits, int kRows, int k>
HWY_INLINE void ScoreChannel(VF table, const VU* x, const float* HWY_RESTRICT qc,
                             VF (*acc)[kRows][kParts]) {
  VF v[kParts];
  for (int p = 0; p < kParts; ++p) v[p] = Code<kBits, k>(table, x[p]);
  for (int r = 0; r < kRows; ++r) {
    const VF qb = hn::Set(DF(), qc[r * (32 / kBits) + k]);
    for (int p = 0; p < kParts; ++p) acc[k % kSets][r][p] = hn::MulAdd(qb, v[p], acc[k % kSets][r][p]);
  }
}

template <int kBits, int kRows, size_t... K>
HWY_INLINE void ScoreChunk(VF table, const VU* x, const float* qc, VF (*acc)[kRows][kParts],
                           std::index_sequence<K...>) {
  (ScoreChannel<kBits, kRows, int(K)>(table, x, qc, acc), ...);
}

// out[r * out_stride + t] = bias_r + sum_c qf_r[c] code_c(t) for the 16 tokens of a sub-block.
// qf is chunk-major ([d/C chunks][kRows][C channels]): every query value a chunk needs sits at a
// fixed offset from one pointer (with row strides the compiler kept a pointer per row on the
// stack and paid two scalar instructions per broadcast).
template <int kBits, int kRows>
HWY_INLINE void ScoreSub(const float* HWY_RESTRICT qf, const float* bias, const uint32_t* words, int d,
                         float* HWY_RESTRICT out, size_t out_stride) {
  constexpr int C = 32 / kBits;
  const DF df;
  const DU du;
  const VF table = CodeTable<kBits>();
  VF acc[kSets][kRows][kParts];
  for (int e = 0; e < kSets; ++e) {
    for (int r = 0; r < kRows; ++r) {
      for (int p = 0; p < kParts; ++p) acc[e][r][p] = e == 0 ? hn::Set(df, bias[r]) : hn::Zero(df);
    }
  }
  for (int ch = 0; ch < d / C; ++ch) {
    VU x[kParts];
    for (int p = 0; p < kParts; ++p) x[p] = hn::LoadU(du, words + size_t(ch) * kSub + p * kLanes);
    ScoreChunk<kBits, kRows>(table, x, qf + size_t(ch) * kRows * C, acc, std::make_index_sequence<C>());
  }
  for (int r = 0; r < kRows; ++r) {
    for (int p = 0; p < kParts; ++p) {
      VF sum = acc[0][r][p];
      for (int e = 1; e < kSets; ++e) sum = hn::Add(sum, acc[e][r][p]);
      hn::StoreU(sum, df, out + size_t(r) * out_stride + p * kLanes);
    }
  }
}

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

// A group's scales folded into the query (qf_r[c] = q_r[c] s_c, stored chunk-major as ScoreSub
// reads it) and its zeros into a bias (bias_r = sum_c q_r[c] z_c). d is a multiple of C.
template <int kBits, int kRows>
HWY_INLINE void FoldGroup(const float* HWY_RESTRICT q, size_t qs, const hwy::float16_t* HWY_RESTRICT sz, int d,
                          float* HWY_RESTRICT qf, float* bias) {
  constexpr int C = 32 / kBits;
  const hn::CappedTag<float, C> dc;  // at most one chunk per vector
  using V = hn::Vec<decltype(dc)>;
  const int N = int(hn::Lanes(dc));
  V b[kRows];
  for (int r = 0; r < kRows; ++r) b[r] = hn::Zero(dc);
  for (int c = 0; c < d; c += N) {
    V s, z;
    LoadPairs(dc, sz, c, &s, &z);
    float* chunk = qf + size_t(c / C) * kRows * C + c % C;
    for (int r = 0; r < kRows; ++r) {
      const V qv = hn::LoadU(dc, q + size_t(r) * qs + c);
      hn::StoreU(hn::Mul(qv, s), dc, chunk + r * C);
      b[r] = hn::MulAdd(qv, z, b[r]);
    }
  }
  for (int r = 0; r < kRows; ++r) bias[r] = hn::GetLane(hn::SumOfLanes(dc, b[r]));
}

// Scores of run tokens [i0, i1) for kRows query rows (q: rows of stride qs floats).
template <int kBits, int kRows>
void KeyScoresRows(const float* q, size_t qs, const uint8_t* blocks, size_t bb, int d, int R, int G, int64_t i0,
                   int64_t i1, float* out, size_t out_stride) {
  const size_t params = size_t(R / G) * d * 4, sub = size_t(d) / (32 / kBits) * kSub * 4;
  alignas(64) float qf[kRows * 4096];
  float bias[kRows];
  alignas(64) float tmp[kRows * kSub];
  for (int64_t i = i0; i < i1;) {
    const int64_t b = i / R;
    const int t = int(i % R), j = t / G;
    const int64_t g_end = std::min<int64_t>(i1, b * R + int64_t(j + 1) * G);
    const uint8_t* block = blocks + size_t(b) * bb;
    // The next block's scales and zeros, once per block (its codes are fetched ahead below).
    if (j == R / G - 1) PrefetchBytes(block + bb, params);
    FoldGroup<kBits, kRows>(q, qs, reinterpret_cast<const hwy::float16_t*>(block + size_t(j) * d * 4), d, qf, bias);
    for (int64_t u = (i - b * R) / kSub; b * R + u * kSub < g_end; ++u) {
      const int64_t first = b * R + u * kSub;
      const uint32_t* words = reinterpret_cast<const uint32_t*>(block + params + size_t(u) * sub);
      // Two sub-blocks ahead (past the block's end this reaches into the next block, or is a
      // prefetch of memory never read: harmless).
      PrefetchBytes(reinterpret_cast<const uint8_t*>(words) + 2 * sub, sub);
      if (first >= i && first + kSub <= g_end) {
        ScoreSub<kBits, kRows>(qf, bias, words, d, out + (first - i0), out_stride);
      } else {
        ScoreSub<kBits, kRows>(qf, bias, words, d, tmp, kSub);
        const int64_t a = std::max(i, first), e = std::min(g_end, first + kSub);
        for (int r = 0; r < kRows; ++r) {
          for (int64_t x = a; x < e; ++x) out[size_t(r) * out_stride + size_t(x - i0)] = tmp[r * kSub + (x - first)];
        }
      }
    }
    i = g_end;
  }
}

template <int kBits>
void KeyScoresT(const float* q, int n_q, size_t qs, const uint8_t* blocks, size_t bb, int d, int R, int G, int64_t i0,
                int64_t i1, float* out, size_t out_stride) {
  int r = 0;
  for (; r + 4 <= n_q; r += 4) {
    KeyScoresRows<kBits, 4>(q + size_t(r) * qs, qs, blocks, bb, d, R, G, i0, i1, out + size_t(r) * out_stride, out_stride);
  }
  for (; r < n_q; ++r) {
    KeyScoresRows<kBits, 1>(q + size_t(r) * qs, qs, blocks, bb, d, R, G, i0, i1, out + size_t(r) * out_stride, out_stride);
  }
}

void KiviLanesKeyScores(int bits, const float* q, int n_q, size_t qs, const uint8_t* blocks, size_t bb, int d, int R,
                        int G, int64_t i0, int64_t i1, float* out, size_t out_stride) {
  if (i1 <= i0) return;
  if (bits == 2) {
    KeyScoresT<2>(q, n_q, qs, blocks, bb, d, R, G, i0, i1, out, out_stride);
  } else {
    KeyScoresT<4>(q, n_q, qs, blocks, bb, d, R, G, i0, i1, out, out_stride);
  }
}

// ---- values: accumulation -----------------------------------------------------------------

constexpr int kBatch = 16;  // sub-blocks (16 tokens each) whose weights are staged at once

// Channels accumulated together: their kRows x kQuad accumulators must stay in registers (16
// vectors of the 32 AVX-512 has; 8 of AVX2's 16, where a quad of four spilled to the stack and
// halved the speed). A sub-block's parts (its two 8-token halves on AVX2) add into the same
// accumulator: every lane is summed at the end anyway.
constexpr int kQuad = kParts == 1 ? 4 : 2;

// A[r][kk] += W_r * code of channel kQuad h + kk, over one sub-block's words x.
template <int kBits, int kRows, int h>
HWY_INLINE void AccumulateQuad(VF table, const VU* x, const float* HWY_RESTRICT wb, VF (*A)[kQuad][1]) {
  const DF df;
  const auto one = [&](auto kk_tag) {
    constexpr int kk = decltype(kk_tag)::value;
    for (int p = 0; p < kParts; ++p) {
      const VF v = Code<kBits, kQuad * h + kk>(table, x[p]);
      for (int r = 0; r < kRows; ++r) A[r][kk][0] = hn::MulAdd(hn::Load(df, wb + r * kSub + p * kLanes), v, A[r][kk][0]);
    }
  };
  one(std::integral_constant<int, 0>());
  one(std::integral_constant<int, 1>());
  if constexpr (kQuad == 4) {
    one(std::integral_constant<int, 2>());
    one(std::integral_constant<int, 3>());
  }
}

template <int kBits, int kRows, int h>
HWY_INLINE void AccumulateQuadRun(VF table, const uint8_t* HWY_RESTRICT run, size_t bb, int nb, int ch,
                                  const float* HWY_RESTRICT W, float* HWY_RESTRICT acc, size_t acc_stride,
                                  const uint8_t* next, size_t share, size_t next_bytes) {
  constexpr int C = 32 / kBits;
  // This pass's share of the next run's bytes (see ValueAccumulateRows).
  const size_t p0 = size_t(ch * (C / kQuad) + h) * share;
  if (p0 < next_bytes) PrefetchBytes(next + p0, std::min(share, next_bytes - p0));
  const DF df;
  const DU du;
  VF A[kRows][kQuad][1];
  for (int r = 0; r < kRows; ++r) {
    for (int kk = 0; kk < kQuad; ++kk) A[r][kk][0] = hn::Zero(df);
  }
  for (int bi = 0; bi < nb; ++bi) {
    const uint32_t* words = reinterpret_cast<const uint32_t*>(run + size_t(bi) * bb) + size_t(ch) * kSub;
    VU x[kParts];
    for (int p = 0; p < kParts; ++p) x[p] = hn::LoadU(du, words + p * kLanes);
    AccumulateQuad<kBits, kRows, h>(table, x, W + size_t(bi) * kRows * kSub, A);
  }
  AddQuadLaneSums<kRows, kQuad>(A, acc + size_t(ch) * C + kQuad * h, acc_stride);
}

template <int kBits, int kRows, size_t... H>
HWY_INLINE void AccumulateChunk(VF table, const uint8_t* run, size_t bb, int nb, int ch, const float* W, float* acc,
                                size_t acc_stride, const uint8_t* next, size_t share, size_t next_bytes,
                                std::index_sequence<H...>) {
  (AccumulateQuadRun<kBits, kRows, int(H)>(table, run, bb, nb, ch, W, acc, acc_stride, next, share, next_bytes), ...);
}

// acc rows ([d channel sums | d/G zero sums]) += sum over run tokens [i0, i1) of w * v.
template <int kBits, int kRows>
void ValueAccumulateRows(const float* w, size_t w_stride, const uint8_t* blocks, size_t bb, int d, int G, int64_t i0,
                         int64_t i1, float* acc, size_t acc_stride) {
  constexpr int C = 32 / kBits;
  const DF df;
  const int n_g = d / G;
  const size_t codes = size_t(d) / C * kSub * 4;
  const VF table = CodeTable<kBits>();
  alignas(64) float W[kBatch * kRows * kSub];
  for (int64_t b0 = i0 / kSub; b0 * kSub < i1; b0 += kBatch) {
    const int nb = int(std::min<int64_t>(kBatch, (i1 + kSub - 1) / kSub - b0));
    const uint8_t* run = blocks + size_t(b0) * bb;
    // The bytes after this run (the next run, or the start of the caller's next call) are asked
    // for while this run is computed, a share with each pass over the blocks: a burst of a whole
    // run's prefetches fills the line-fill buffers and stalls. Prefetches never fault.
    const size_t next_bytes = size_t(nb) * bb, passes = size_t(d / kQuad);
    const size_t share = (next_bytes + passes - 1) / passes;
    if (b0 == i0 / kSub) PrefetchBytes(run, std::min<size_t>(next_bytes, 4 * bb));  // nobody asked for the first
    for (int g = 0; g < n_g; ++g) {
      // W[bi][r][t] = w_r(token) * scale_g(token), zero outside [i0, i1); the zeros' share apart.
      VF zsum[kRows];
      for (int r = 0; r < kRows; ++r) zsum[r] = hn::Zero(df);
      for (int bi = 0; bi < nb; ++bi) {
        const int64_t first = (b0 + bi) * kSub;
        const uint16_t* sz = reinterpret_cast<const uint16_t*>(run + size_t(bi) * bb + codes) + size_t(g) * kSub * 2;
        float* wb = W + size_t(bi) * kRows * kSub;
        if (first >= i0 && first + kSub <= i1) {  // the whole sub-block is in range
          for (int p = 0; p < kParts; ++p) {
            VF s, z;
            LoadPairs(df, reinterpret_cast<const hwy::float16_t*>(sz), p * kLanes, &s, &z);
            for (int r = 0; r < kRows; ++r) {
              const VF wv = hn::LoadU(df, w + size_t(r) * w_stride + size_t(first - i0) + p * kLanes);
              hn::Store(hn::Mul(wv, s), df, wb + r * kSub + p * kLanes);
              zsum[r] = hn::MulAdd(wv, z, zsum[r]);
            }
          }
          continue;
        }
        for (int t = 0; t < kSub; ++t) {
          const int64_t i = first + t;
          const bool in = i >= i0 && i < i1;
          const float s = f16_to_f32(sz[2 * t]), z = f16_to_f32(sz[2 * t + 1]);
          for (int r = 0; r < kRows; ++r) {
            const float wr = in ? w[size_t(r) * w_stride + size_t(i - i0)] : 0.0f;
            wb[r * kSub + t] = wr * s;
            acc[size_t(r) * acc_stride + size_t(d + g)] += wr * z;
          }
        }
      }
      for (int r = 0; r < kRows; ++r) acc[size_t(r) * acc_stride + size_t(d + g)] += hn::GetLane(hn::SumOfLanes(df, zsum[r]));
      for (int ch = g * (G / C); ch < (g + 1) * (G / C); ++ch) {
        AccumulateChunk<kBits, kRows>(table, run, bb, nb, ch, W, acc, acc_stride, run + next_bytes, share, next_bytes,
                                      std::make_index_sequence<C / kQuad>());
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
  } else {
    ValueAccumulateT<4>(w, w_stride, n_q, blocks, bb, d, G, i0, i1, acc, acc_stride);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <cmath>
#include <vector>

#include "src/kv/methods/kivi_quant.h"

namespace vq::kv {
HWY_EXPORT(KiviLanesKeyScores);
HWY_EXPORT(KiviLanesValueAccumulate);

namespace {

constexpr int kSub = 16;

int per_word(int bits) { return 32 / bits; }
// Bytes of one sub-block of 16 tokens' codes.
size_t sub_bytes(int d, int bits) { return size_t(d / per_word(bits)) * kSub * 4; }

uint32_t* word(uint8_t* sub, int ch, int t) { return reinterpret_cast<uint32_t*>(sub) + size_t(ch) * kSub + t; }
uint32_t load_word(const uint8_t* sub, int ch, int t) {
  uint32_t v;
  std::memcpy(&v, sub + (size_t(ch) * kSub + size_t(t)) * 4, 4);
  return v;
}

// Token t's codes (d of them) into the words of a sub-block.
void put_codes(const uint8_t* codes, int d, int bits, int t, uint8_t* sub) {
  const int C = per_word(bits);
  for (int ch = 0; ch < d / C; ++ch) {
    uint32_t v = 0;
    for (int k = 0; k < C; ++k) v |= uint32_t(codes[ch * C + k]) << (bits * k);
    std::memcpy(word(sub, ch, t), &v, 4);
  }
}
int get_code(const uint8_t* sub, int bits, int t, int c) {
  const int C = per_word(bits);
  return int((load_word(sub, c / C, t) >> (bits * (c % C))) & ((1u << bits) - 1));
}

class LanesKeyCodec final : public KeyCodec {
 public:
  LanesKeyCodec(int d, int bits, int group, int block)
      : d_(d), bits_(bits), G_(group), R_(block), params_(size_t(R_ / G_) * d * 4) {}
  int head_dim() const override { return d_; }
  int block_tokens() const override { return R_; }
  size_t block_bytes() const override { return params_ + size_t(R_ / kSub) * sub_bytes(d_, bits_); }

  void encode(const float* keys, int64_t, uint8_t* block) const override {
    std::vector<uint8_t> codes(size_t(R_) * d_);
    for (int j = 0; j < R_ / G_; ++j) {
      for (int c = 0; c < d_; ++c) {
        const kivi::GroupParams g = kivi::quantize_group(keys + size_t(j) * G_ * d_ + c, G_, size_t(d_), bits_,
                                                         codes.data() + size_t(j) * G_ * d_ + c, size_t(d_));
        kivi::put_params(block + (size_t(j) * d_ + c) * 4, g);
      }
    }
    for (int t = 0; t < R_; ++t) put_codes(codes.data() + size_t(t) * d_, d_, bits_, t % kSub, sub(block, t / kSub));
  }
  void decode(const uint8_t* block, int64_t, float* keys) const override {
    for (int t = 0; t < R_; ++t) {
      const int j = t / G_;
      for (int c = 0; c < d_; ++c) {
        const kivi::GroupParams g = kivi::get_params(block + (size_t(j) * d_ + c) * 4);
        keys[size_t(t) * d_ + c] = std::fma(float(get_code(sub(block, t / kSub), bits_, t % kSub, c)), g.scale, g.zero);
      }
    }
  }
  size_t query_state_floats() const override { return size_t(d_); }
  void prepare_query(const float* q, float* state) const override { std::copy_n(q, d_, state); }
  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1, float* out,
              size_t out_stride) const override {
    HWY_DYNAMIC_DISPATCH(KiviLanesKeyScores)(bits_, states, n_q, size_t(d_), blocks, block_bytes(), d_, R_, G_, i0, i1,
                                             out, out_stride);
  }

 private:
  uint8_t* sub(uint8_t* block, int u) const { return block + params_ + size_t(u) * sub_bytes(d_, bits_); }
  const uint8_t* sub(const uint8_t* block, int u) const { return block + params_ + size_t(u) * sub_bytes(d_, bits_); }
  int d_, bits_, G_, R_;
  size_t params_;
};

class LanesValueCodec final : public ValueCodec {
 public:
  LanesValueCodec(int d, int bits, int group) : d_(d), bits_(bits), G_(group), n_g_(d / group) {}
  int head_dim() const override { return d_; }
  int block_tokens() const override { return kSub; }
  size_t block_bytes() const override { return sub_bytes(d_, bits_) + size_t(n_g_) * kSub * 4; }
  void encode(const float* values, int64_t pos0, uint8_t* block) const override {
    for (int t = 0; t < kSub; ++t) encode_token(values + size_t(t) * d_, pos0 + t, t, block);
  }
  bool encodes_single_tokens() const override { return true; }
  void encode_token(const float* x, int64_t, int slot, uint8_t* block) const override {
    uint8_t codes[4096];
    for (int g = 0; g < n_g_; ++g) {
      const kivi::GroupParams p = kivi::quantize_group(x + g * G_, G_, 1, bits_, codes + g * G_, 1);
      kivi::put_params(param(block, g, slot), p);
    }
    put_codes(codes, d_, bits_, slot, block);
  }
  void decode(const uint8_t* block, int64_t, float* values) const override {
    for (int t = 0; t < kSub; ++t) {
      for (int c = 0; c < d_; ++c) {
        const kivi::GroupParams p = kivi::get_params(param(block, c / G_, t));
        values[size_t(t) * d_ + c] = std::fma(float(get_code(block, bits_, t, c)), p.scale, p.zero);
      }
    }
  }
  // Per query: d channel sums, then one sum of w * zero per group.
  size_t accum_floats() const override { return size_t(d_ + n_g_); }
  void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1,
                  float* acc) const override {
    HWY_DYNAMIC_DISPATCH(KiviLanesValueAccumulate)(bits_, w, w_stride, n_q, blocks, block_bytes(), d_, G_, i0, i1, acc,
                                                   accum_floats());
  }
  void finalize(const float* acc, int n_q, float* out) const override {
    for (int r = 0; r < n_q; ++r) {
      const float* a = acc + size_t(r) * accum_floats();
      for (int c = 0; c < d_; ++c) out[size_t(r) * d_ + c] = a[c] + a[d_ + c / G_];
    }
  }

 private:
  uint8_t* param(uint8_t* block, int g, int t) const {
    return block + sub_bytes(d_, bits_) + (size_t(g) * kSub + size_t(t)) * 4;
  }
  const uint8_t* param(const uint8_t* block, int g, int t) const {
    return block + sub_bytes(d_, bits_) + (size_t(g) * kSub + size_t(t)) * 4;
  }
  int d_, bits_, G_, n_g_;
};

}  // namespace

bool kivi_lanes_keys_apply(int d, int bits, int group, int block) {
  return (bits == 2 || bits == 4) && d % per_word(bits) == 0 && d <= 4096 && group % kSub == 0 && block % group == 0 &&
         block % kSub == 0;
}
bool kivi_lanes_values_apply(int d, int bits, int group) {
  return (bits == 2 || bits == 4) && d % per_word(bits) == 0 && d <= 4096 && group % per_word(bits) == 0 &&
         d % group == 0;
}
std::unique_ptr<KeyCodec> make_kivi_lanes_key_codec(int d, int bits, int group, int block) {
  return std::make_unique<LanesKeyCodec>(d, bits, group, block);
}
std::unique_ptr<ValueCodec> make_kivi_lanes_value_codec(int d, int bits, int group) {
  return std::make_unique<LanesValueCodec>(d, bits, group);
}

}  // namespace vq::kv
#endif
