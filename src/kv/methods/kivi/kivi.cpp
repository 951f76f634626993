// KIVI (Liu et al., "KIVI: A Tuning-Free Asymmetric 2bit Quantization for KV Cache", ICML 2024,
// https://arxiv.org/abs/2402.02750): asymmetric min/max round-to-nearest quantization with keys
// grouped per channel and values per token, and an fp16 residual window of the newest tokens.
//
//   kivi:kbits=2,vbits=2,group=32,residual=128[,kaxis=token]
//
// Keys: the window fills to `residual` tokens, then all of them are quantized as one block; in the
// block each channel is split into groups of `group` tokens (the last may be shorter), each with
// scale = (max - min) / (2^b - 1) and zero = min stored in fp16. Values: per token, groups of
// `group` channels with the same rule; they leave the window one at a time, oldest first, as in
// the paper's code. kaxis=token quantizes keys per token like values (the paper's ablation).
//
// Scores from the packed per-channel codes: within a token group, q.k = sum_c (q_c s_c) code_c +
// sum_c q_c z_c, so the query is scaled by the group's scales once and each token costs one dot
// product with its codes (widened to floats a group at a time). Values: the tokens of an
// attention tile are decoded into a cache-resident scratch and accumulated by the shared fused
// kernel. At 2, 3 and 4 bits the codes take the layout of kivi_lanes.h instead (3 bits when the
// head size is a multiple of 32, as lo + 4 hi in a 2-bit and a 1-bit plane), whose
// fused paths are integer byte dot products with the query (folded with the group's scales) and
// the weights held in 16-bit fixed point: a deliberate deviation from KIVI's fp16 arithmetic,
// each operand within 1/65024 of its group's or run's largest magnitude.
//
// Bits per element (counted honestly): keys b + 32 * ceil(R/G) / R, values b + 32 * ceil(d/G) / d
// (an fp16 scale and zero per group); the fp16 window is reported apart.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "src/core/bitpack.h"
#include "src/core/fp16.h"
#include "src/kv/kernels/f16_kernels.h"
#include "src/kv/methods/kivi/kivi_lanes.h"
#include "src/kv/methods/kivi/kivi_quant.h"
#include "src/kv/registry.h"
#include "src/kv/kernels/vector_ops.h"
#include "veloxquant/error.h"

namespace vq::kv {
namespace {
using kivi::GroupParams;
using kivi::get_params;
using kivi::put_params;
using kivi::quantize_group;

// Keys per channel, a block of R tokens: [ceil(R/G) token groups x d channels x (scale, zero)]
// then R rows of d packed codes.
class KiviChannelKeyCodec final : public KeyCodec {
 public:
  KiviChannelKeyCodec(int d, int bits, int group, int block)
      : d_(d), bits_(bits), G_(std::min(group, block)), R_(block), n_tg_((block + G_ - 1) / G_),
        row_bytes_(packed_bytes(size_t(d), bits)), param_bytes_(size_t(n_tg_) * d * 4) {}
  int head_dim() const override { return d_; }
  int block_tokens() const override { return R_; }
  size_t block_bytes() const override { return param_bytes_ + size_t(R_) * row_bytes_; }

  void encode(const float* keys, int64_t, uint8_t* block) const override {
    std::vector<uint8_t> codes(size_t(R_) * d_);
    for (int j = 0; j < n_tg_; ++j) {
      const int t0 = j * G_, n = std::min(G_, R_ - t0);
      for (int c = 0; c < d_; ++c) {
        const GroupParams g = quantize_group(keys + size_t(t0) * d_ + c, n, size_t(d_), bits_,
                                             codes.data() + size_t(t0) * d_ + c, size_t(d_));
        put_params(block + (size_t(j) * d_ + c) * 4, g);
      }
    }
    for (int t = 0; t < R_; ++t) pack_bits(codes.data() + size_t(t) * d_, size_t(d_), bits_, row(block, t));
  }

  void decode(const uint8_t* block, int64_t, float* keys) const override {
    std::vector<uint8_t> codes(static_cast<size_t>(d_));
    for (int t = 0; t < R_; ++t) {
      unpack_bits(row(block, t), size_t(d_), bits_, codes.data());
      const int j = t / G_;
      for (int c = 0; c < d_; ++c) {
        const GroupParams g = get_params(block + (size_t(j) * d_ + c) * 4);
        keys[size_t(t) * d_ + c] = std::fma(float(codes[size_t(c)]), g.scale, g.zero);
      }
    }
  }

  size_t query_state_floats() const override { return size_t(d_); }
  void prepare_query(const float* q, float* state, Workspace&) const override { std::copy_n(q, d_, state); }

  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1, float* out,
              size_t out_stride, Workspace& ws) const override {
    // Per token group: the query scaled by the group's per-channel scales (once), the bias
    // sum_c q_c z_c, and the group's codes as floats in a small scratch; then one fused call.
    float* const qs = ws.get<float>(Workspace::kCodec0, size_t(n_q) * d_);
    float* const bias = ws.get<float>(Workspace::kCodec1, size_t(n_q));
    float* const tile = ws.get<float>(Workspace::kCodec2, size_t(G_) * d_);
    float* const sc = ws.get<float>(Workspace::kCodec3, size_t(d_));
    float* const zr = ws.get<float>(Workspace::kCodec4, size_t(d_));
    uint8_t* const codes = ws.get<uint8_t>(Workspace::kCodec5, size_t(d_));
    for (int64_t i = i0; i < i1;) {
      const int64_t b = i / R_;
      const int t = int(i % R_), j = t / G_;
      const int t_end = int(std::min<int64_t>(std::min((j + 1) * G_, R_), t + (i1 - i)));
      const uint8_t* block = blocks + size_t(b) * block_bytes();
      const uint8_t* params = block + size_t(j) * d_ * 4;
      for (int c = 0; c < d_; ++c) {
        const GroupParams g = get_params(params + size_t(c) * 4);
        sc[size_t(c)] = g.scale;
        zr[size_t(c)] = g.zero;
      }
      dot_rows(states, n_q, size_t(d_), zr, d_, bias, 1);
      for (int r = 0; r < n_q; ++r) {
        for (int c = 0; c < d_; ++c) qs[size_t(r) * d_ + c] = states[size_t(r) * d_ + c] * sc[size_t(c)];
      }
      for (int u = t; u < t_end; ++u) {
        unpack_bits(row(block, u), size_t(d_), bits_, codes);
        affine_u8(codes, d_, 1.0f, 0.0f, tile + size_t(u - t) * d_);
      }
      float* o = out + (i - i0);
      float_scores(qs, n_q, size_t(d_), tile, size_t(d_), t_end - t, d_, o, out_stride);
      for (int r = 0; r < n_q; ++r) {
        for (int u = 0; u < t_end - t; ++u) o[size_t(r) * out_stride + size_t(u)] += bias[size_t(r)];
      }
      i += t_end - t;
    }
  }

 private:
  uint8_t* row(uint8_t* block, int t) const { return block + param_bytes_ + size_t(t) * row_bytes_; }
  const uint8_t* row(const uint8_t* block, int t) const { return block + param_bytes_ + size_t(t) * row_bytes_; }
  int d_, bits_, G_, R_, n_tg_;
  size_t row_bytes_, param_bytes_;
};

// One token per block: [ceil(d/G) channel groups x (scale, zero)] then d packed codes. Used for
// values, and for keys with kaxis=token.
class KiviTokenCodec {
 public:
  KiviTokenCodec(int d, int bits, int group)
      : d_(d), bits_(bits), G_(std::min(group, d)), n_g_((d + G_ - 1) / G_),
        param_bytes_(size_t(n_g_) * 4), bytes_(param_bytes_ + packed_bytes(size_t(d), bits)) {}
  size_t bytes() const { return bytes_; }

  void encode(const float* x, uint8_t* tok) const {
    std::vector<uint8_t> codes(static_cast<size_t>(d_));
    for (int g = 0; g < n_g_; ++g) {
      const int c0 = g * G_, n = std::min(G_, d_ - c0);
      put_params(tok + size_t(g) * 4, quantize_group(x + c0, n, 1, bits_, codes.data() + c0, 1));
    }
    pack_bits(codes.data(), size_t(d_), bits_, tok + param_bytes_);
  }
  // Tokens [i0, i1) of a run decoded into the workspace (one attention tile, at most a few
  // hundred tokens: it stays in cache; no full-length fp16/fp32 copy is ever built).
  const float* decode_run(const uint8_t* blocks, int64_t i0, int64_t i1, Workspace& ws) const {
    float* const tile = ws.get<float>(Workspace::kCodec0, size_t(i1 - i0) * d_);
    for (int64_t i = i0; i < i1; ++i) decode(blocks + size_t(i) * bytes_, tile + size_t(i - i0) * d_);
    return tile;
  }
  // Decodes into out[d] (the reference, and the fused paths' per-token step).
  void decode(const uint8_t* tok, float* out) const {
    uint8_t codes[4096];
    float params[2 * 4096];  // (scale, zero) per group, converted together
    unpack_bits(tok + param_bytes_, size_t(d_), bits_, codes);
    f16_to_f32(reinterpret_cast<const uint16_t*>(tok), params, size_t(2 * n_g_));
    for (int g = 0; g < n_g_; ++g) {
      const int c0 = g * G_, n = std::min(G_, d_ - c0);
      affine_u8(codes + c0, n, params[2 * g], params[2 * g + 1], out + c0);
    }
  }

 private:
  int d_, bits_, G_, n_g_;
  size_t param_bytes_, bytes_;
};

class KiviTokenKeyCodec final : public KeyCodec {
 public:
  KiviTokenKeyCodec(int d, int bits, int group) : d_(d), c_(d, bits, group) {}
  int head_dim() const override { return d_; }
  int block_tokens() const override { return 1; }
  size_t block_bytes() const override { return c_.bytes(); }
  void encode(const float* keys, int64_t, uint8_t* block) const override { c_.encode(keys, block); }
  void decode(const uint8_t* block, int64_t, float* keys) const override { c_.decode(block, keys); }
  size_t query_state_floats() const override { return size_t(d_); }
  void prepare_query(const float* q, float* state, Workspace&) const override { std::copy_n(q, d_, state); }
  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1, float* out,
              size_t out_stride, Workspace& ws) const override {
    const float* tile = c_.decode_run(blocks, i0, i1, ws);
    float_scores(states, n_q, size_t(d_), tile, size_t(d_), i1 - i0, d_, out, out_stride);
  }

 private:
  int d_;
  KiviTokenCodec c_;
};

class KiviValueCodec final : public ValueCodec {
 public:
  KiviValueCodec(int d, int bits, int group) : d_(d), c_(d, bits, group) {}
  int head_dim() const override { return d_; }
  int block_tokens() const override { return 1; }
  size_t block_bytes() const override { return c_.bytes(); }
  void encode(const float* values, int64_t, uint8_t* block) const override { c_.encode(values, block); }
  void decode(const uint8_t* block, int64_t, float* values) const override { c_.decode(block, values); }
  size_t accum_floats() const override { return size_t(d_); }
  void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1,
                  float* acc, Workspace& ws) const override {
    const float* tile = c_.decode_run(blocks, i0, i1, ws);
    float_accumulate(w, w_stride, n_q, tile, size_t(d_), i1 - i0, d_, acc, size_t(d_));
  }
  void finalize(const float* acc, int n_q, float* out) const override { std::copy_n(acc, size_t(n_q) * d_, out); }

 private:
  int d_;
  KiviTokenCodec c_;
};

class KiviMethod final : public MethodImpl {
 public:
  explicit KiviMethod(const ParamValues& v)
      : kbits_(param_int(v, "kbits")), vbits_(param_int(v, "vbits")), group_(param_int(v, "group")),
        residual_(param_int(v, "residual")), per_token_keys_(param_int(v, "kaxis") == 1) {}
  std::unique_ptr<KeyCodec> key_codec(const CodecContext& ctx) const override {
    check(ctx.head_dim);
    if (per_token_keys_) return std::make_unique<KiviTokenKeyCodec>(ctx.head_dim, kbits_, group_);
    const int G = std::min(group_, key_block());
    if (kivi_lanes_keys_apply(ctx.head_dim, kbits_, G, key_block())) {
      return make_kivi_lanes_key_codec(ctx.head_dim, kbits_, G, key_block());
    }
    return std::make_unique<KiviChannelKeyCodec>(ctx.head_dim, kbits_, group_, key_block());
  }
  std::unique_ptr<ValueCodec> value_codec(const CodecContext& ctx) const override {
    check(ctx.head_dim);
    const int G = std::min(group_, ctx.head_dim);
    if (kivi_lanes_values_apply(ctx.head_dim, vbits_, G)) return make_kivi_lanes_value_codec(ctx.head_dim, vbits_, G);
    return std::make_unique<KiviValueCodec>(ctx.head_dim, vbits_, group_);
  }
  double key_bits(int d) const override {
    if (per_token_keys_) return token_bits(kbits_, d);
    const int G = std::min(group_, key_block());
    const int groups = (key_block() + G - 1) / G;
    return kbits_ + 32.0 * groups / key_block();
  }
  double value_bits(int d) const override { return token_bits(vbits_, d); }
  // Per-channel keys are quantized a whole block at a time, so nothing stays behind; per-token
  // keys and values keep the newest `residual` tokens in fp16.
  int key_keep() const override { return per_token_keys_ ? residual_ : 0; }
  int value_keep() const override { return residual_; }

 private:
  int key_block() const { return residual_ > 0 ? residual_ : group_; }
  double token_bits(int bits, int d) const {
    const int G = std::min(group_, d);
    return bits + 32.0 * ((d + G - 1) / G) / d;
  }
  static void check(int d) { VQ_CHECK(d <= 4096, fmt::format("kivi: head_dim {} above 4096", d)); }
  int kbits_, vbits_, group_, residual_;
  bool per_token_keys_;
};

}  // namespace

const MethodDef& kivi_method() {
  static const MethodDef def{
      {"kivi",
       "KIVI: asymmetric min/max quantization, keys per channel, values per token, fp16 residual window",
       {
           {"kbits", ParamType::kInt, 2, 2, 4, "bits per key code", {}},
           {"vbits", ParamType::kInt, 2, 2, 4, "bits per value code", {}},
           {"group", ParamType::kInt, 32, 1, 1024, "group size (tokens per key group, channels per value group)", {}},
           {"residual", ParamType::kInt, 128, 0, 65536, "newest tokens kept in fp16 (keys leave in whole blocks of this)", {}},
           {"kaxis", ParamType::kChoice, 0, 0, 1, "key grouping axis (token: the paper's ablation)", {"channel", "token"}},
       }},
      [](const ParamValues& v) -> std::unique_ptr<MethodImpl> { return std::make_unique<KiviMethod>(v); }};
  return def;
}

}  // namespace vq::kv
