// Gemma 3: sliding-window (local) and global layers, q/k RMSNorm, NEOX RoPE with a base per layer
// kind, four norms per layer, GELU-tanh gated FFN, embeddings scaled by sqrt(n_embd), output tied
// to the embeddings. Follows llama.cpp's llm_build_gemma3 (src/models/gemma3.cpp).
#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "src/core/threads.h"
#include "src/engine/model.h"
#include "src/engine/ops.h"
#include "veloxquant/error.h"

namespace vq::engine {
namespace {

class Gemma3 final : public Model {
 public:
  explicit Gemma3(std::unique_ptr<GgufFile> f) {
    file_ = std::move(f);
    const GgufFile& g = *file_;
    const auto key = [](const char* k) { return std::string("gemma3.") + k; };
    ModelConfig& c = cfg_;
    c.arch = "gemma3";
    const auto positive = [&](const char* k, int64_t lo, int64_t hi) {
      const int64_t v = g.get_int(key(k));
      VQ_CHECK_DATA(v >= lo && v <= hi, fmt::format("{}: {} = {} is out of range", g.path(), key(k), v));
      return int(v);
    };
    c.n_layer = positive("block_count", 1, 1024);
    c.n_embd = positive("embedding_length", 1, 1 << 16);
    c.n_head = positive("attention.head_count", 1, 1024);
    c.n_head_kv = positive("attention.head_count_kv", 1, c.n_head);
    c.head_dim = positive("attention.key_length", 1, 1024);
    VQ_CHECK_DATA(g.get_int(key("attention.value_length"), c.head_dim) == c.head_dim,
                  fmt::format("{}: key and value head sizes differ", g.path()));
    VQ_CHECK_DATA(c.n_head % c.n_head_kv == 0, fmt::format("{}: head_count is not a multiple of head_count_kv", g.path()));
    VQ_CHECK_DATA(c.head_dim % 2 == 0, fmt::format("{}: odd head size", g.path()));
    c.n_ff = positive("feed_forward_length", 1, 1 << 20);
    c.n_ctx_train = g.get_int(key("context_length"), 8192);
    c.rms_eps = float(g.get_float(key("attention.layer_norm_rms_epsilon"), 1e-6));
    c.rope_base = float(g.get_float(key("rope.freq_base"), 1e6));
    c.rope_base_swa = float(g.get_float(key("rope.freq_base_swa"), 10000.0));
    if (g.has(key("rope.scaling.factor")) && g.get_string(key("rope.scaling.type"), "linear") == "linear") {
      c.rope_scale = 1.0f / float(g.get_float(key("rope.scaling.factor")));
    }
    const int64_t window = g.get_int(key("attention.sliding_window"), 0);
    VQ_CHECK_DATA(window >= 0 && window <= (1 << 30), fmt::format("{}: sliding_window {} is out of range", g.path(), window));
    c.sliding_window = int(window);
    const int64_t pattern = g.get_int(key("attention.sliding_window_pattern"), 6);
    VQ_CHECK_DATA(pattern >= 0 && pattern <= 1024, fmt::format("{}: sliding_window_pattern {} is out of range", g.path(), pattern));
    const int period = int(pattern);
    for (int l = 0; l < c.n_layer; ++l) {
      c.swa_layer.push_back(c.sliding_window > 0 && (period == 0 || l % period < period - 1));
    }
    // ref: llama.cpp load_hparams for LLM_ARCH_GEMMA3 (27B uses n_embd / n_head instead).
    c.attn_scale = c.n_layer == 62 ? 1.0f / std::sqrt(float(c.n_embd / c.n_head)) : 1.0f / std::sqrt(float(c.head_dim));
    c.embd_scale = std::sqrt(float(c.n_embd));
    validate_config();
    tok_ = std::make_unique<Tokenizer>(g);
    c.n_vocab = tok_->n_vocab();

    embd_ = weight("token_embd.weight", c.n_vocab, c.n_embd);
    out_norm_ = vector("output_norm.weight", c.n_embd);
    VQ_CHECK_DATA(!g.find_tensor("output.weight"), fmt::format("{}: untied output.weight is not supported", g.path()));
    const int64_t q_dim = int64_t(c.n_head) * c.head_dim, kv_dim = int64_t(c.n_head_kv) * c.head_dim;
    for (int l = 0; l < c.n_layer; ++l) {
      const auto n = [l](const char* s) { return fmt::format("blk.{}.{}", l, s); };
      Layer L;
      L.attn_norm = vector(n("attn_norm.weight"), c.n_embd);
      L.q_norm = vector(n("attn_q_norm.weight"), c.head_dim);
      L.k_norm = vector(n("attn_k_norm.weight"), c.head_dim);
      L.post_attn_norm = vector(n("post_attention_norm.weight"), c.n_embd);
      L.ffn_norm = vector(n("ffn_norm.weight"), c.n_embd);
      L.post_ffw_norm = vector(n("post_ffw_norm.weight"), c.n_embd);
      L.wq = weight(n("attn_q.weight"), q_dim, c.n_embd);
      L.wk = weight(n("attn_k.weight"), kv_dim, c.n_embd);
      L.wv = weight(n("attn_v.weight"), kv_dim, c.n_embd);
      L.wo = weight(n("attn_output.weight"), c.n_embd, q_dim);
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
    std::vector<float> x(size_t(n * E)), h(x.size()), sa(x.size()), o(x.size());
    std::vector<float> q(size_t(n * QD)), k(size_t(n * KD)), v(size_t(n * KD)), att(q.size());
    std::vector<float> g(size_t(n * F)), u(g.size());
    std::vector<int64_t> pos(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      VQ_CHECK(tokens[i] >= 0 && tokens[i] < c.n_vocab, fmt::format("token id {} is outside the vocabulary", tokens[i]));
      pos[size_t(i)] = pos0 + i;
    }
    parallel_for(n, [&](int64_t i) {
      weight_row(embd_, tokens[i], x.data() + i * E);
      for (int64_t j = 0; j < E; ++j) x[size_t(i * E + j)] *= c.embd_scale;
    });
    for (int l = 0; l < c.n_layer; ++l) {
      const Layer& L = layers_[size_t(l)];
      const float base = c.swa_layer[size_t(l)] ? c.rope_base_swa : c.rope_base;
      const float fscale = c.swa_layer[size_t(l)] ? 1.0f : c.rope_scale;
      rms_norm(x.data(), L.attn_norm, n, E, c.rms_eps, h.data());
      matmul(L.wq, h.data(), n, q.data());
      matmul(L.wk, h.data(), n, k.data());
      matmul(L.wv, h.data(), n, v.data());
      parallel_for(n, [&](int64_t i) {
        float* qi = q.data() + i * QD;
        float* ki = k.data() + i * KD;
        rms_norm(qi, L.q_norm, c.n_head, D, c.rms_eps, qi);
        rms_norm(ki, L.k_norm, c.n_head_kv, D, c.rms_eps, ki);
        rope_neox(qi, c.n_head, int(D), pos[size_t(i)], base, fscale);
        rope_neox(ki, c.n_head_kv, int(D), pos[size_t(i)], base, fscale);
        for (int64_t j = 0; j < QD; ++j) qi[j] *= c.attn_scale;
      });
      kv::LayerCache& lc = cache.layer(size_t(l));
      VQ_CHECK(lc.n_tokens() == pos0, "forward: the cache does not end where this batch starts");
      lc.append(k.data(), v.data(), n);
      lc.attend(q.data(), n, c.n_head, pos.data(), 1.0f, att.data());
      matmul(L.wo, att.data(), n, o.data());
      rms_norm(o.data(), L.post_attn_norm, n, E, c.rms_eps, o.data());
      for (size_t j = 0; j < sa.size(); ++j) sa[j] = o[j] + x[j];
      rms_norm(sa.data(), L.ffn_norm, n, E, c.rms_eps, h.data());
      matmul(L.gate, h.data(), n, g.data());
      matmul(L.up, h.data(), n, u.data());
      parallel_for(n, [&](int64_t i) { gelu_mul(g.data() + i * F, u.data() + i * F, F, g.data() + i * F); });
      matmul(L.down, g.data(), n, o.data());
      rms_norm(o.data(), L.post_ffw_norm, n, E, c.rms_eps, o.data());
      for (size_t j = 0; j < x.size(); ++j) x[j] = o[j] + sa[j];
    }
    output_logits(x, n, want_logits, out_norm_, embd_, logits);
  }

 private:
  struct Layer {
    const float *attn_norm, *q_norm, *k_norm, *post_attn_norm, *ffn_norm, *post_ffw_norm;
    Weight wq, wk, wv, wo, gate, up, down;
  };
  std::vector<Layer> layers_;
  Weight embd_;
  const float* out_norm_ = nullptr;
};

}  // namespace

std::unique_ptr<Model> make_gemma3(std::unique_ptr<GgufFile> f) { return std::make_unique<Gemma3>(std::move(f)); }

}  // namespace vq::engine
