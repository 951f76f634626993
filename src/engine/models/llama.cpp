// Llama-family decoder (arch "llama", and "qwen2" with its QKV biases and NEOX RoPE): RMSNorm,
// grouped-query attention with RoPE, SwiGLU FFN, optional tied output. Follows llama.cpp's
// llm_build_llama / llm_build_qwen2.
#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "src/core/threads.h"
#include "src/engine/model.h"
#include "src/engine/ops.h"
#include "veloxquant/error.h"

namespace vq::engine {
namespace {

class Llama final : public Model {
 public:
  explicit Llama(std::unique_ptr<GgufFile> f) {
    file_ = std::move(f);
    const GgufFile& g = *file_;
    ModelConfig& c = cfg_;
    c.arch = g.get_string("general.architecture");
    neox_ = c.arch == "qwen2";
    c.rope_neox = neox_;
    const auto key = [&](const char* k) { return c.arch + "." + k; };
    const auto ranged = [&](const char* k, int64_t lo, int64_t hi) {
      const int64_t v = g.get_int(key(k));
      VQ_CHECK_DATA(v >= lo && v <= hi, fmt::format("{}: {} = {} is out of range", g.path(), key(k), v));
      return int(v);
    };
    c.n_layer = ranged("block_count", 1, 1024);
    c.n_embd = ranged("embedding_length", 1, 1 << 16);
    c.n_head = ranged("attention.head_count", 1, 1024);
    const int64_t n_head_kv = g.get_int(key("attention.head_count_kv"), c.n_head);
    VQ_CHECK_DATA(n_head_kv >= 1 && n_head_kv <= c.n_head,
                  fmt::format("{}: head_count_kv {} is out of range", g.path(), n_head_kv));
    c.n_head_kv = int(n_head_kv);
    VQ_CHECK_DATA(c.n_head_kv >= 1 && c.n_head % c.n_head_kv == 0,
                  fmt::format("{}: head_count {} is not a multiple of head_count_kv {}", g.path(), c.n_head, c.n_head_kv));
    VQ_CHECK_DATA(c.n_embd % c.n_head == 0, fmt::format("{}: embedding_length is not a multiple of head_count", g.path()));
    const int64_t head_dim = g.get_int(key("attention.key_length"), c.n_embd / c.n_head);
    VQ_CHECK_DATA(head_dim >= 2 && head_dim <= 1024, fmt::format("{}: bad head size {}", g.path(), head_dim));
    c.head_dim = int(head_dim);
    VQ_CHECK_DATA(c.head_dim >= 2 && c.head_dim % 2 == 0 && c.head_dim <= 1024, fmt::format("{}: bad head size", g.path()));
    const int64_t n_rot = g.get_int(key("rope.dimension_count"), c.head_dim);
    VQ_CHECK_DATA(n_rot == c.head_dim, fmt::format("{}: partial rotary embeddings are not supported", g.path()));
    c.n_ff = ranged("feed_forward_length", 1, 1 << 20);
    c.n_ctx_train = g.get_int(key("context_length"), 4096);
    c.rms_eps = float(g.get_float(key("attention.layer_norm_rms_epsilon"), 1e-5));
    c.rope_base = float(g.get_float(key("rope.freq_base"), 10000.0));
    if (g.has(key("rope.scaling.factor")) && g.get_string(key("rope.scaling.type"), "linear") == "linear") {
      c.rope_scale = 1.0f / float(g.get_float(key("rope.scaling.factor")));
    }
    c.swa_layer.assign(size_t(c.n_layer), false);
    c.attn_scale = 1.0f / std::sqrt(float(c.head_dim));
    validate_config();
    tok_ = std::make_unique<Tokenizer>(g);
    c.n_vocab = tok_->n_vocab();

    embd_ = weight("token_embd.weight", c.n_vocab, c.n_embd);
    out_ = g.find_tensor("output.weight") ? weight("output.weight", c.n_vocab, c.n_embd) : embd_;
    out_norm_ = vector("output_norm.weight", c.n_embd);
    const int64_t qd = int64_t(c.n_head) * c.head_dim, kvd = int64_t(c.n_head_kv) * c.head_dim;
    for (int l = 0; l < c.n_layer; ++l) {
      const auto n = [l](const char* s) { return fmt::format("blk.{}.{}", l, s); };
      const auto bias = [&](const char* s, int64_t len) -> const float* {
        return g.find_tensor(n(s)) ? vector(n(s), len) : nullptr;
      };
      Layer L;
      L.attn_norm = vector(n("attn_norm.weight"), c.n_embd);
      L.ffn_norm = vector(n("ffn_norm.weight"), c.n_embd);
      L.wq = weight(n("attn_q.weight"), qd, c.n_embd);
      L.wk = weight(n("attn_k.weight"), kvd, c.n_embd);
      L.wv = weight(n("attn_v.weight"), kvd, c.n_embd);
      L.wo = weight(n("attn_output.weight"), c.n_embd, qd);
      L.bq = bias("attn_q.bias", qd);
      L.bk = bias("attn_k.bias", kvd);
      L.bv = bias("attn_v.bias", kvd);
      L.gate = weight(n("ffn_gate.weight"), c.n_ff, c.n_embd);
      L.up = weight(n("ffn_up.weight"), c.n_ff, c.n_embd);
      L.down = weight(n("ffn_down.weight"), c.n_embd, c.n_ff);
      layers_.push_back(L);
    }
  }

  void forward(const int32_t* tokens, int n, int64_t pos0, kv::KvCache& cache, const uint8_t* want_logits,
               float* logits) const override {
    const ModelConfig& c = cfg_;
    VQ_CHECK(int(cache.n_layers()) == c.n_layer, "forward: cache has the wrong number of layers");
    const int64_t E = c.n_embd, F = c.n_ff, D = c.head_dim;
    const int64_t QD = int64_t(c.n_head) * D, KD = int64_t(c.n_head_kv) * D;
    std::vector<float> x(size_t(n * E)), h(x.size()), o(x.size());
    std::vector<float> q(size_t(n * QD)), k(size_t(n * KD)), v(size_t(n * KD)), att(q.size());
    std::vector<float> g(size_t(n * F)), u(g.size());
    std::vector<int64_t> pos(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      VQ_CHECK(tokens[i] >= 0 && tokens[i] < c.n_vocab, fmt::format("token id {} is outside the vocabulary", tokens[i]));
      pos[size_t(i)] = pos0 + i;
    }
    parallel_for(n, [&](int64_t i) { weight_row(embd_, tokens[i], x.data() + i * E); });
    const auto add_bias = [n](float* y, const float* b, int64_t len) {
      if (!b) return;
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < len; ++j) y[i * len + j] += b[j];
      }
    };
    for (int l = 0; l < c.n_layer; ++l) {
      const Layer& L = layers_[size_t(l)];
      rms_norm(x.data(), L.attn_norm, n, E, c.rms_eps, h.data());
      matmul(L.wq, h.data(), n, q.data());
      matmul(L.wk, h.data(), n, k.data());
      matmul(L.wv, h.data(), n, v.data());
      add_bias(q.data(), L.bq, QD);
      add_bias(k.data(), L.bk, KD);
      add_bias(v.data(), L.bv, KD);
      parallel_for(n, [&](int64_t i) {
        float* qi = q.data() + i * QD;
        float* ki = k.data() + i * KD;
        if (neox_) {
          rope_neox(qi, c.n_head, int(D), pos[size_t(i)], c.rope_base, c.rope_scale);
          rope_neox(ki, c.n_head_kv, int(D), pos[size_t(i)], c.rope_base, c.rope_scale);
        } else {
          rope_norm(qi, c.n_head, int(D), pos[size_t(i)], c.rope_base, c.rope_scale);
          rope_norm(ki, c.n_head_kv, int(D), pos[size_t(i)], c.rope_base, c.rope_scale);
        }
      });
      kv::LayerCache& lc = cache.layer(size_t(l));
      VQ_CHECK(lc.n_tokens() == pos0, "forward: the cache does not end where this batch starts");
      lc.append(k.data(), v.data(), n);
      lc.attend(q.data(), n, c.n_head, pos.data(), c.attn_scale, att.data());
      matmul(L.wo, att.data(), n, o.data());
      for (size_t j = 0; j < x.size(); ++j) x[j] += o[j];
      rms_norm(x.data(), L.ffn_norm, n, E, c.rms_eps, h.data());
      matmul(L.gate, h.data(), n, g.data());
      matmul(L.up, h.data(), n, u.data());
      parallel_for(n, [&](int64_t i) { silu_mul(g.data() + i * F, u.data() + i * F, F, g.data() + i * F); });
      matmul(L.down, g.data(), n, o.data());
      for (size_t j = 0; j < x.size(); ++j) x[j] += o[j];
    }
    output_logits(x, n, want_logits, out_norm_, out_, logits);
  }

 private:
  struct Layer {
    const float *attn_norm, *ffn_norm, *bq, *bk, *bv;
    Weight wq, wk, wv, wo, gate, up, down;
  };
  std::vector<Layer> layers_;
  Weight embd_, out_;
  const float* out_norm_ = nullptr;
  bool neox_ = false;
};

}  // namespace

std::unique_ptr<Model> make_llama(std::unique_ptr<GgufFile> f) { return std::make_unique<Llama>(std::move(f)); }

}  // namespace vq::engine
