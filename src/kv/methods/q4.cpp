// q4: 4-bit codes per group of 32 channels with an fp16 scale (4.5 bits), quantized like
// llama.cpp's q4_0, stored in blocks of 16 interleaved tokens (q4_layout.h). Optional randomized
// Hadamard rotation (rot=1).
//
// The kernels put tokens in the vector lanes. A 64-byte load gives eight channels of 16 tokens;
// each channel's codes become floats (code - 8) with one shift and one 16-entry table lookup
// (vpermps on AVX-512, which reads only the low four bits of each index), so a channel costs
// two operations for 16 tokens, against the FMAs that use it once per query row.
//   scores:     part_r += q_r[j] * (code_j - 8) over a group's 32 channels, then
//               score_r += scale_g * part_r, all with tokens in lanes: no horizontal sums.
//   accumulate: acc_r[j] += sum over tokens of (w_r * scale_g) * (code_j - 8); four channels x
//               the query rows stay in registers over a run of up to 256 tokens and are summed
//               across lanes once per run, not once per token.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/methods/q4.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include <cstring>
#include <type_traits>

#include "hwy/highway.h"
#include "src/kv/fused_kernels-inl.h"
#include "src/kv/methods/q4_layout.h"

HWY_BEFORE_NAMESPACE();
namespace vq::kv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
using DU = hn::RebindToUnsigned<DF>;
using VU = hn::Vec<DU>;
constexpr int kLanes = int(hn::MaxLanes(DF()));
constexpr int kParts = q4::kBlockTokens / kLanes;  // vectors per 16 tokens
static_assert(q4::kBlockTokens % kLanes == 0, "16 tokens must be whole vectors");

// (code - 8) as float for the code in the low four bits of each lane of x.
HWY_INLINE VF Centered(VF table, VU x) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  return VF{_mm512_permutexvar_ps(x.raw, table.raw)};  // uses bits 0..3 of each index only
#else
  (void)table;
  const DF df;
  const hn::RebindToSigned<DF> di;
  return hn::Sub(hn::ConvertTo(df, hn::BitCast(di, hn::And(x, hn::Set(DU(), 15u)))), hn::Set(df, 8.0f));
#endif
}

HWY_INLINE VF CenteredTable() {
  alignas(64) static constexpr float kTable[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};
  return hn::LoadU(DF(), kTable);  // only the first kLanes entries matter off AVX-512
}

template <int k>
HWY_INLINE VU Nibble(VU x) {
  if constexpr (k == 0) {
    return x;
  } else {
    return hn::ShiftRight<4 * k>(x);
  }
}

// part[k % 2][r][p] += q_r[k] * (code_k - 8) for channel k of the chunk loaded in x. Even and
// odd channels feed separate sums so that 2 * kRows FMA chains are in flight, enough to hide the
// FMA latency with four query rows.
template <int k, int kRows>
HWY_INLINE void ScoreChannel(VF table, const VU* x, const float* HWY_RESTRICT qc, size_t qs,
                             VF (*part)[kRows][kParts]) {
  const DF df;
  VF v[kParts];
  for (int p = 0; p < kParts; ++p) v[p] = Centered(table, Nibble<k>(x[p]));
  for (int r = 0; r < kRows; ++r) {
    const VF qb = hn::Set(df, qc[size_t(r) * qs + k]);
    for (int p = 0; p < kParts; ++p) part[k % 2][r][p] = hn::MulAdd(qb, v[p], part[k % 2][r][p]);
  }
}

// out[r * out_stride + t] = q_r . x_t for the 16 tokens of one block.
template <int kRows>
HWY_INLINE void ScoreBlock(const float* HWY_RESTRICT q, size_t qs, const uint8_t* HWY_RESTRICT blk, int d,
                           float* HWY_RESTRICT out, size_t out_stride) {
  const DF df;
  const DU du;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const int C = q4::n_chunks(d), G = q4::n_groups(d);
  const uint32_t* words = reinterpret_cast<const uint32_t*>(blk);
  const hwy::float16_t* scales = reinterpret_cast<const hwy::float16_t*>(blk + q4::codes_bytes(d));
  const VF table = CenteredTable();
  VF acc[kRows][kParts];
  for (int r = 0; r < kRows; ++r) {
    for (int p = 0; p < kParts; ++p) acc[r][p] = hn::Zero(df);
  }
  for (int g = 0; g < G; ++g) {
    VF part[2][kRows][kParts];
    for (int e = 0; e < 2; ++e) {
      for (int r = 0; r < kRows; ++r) {
        for (int p = 0; p < kParts; ++p) part[e][r][p] = hn::Zero(df);
      }
    }
    const int c_end = std::min(C, (g + 1) * (q4::kGroup / q4::kChunk));
    for (int c = g * (q4::kGroup / q4::kChunk); c < c_end; ++c) {
      VU x[kParts];
      for (int p = 0; p < kParts; ++p) x[p] = hn::LoadU(du, words + c * q4::kBlockTokens + p * kLanes);
      const float* qc = q + c * q4::kChunk;
      ScoreChannel<0, kRows>(table, x, qc, qs, part);
      ScoreChannel<1, kRows>(table, x, qc, qs, part);
      ScoreChannel<2, kRows>(table, x, qc, qs, part);
      ScoreChannel<3, kRows>(table, x, qc, qs, part);
      ScoreChannel<4, kRows>(table, x, qc, qs, part);
      ScoreChannel<5, kRows>(table, x, qc, qs, part);
      ScoreChannel<6, kRows>(table, x, qc, qs, part);
      ScoreChannel<7, kRows>(table, x, qc, qs, part);
    }
    for (int p = 0; p < kParts; ++p) {
      const VF s = hn::PromoteTo(df, hn::LoadU(dh, scales + g * q4::kBlockTokens + p * kLanes));
      for (int r = 0; r < kRows; ++r) acc[r][p] = hn::MulAdd(s, hn::Add(part[0][r][p], part[1][r][p]), acc[r][p]);
    }
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
    PrefetchBytes(blk + 2 * bb, bb);
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

constexpr int kBatchBlocks = 16;  // blocks whose weights are staged at once (256 tokens)

// A[r][kk][p] += W_r * (code - 8) for channels 4h .. 4h+3 of the chunk in x.
template <int h, int kRows>
HWY_INLINE void AccumulateQuad(VF table, const VU* x, const float* HWY_RESTRICT wb, VF (*A)[4][kParts]) {
  const DF df;
  const auto one = [&](auto kk_tag) {
    constexpr int kk = decltype(kk_tag)::value;
    VF v[kParts];
    for (int p = 0; p < kParts; ++p) v[p] = Centered(table, Nibble<4 * h + kk>(x[p]));
    for (int r = 0; r < kRows; ++r) {
      for (int p = 0; p < kParts; ++p) {
        A[r][kk][p] = hn::MulAdd(hn::Load(df, wb + r * q4::kBlockTokens + p * kLanes), v[p], A[r][kk][p]);
      }
    }
  };
  one(std::integral_constant<int, 0>());
  one(std::integral_constant<int, 1>());
  one(std::integral_constant<int, 2>());
  one(std::integral_constant<int, 3>());
}

template <int h, int kRows>
HWY_INLINE void AccumulateHalfChunk(VF table, const uint8_t* HWY_RESTRICT blocks, size_t bb, int nb, int c,
                                    const float* HWY_RESTRICT W, float* HWY_RESTRICT acc, size_t acc_stride) {
  const DF df;
  const DU du;
  constexpr int B = q4::kBlockTokens;
  VF A[kRows][4][kParts];
  for (int r = 0; r < kRows; ++r) {
    for (int kk = 0; kk < 4; ++kk) {
      for (int p = 0; p < kParts; ++p) A[r][kk][p] = hn::Zero(df);
    }
  }
  for (int bi = 0; bi < nb; ++bi) {
    const uint32_t* words = reinterpret_cast<const uint32_t*>(blocks + size_t(bi) * bb) + c * B;
    VU x[kParts];
    for (int p = 0; p < kParts; ++p) x[p] = hn::LoadU(du, words + p * kLanes);
    AccumulateQuad<h, kRows>(table, x, W + size_t(bi) * kRows * B, A);
  }
  AddLaneSums<kRows, kParts>(A, acc + c * q4::kChunk + 4 * h, acc_stride);
}

// acc rows += sum over tokens [i0, i1) of w * v, for kRows rows.
template <int kRows>
void AccumulateRows(const float* w, size_t w_stride, const uint8_t* blocks, int64_t i0, int64_t i1, int d, float* acc,
                    size_t acc_stride) {
  const DF df;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const size_t bb = q4::block_bytes(d);
  const int C = q4::n_chunks(d), G = q4::n_groups(d);
  const VF table = CenteredTable();
  constexpr int B = q4::kBlockTokens;
  alignas(64) float W[kBatchBlocks * kRows * B];
  for (int64_t b0 = i0 / B; b0 * B < i1; b0 += kBatchBlocks) {
    const int nb = int(std::min<int64_t>(kBatchBlocks, (i1 + B - 1) / B - b0));
    const uint8_t* run = blocks + size_t(b0) * bb;
    for (int bi = 0; bi < nb; ++bi) PrefetchBytes(run + size_t(bi) * bb, bb);
    for (int g = 0; g < G; ++g) {
      // Stage W[bi][r][t] = w_r(token) * scale_g(token), zero outside [i0, i1).
      for (int bi = 0; bi < nb; ++bi) {
        const int64_t first = (b0 + bi) * B;
        const hwy::float16_t* sc =
            reinterpret_cast<const hwy::float16_t*>(run + size_t(bi) * bb + q4::scale_offset(d, g, 0));
        float* wb = W + size_t(bi) * kRows * B;
        if (first >= i0 && first + B <= i1) {
          for (int p = 0; p < kParts; ++p) {
            const VF s = hn::PromoteTo(df, hn::LoadU(dh, sc + p * kLanes));
            for (int r = 0; r < kRows; ++r) {
              const VF wv = hn::LoadU(df, w + size_t(r) * w_stride + size_t(first - i0) + p * kLanes);
              hn::Store(hn::Mul(wv, s), df, wb + r * B + p * kLanes);
            }
          }
        } else {
          for (int t = 0; t < B; ++t) {
            const int64_t i = first + t;
            uint16_t bits;
            std::memcpy(&bits, sc + t, 2);
            const float s = f16_to_f32(bits);
            for (int r = 0; r < kRows; ++r) {
              wb[r * B + t] = i >= i0 && i < i1 ? w[size_t(r) * w_stride + size_t(i - i0)] * s : 0.0f;
            }
          }
        }
      }
      const int c_end = std::min(C, (g + 1) * (q4::kGroup / q4::kChunk));
      for (int c = g * (q4::kGroup / q4::kChunk); c < c_end; ++c) {
        AccumulateHalfChunk<0, kRows>(table, run, bb, nb, c, W, acc, acc_stride);
        AccumulateHalfChunk<1, kRows>(table, run, bb, nb, c, W, acc, acc_stride);
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

// The padded width: query states and accumulators cover whole 8-channel chunks.
int padded(int d) { return q4::n_chunks(d) * q4::kChunk; }

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
  size_t query_state_floats() const override { return size_t(padded(d_)); }
  void prepare_query(const float* q, float* state) const override {
    std::copy_n(q, d_, state);
    std::fill(state + d_, state + padded(d_), 0.0f);
  }
  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1, float* out,
              size_t out_stride) const override {
    HWY_DYNAMIC_DISPATCH(Q4Scores)(states, n_q, size_t(padded(d_)), blocks, i0, i1, d_, out, out_stride);
  }

 private:
  int d_;
};

class Q4ValueCodec final : public ValueCodec {
 public:
  explicit Q4ValueCodec(int d) : d_(d) { check_dim(d); }
  int head_dim() const override { return d_; }
  int block_tokens() const override { return q4::kBlockTokens; }
  size_t block_bytes() const override { return q4::block_bytes(d_); }
  void encode(const float* values, int64_t, uint8_t* block) const override {
    for (int t = 0; t < q4::kBlockTokens; ++t) q4::encode_token(values + size_t(t) * d_, d_, t, block);
  }
  bool encodes_single_tokens() const override { return true; }
  void encode_token(const float* value, int64_t, int slot, uint8_t* block) const override {
    q4::encode_token(value, d_, slot, block);
  }
  void decode(const uint8_t* block, int64_t, float* values) const override { q4::decode_block(block, d_, values); }
  size_t accum_floats() const override { return size_t(padded(d_)); }
  void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1,
                  float* acc) const override {
    HWY_DYNAMIC_DISPATCH(Q4Accumulate)(w, w_stride, n_q, blocks, i0, i1, d_, acc, accum_floats());
  }
  void finalize(const float* acc, int n_q, float* out) const override {
    for (int r = 0; r < n_q; ++r) std::copy_n(acc + size_t(r) * padded(d_), d_, out + size_t(r) * d_);
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
                              [](int d) { return q4::bits_per_element(d); }},
                             v);
      }};
  return def;
}

}  // namespace vq::kv
#endif
