// CommVQ (Li et al., "CommVQ: Commutative Vector Quantization for KV Cache Compression", ICML
// 2025, https://arxiv.org/abs/2506.18879; official code github.com/UMass-Embodied-AGI/CommVQ):
//
//   commvq:kbits=2,vbits=2[,residual=128,sink=0,rounds=12,seed=S]
//
// Keys are quantized **before RoPE**: the codec turns each key back from its position, divides it
// by its norm (kept in fp16, the code's "prescale"), and codes the unit vector with a residual
// vector quantizer of S = floor(kbits * d / 12) stages, each stage a 12-bit index (A, B) into
// 4096 codewords that commute with RoPE (src/kv/calib/commvq_codebook.h: at each rotary pair the
// codeword is z_A + i z_B, a sum of 2x2 blocks [[X, -Y], [Y, X]]), chosen greedily stage by stage
// by exhaustive search. The codebooks are learned per layer and KV head from calibration keys by
// EM whose M step solves the least squares of the commutative form directly (the official
// trainer's M step).
//
// Scores never decode a key into its rotated form: for a token at position p the query is turned
// back to that position, q~ = R(p)^T q, pair by pair, and dotted with the stored pre-RoPE
// reconstruction sum_s (u_{A_s} + w_{B_s}) times the norm; R(p) commutes with the codewords, so
// this equals q . R(p) k^ (tested). Reconstructions are built a tile of tokens at a time in L1.
//
// Deviations, stated:
// - Values: the paper codes values with a small neural encoder and a binary codebook trained by
//   gradient descent through the attention output. This engine has no backward pass, so values
//   use the key quantizer (norm + the same EM-trained residual codebooks, without RoPE) at vbits.
// - EM uses hard assignments (the official trainer anneals a softmax temperature to 1e-5, close
//   to hard), `rounds` rounds per stage from half-codes seeded on random residuals, on at most 4096
//   calibration vectors per layer and head (the official trainer uses up to a million tokens).
// - The norm is taken per KV head (the official code divides by the norm over all of a layer's
//   KV heads; Gemma 3 270M has one).
//
// Layout: 16 tokens per block, a row per token: the fp16 norm, then 2S 6-bit codes packed (12
// bits a stage). Bits per element (16 + 12 S) / d; the codebooks (2 x 64 x d/2 floats a stage,
// plus the search tables) are codec parameters counted in the cache's memory.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "src/core/bitpack.h"
#include "src/core/fp16.h"
#include "src/core/threads.h"
#include "src/kv/calib/commvq_codebook.h"
#include "src/kv/kernels/decode_tiles.h"
#include "src/kv/kernels/f16_kernels.h"
#include "src/kv/registry.h"
#include "src/kv/rope_table.h"
#include "veloxquant/error.h"
#include "veloxquant/kv/calibration.h"

namespace vq::kv {
namespace {

constexpr int kBlockTokens = 16;
constexpr int kMaxDim = 4096;
constexpr int64_t kMaxSamples = 4096;  // per layer, head and side: 4096 codewords a stage, 128 x d/2 parameters

int stages_for(int bits, int d) { return std::max(1, bits * d / 12); }

// A token's row: fp16 norm and the packed 6-bit codes of its stages, in the pair layout of a
// RoPE spec (pair f: channels first(f), second(f)); values use the identity spec's pairs.
class CommRows {
 public:
  CommRows(int d, const std::vector<float>& book, RopeSpec rope)
      : d_(d), book_(d, book), rope_(std::make_unique<RopeTable>(d, rope)),
        row_(2 + packed_bytes(size_t(2) * book_.stages(), 6)) {}
  int head_dim() const { return d_; }
  size_t row_bytes() const { return row_; }
  size_t param_bytes() const { return book_.bytes(); }
  const RopeTable& rope() const { return *rope_; }

  // x: a vector as the model gives it (a key after RoPE at pos, turned back when turn is set).
  void encode(const float* x, int64_t pos, bool turn, uint8_t* row) const {
    float y[kMaxDim], e[kMaxDim];
    std::copy_n(x, d_, y);
    if (turn) rope_->rotate(y, pos, /*inverse=*/true);
    double ss = 0;
    for (int j = 0; j < d_; ++j) ss += double(y[j]) * y[j];
    const float norm = float(std::sqrt(ss)), inv = norm > 0 ? 1.0f / norm : 0.0f;
    for (int f = 0; f < d_ / 2; ++f) {
      e[2 * f] = y[rope_->first(f)] * inv;
      e[2 * f + 1] = y[rope_->second(f)] * inv;
    }
    uint8_t codes[2 * kMaxDim];
    book_.encode(e, codes);
    const uint16_t h = f32_to_f16(std::min(norm, 65504.0f));
    std::memcpy(row, &h, 2);
    pack_bits(codes, size_t(2) * book_.stages(), 6, row + 2);
  }
  // The stored vector in pair layout (before RoPE for keys), norm included.
  void decode_pairs(const uint8_t* row, float* e) const {
    uint8_t codes[2 * kMaxDim];
    unpack_bits(row + 2, size_t(2) * book_.stages(), 6, codes);
    book_.decode(codes, e);
    uint16_t h;
    std::memcpy(&h, row, 2);
    const float norm = f16_to_f32(h);
    for (int j = 0; j < d_; ++j) e[j] *= norm;
  }
  // Pair layout back to channels.
  void to_channels(const float* e, float* x) const {
    for (int f = 0; f < d_ / 2; ++f) {
      x[rope_->first(f)] = e[2 * f];
      x[rope_->second(f)] = e[2 * f + 1];
    }
  }

 private:
  int d_;
  CommCodebook book_;
  std::unique_ptr<RopeTable> rope_;  // not movable (it caches angles behind a mutex)
  size_t row_;
};

template <typename Base>
class CommBlockCodec : public Base {
 public:
  CommBlockCodec(CommRows rows, bool turn) : rows_(std::move(rows)), turn_(turn) {}
  int head_dim() const override { return rows_.head_dim(); }
  int block_tokens() const override { return kBlockTokens; }
  size_t block_bytes() const override { return kBlockTokens * rows_.row_bytes(); }
  size_t param_bytes() const override { return rows_.param_bytes(); }
  void encode(const float* x, int64_t pos0, uint8_t* block) const override {
    for (int t = 0; t < kBlockTokens; ++t) encode_token(x + size_t(t) * head_dim(), pos0 + t, t, block);
  }
  bool encodes_single_tokens() const override { return true; }
  void encode_token(const float* x, int64_t pos, int slot, uint8_t* block) const override {
    rows_.encode(x, pos, turn_, block + size_t(slot) * rows_.row_bytes());
  }
  // The plain reference: channels, keys rotated to their positions.
  void decode(const uint8_t* block, int64_t pos0, float* x) const override {
    float e[kMaxDim];
    for (int t = 0; t < kBlockTokens; ++t) {
      float* y = x + size_t(t) * head_dim();
      rows_.decode_pairs(block + size_t(t) * rows_.row_bytes(), e);
      rows_.to_channels(e, y);
      if (turn_) rows_.rope().rotate(y, pos0 + t, /*inverse=*/false);
    }
  }

 protected:
  const CommRows& rows() const { return rows_; }
  // Tokens [i0, i1) of a run as pair-layout tiles.
  template <typename Fn>
  void pair_tiles(const uint8_t* blocks, int64_t i0, int64_t i1, Workspace& ws, Fn fn) const {
    const size_t row = rows_.row_bytes();
    decode_tiles(
        i0, i1, head_dim(), ws,
        [&](int64_t i, float* e) {
          rows_.decode_pairs(blocks + size_t(i / kBlockTokens) * kBlockTokens * row + size_t(i % kBlockTokens) * row, e);
        },
        fn);
  }

 private:
  CommRows rows_;
  bool turn_;
};

class CommKeyCodec final : public CommBlockCodec<KeyCodec> {
 public:
  explicit CommKeyCodec(CommRows rows) : CommBlockCodec(std::move(rows), true) {}
  // The query in pair layout.
  size_t query_state_floats() const override { return size_t(head_dim()); }
  void prepare_query(const float* q, float* state, Workspace&) const override {
    for (int f = 0; f < head_dim() / 2; ++f) {
      state[2 * f] = q[rows().rope().first(f)];
      state[2 * f + 1] = q[rows().rope().second(f)];
    }
  }
  // Per token at p: q~ = R(p)^T q pair by pair (x' = c x + s y, y' = c y - s x), dotted with the
  // stored pre-RoPE vector.
  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t pos0, int64_t i0, int64_t i1, float* out,
              size_t out_stride, Workspace& ws) const override {
    const int d = head_dim(), P = d / 2;
    const bool plain = rows().rope().identity();
    float* const cs = ws.get<float>(Workspace::kCodec0, size_t(P));
    float* const sn = ws.get<float>(Workspace::kCodec1, size_t(P));
    pair_tiles(blocks, i0, i1, ws, [&](int64_t a, int64_t n, const float* tile) {
      if (plain) {
        float_scores(states, n_q, size_t(d), tile, size_t(d), n, d, out + (a - i0), out_stride);
        return;
      }
      for (int64_t t = 0; t < n; ++t) {
        rows().rope().angles(pos0 + a + t, cs, sn);
        const float* k = tile + size_t(t) * d;
        for (int r = 0; r < n_q; ++r) {
          const float* q = states + size_t(r) * d;
          float acc = 0;
          for (int f = 0; f < P; ++f) {
            const float qx = cs[size_t(f)] * q[2 * f] + sn[size_t(f)] * q[2 * f + 1];
            const float qy = cs[size_t(f)] * q[2 * f + 1] - sn[size_t(f)] * q[2 * f];
            acc += qx * k[2 * f] + qy * k[2 * f + 1];
          }
          out[size_t(r) * out_stride + size_t(a + t - i0)] = acc;
        }
      }
    });
  }
};

// Values in pair layout; finalize puts the channels back.
class CommValueCodec final : public CommBlockCodec<ValueCodec> {
 public:
  explicit CommValueCodec(CommRows rows) : CommBlockCodec(std::move(rows), false) {}
  size_t accum_floats() const override { return size_t(head_dim()); }
  void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1,
                  float* acc, Workspace& ws) const override {
    const int d = head_dim();
    pair_tiles(blocks, i0, i1, ws, [&](int64_t a, int64_t n, const float* tile) {
      float_accumulate(w + (a - i0), w_stride, n_q, tile, size_t(d), n, d, acc, size_t(d));
    });
  }
  void finalize(const float* acc, int n_q, float* out) const override {
    for (int r = 0; r < n_q; ++r) rows().to_channels(acc + size_t(r) * head_dim(), out + size_t(r) * head_dim());
  }
};

class CommVqMethod final : public WindowedMethod {
 public:
  explicit CommVqMethod(const ParamValues& v)
      : WindowedMethod(v), kbits_(param_int(v, "kbits")), vbits_(param_int(v, "vbits")),
        rounds_(param_int(v, "rounds")), seed_(uint64_t(param_int(v, "seed"))) {}
  bool needs_calibration() const override { return true; }
  bool per_head_codecs() const override { return true; }
  std::unique_ptr<KeyCodec> key_codec(const CodecContext& ctx) const override {
    return std::make_unique<CommKeyCodec>(CommRows(ctx.head_dim, book(ctx, 0), ctx.rope));
  }
  std::unique_ptr<ValueCodec> value_codec(const CodecContext& ctx) const override {
    return std::make_unique<CommValueCodec>(CommRows(ctx.head_dim, book(ctx, 1), RopeSpec{}));
  }
  double key_bits(int d) const override { return bits(d, kbits_); }
  double value_bits(int d) const override { return bits(d, vbits_); }

  // Keys as they were before RoPE (the samples hold them so), values as they are.
  void calibrate_keys(const LayerSamples& smp, LayerCalibration* out) const override {
    learn(smp, smp.keys, smp.rope, kbits_, 1, &out->key_commvq);
  }
  void calibrate_values(const LayerSamples& smp, LayerCalibration* out) const override {
    learn(smp, smp.values, RopeSpec{}, vbits_, 2, &out->value_commvq);
  }

 private:
  static double bits(int d, int b) {
    return 8.0 * double(2 + packed_bytes(size_t(2) * stages_for(b, d), 6)) / d;
  }
  static void check_dim(int d) {
    VQ_CHECK(d >= 2 && d <= kMaxDim && d % 2 == 0,
             fmt::format("commvq: head_dim must be even and in [2, {}] (rotary pairs), got {}", kMaxDim, d));
  }
  const std::vector<float>& book(const CodecContext& ctx, int side) const {
    check_dim(ctx.head_dim);
    VQ_CHECK(ctx.calib != nullptr,
             "commvq needs a calibration: make one with `veloxquant calibrate --kv SPEC` and pass it with --calib FILE");
    const auto& heads = side == 0 ? ctx.calib->key_commvq : ctx.calib->value_commvq;
    const int d = ctx.head_dim, stages = stages_for(side == 0 ? kbits_ : vbits_, d);
    VQ_CHECK_DATA(ctx.kv_head >= 0 && size_t(ctx.kv_head) < heads.size() &&
                      heads[size_t(ctx.kv_head)].size() == size_t(stages) * 2 * 64 * size_t(d / 2),
                  fmt::format("the calibration of layer {} has no commvq {} codebook of {} stages for KV head {}",
                              ctx.layer, side == 0 ? "key" : "value", stages, ctx.kv_head));
    return heads[size_t(ctx.kv_head)];
  }
  // Per KV head: at most kMaxSamples evenly spaced vectors, normalized, in pair layout.
  void learn(const LayerSamples& smp, const std::vector<float>& all, RopeSpec pairs, int bits, int side,
             std::vector<std::vector<float>>* out) const {
    const int d = smp.head_dim, H = smp.n_kv_heads;
    check_dim(d);
    const RopeTable rope(d, pairs);
    const int64_t m = std::min(smp.n_tokens, kMaxSamples);
    out->assign(size_t(H), {});
    for (int h = 0; h < H; ++h) {
      std::vector<float> rows(size_t(m) * d);
      for (int64_t i = 0; i < m; ++i) {
        const float* x = all.data() + (size_t((i * smp.n_tokens) / m) * H + size_t(h)) * d;
        double ss = 0;
        for (int j = 0; j < d; ++j) ss += double(x[j]) * x[j];
        const float inv = ss > 0 ? float(1.0 / std::sqrt(ss)) : 0.0f;
        float* e = rows.data() + size_t(i) * d;
        for (int f = 0; f < d / 2; ++f) {
          e[2 * f] = x[rope.first(f)] * inv;
          e[2 * f + 1] = x[rope.second(f)] * inv;
        }
      }
      (*out)[size_t(h)] = train_comm_codebook(rows, m, d, stages_for(bits, d), rounds_,
                                              layer_seed(seed_, h, side));
    }
  }

  int kbits_, vbits_, rounds_;
  uint64_t seed_;
};

}  // namespace

const MethodDef& commvq_method() {
  static const MethodDef def{
      {"commvq",
       "CommVQ: pre-RoPE keys, residual VQ with RoPE-commutative 12-bit codebooks learned by EM; query turned to each "
       "key's position",
       windowed_method_params(
           {
               {"kbits", ParamType::kInt, 2, 1, 4, "key bits per element: floor(kbits * d / 12) stages of 12-bit codes", {}},
               {"vbits", ParamType::kInt, 2, 1, 4, "value bits per element, as for keys", {}},
               {"rounds", ParamType::kInt, 12, 1, 100, "EM rounds per stage in calibration", {}},
               {"seed", ParamType::kInt, 1234, 0, 2147483647, "seed of the codebook initialization", {}},
           },
           /*residual_default=*/128)},  // the official code keeps 128 recent tokens
      [](const ParamValues& v) -> std::unique_ptr<MethodImpl> { return std::make_unique<CommVqMethod>(v); }};
  return def;
}

}  // namespace vq::kv
