// Model loading: architecture dispatch, checked access to weight tensors, the tensors every
// architecture shares, and the forward pass's frame (embedding, layers, output).
#include "src/engine/model.h"

#include <fmt/format.h>

#include <cmath>

#include "src/engine/quants.h"
#include "veloxquant/error.h"

namespace vq::engine {

std::unique_ptr<Model> Model::load(const std::string& path, GgufLoad how) { return load(GgufFile::open(path, how)); }

std::unique_ptr<Model> Model::load(std::unique_ptr<GgufFile> f) {
  const std::string arch = f->get_string("general.architecture");
  if (arch == "gemma2") return make_gemma2(std::move(f));
  if (arch == "gemma3") return make_gemma3(std::move(f));
  if (arch == "llama") return make_llama(std::move(f));
  if (arch == "phi3") return make_phi3(std::move(f));
  if (arch == "qwen2") return make_qwen2(std::move(f));
  if (arch == "qwen3") return make_qwen3(std::move(f));
  throw_error(ErrorKind::kData, fmt::format("{}: architecture '{}' is not supported (the engine runs {})", f->path(),
                                            arch, supported_architectures_text()));
}

Model::Model(std::unique_ptr<GgufFile> f) : file_(std::move(f)) {
  cfg_ = read_hparams(*file_);
  tok_ = std::make_unique<Tokenizer>(*file_);
  cfg_.n_vocab = tok_->n_vocab();
}

std::vector<kv::LayerConfig> Model::cache_layout() const {
  std::vector<kv::LayerConfig> out;
  for (int l = 0; l < cfg_.n_layer; ++l) {
    const bool swa = cfg_.swa_layer[size_t(l)];
    kv::RopeSpec rope;
    rope.style = cfg_.rope_neox ? kv::RopeSpec::Style::kNeox : kv::RopeSpec::Style::kNorm;
    rope.base = swa ? cfg_.rope_base_swa : cfg_.rope_base;
    rope.freq_scale = swa ? cfg_.rope_scale_swa : cfg_.rope_scale;
    rope.freq_factors = cfg_.rope_freq_factors;
    kv::LayerConfig lc(cfg_.n_head_kv, cfg_.head_dim, l, swa ? cfg_.sliding_window : 0, rope);
    lc.logit_softcap = cfg_.attn_softcap;
    out.push_back(lc);
  }
  return out;
}

kv::ModelIdentity Model::identity() const {
  kv::ModelIdentity id;
  id.name = file_->get_string("general.name", file_->path().substr(file_->path().find_last_of('/') + 1));
  id.arch = cfg_.arch;
  id.crc32 = file_->content_crc32();
  id.n_layer = cfg_.n_layer;
  id.n_kv_heads = cfg_.n_head_kv;
  id.head_dim = cfg_.head_dim;
  return id;
}

void Model::forward(const int32_t* tokens, int n, int64_t pos0, kv::KvCache& cache, const uint8_t* want_logits,
                    float* logits, Activations& act) const {
  if (n <= 0) return;
  forward_batch(tokens, {CacheSlice{&cache, 0, n, pos0}}, want_logits, logits, act);
}

void Model::forward_batch(const int32_t* tokens, const CacheBatch& batch, const uint8_t* want_logits, float* logits,
                          Activations& act) const {
  int n = 0;
  for (const CacheSlice& s : batch) {
    VQ_CHECK(s.cache && int(s.cache->n_layers()) == cfg_.n_layer, "forward: cache has the wrong number of layers");
    VQ_CHECK(s.begin == n && s.n > 0, "forward: the slices must cover the pass in order");
    n += s.n;
  }
  if (n <= 0) return;
  act.reserve(cfg_, n);
  embed_tokens(cfg_, embd_, tokens, batch, n, act);
  run_layers(n, batch, act);
  output_logits(cfg_, out_norm_, out_, n, want_logits, act, logits);
}

Weight Model::weight(const std::string& name, int64_t rows, int64_t cols) const {
  const GgufTensor& t = file_->tensor(name);
  const bool shape_ok = t.shape.size() == 2 && int64_t(t.shape[0]) == cols && int64_t(t.shape[1]) == rows;
  VQ_CHECK_DATA(shape_ok, fmt::format("{}: tensor '{}' has the wrong shape (want {} x {})", file_->path(), name, cols, rows));
  VQ_CHECK_DATA(is_supported_weight_type(t.type),
                fmt::format("{}: tensor '{}' has unsupported type {}", file_->path(), name, ggml_type_info(t.type)->name));
  return Weight{t.type, rows, cols, t.data, row_bytes(t.type, cols)};
}

Weight Model::optional_weight(const std::string& name, int64_t rows, int64_t cols) const {
  return file_->find_tensor(name) ? weight(name, rows, cols) : Weight{};
}

const float* Model::vector(const std::string& name, int64_t n) const {
  const GgufTensor& t = file_->tensor(name);
  VQ_CHECK_DATA(t.type == uint32_t(GgmlType::kF32) && int64_t(t.n_elements) == n,
                fmt::format("{}: tensor '{}' must be F32 with {} elements", file_->path(), name, n));
  VQ_CHECK_DATA(reinterpret_cast<uintptr_t>(t.data) % alignof(float) == 0,
                fmt::format("{}: tensor '{}' is misaligned", file_->path(), name));
  const float* v = reinterpret_cast<const float*>(t.data);
  for (int64_t i = 0; i < n; ++i) {
    VQ_CHECK_DATA(std::isfinite(v[i]), fmt::format("{}: tensor '{}' holds a non-finite value at {}", file_->path(), name, i));
  }
  return v;
}

const float* Model::optional_vector(const std::string& name, int64_t n) const {
  return file_->find_tensor(name) ? vector(name, n) : nullptr;
}

LayerWeights Model::load_layer(int l) const {
  const ModelConfig& c = cfg_;
  const auto n = [l](const char* s) { return fmt::format("blk.{}.{}", l, s); };
  const int64_t E = c.n_embd, F = c.n_ff;
  const int64_t QD = int64_t(c.n_head) * c.head_dim, KD = int64_t(c.n_head_kv) * c.head_dim;
  LayerWeights L;
  L.attn_norm = vector(n("attn_norm.weight"), E);
  L.attn_post_norm = optional_vector(n("post_attention_norm.weight"), E);
  L.ffn_norm = vector(n("ffn_norm.weight"), E);
  L.ffn_post_norm = optional_vector(n("post_ffw_norm.weight"), E);
  L.q_norm = optional_vector(n("attn_q_norm.weight"), c.head_dim);
  L.k_norm = optional_vector(n("attn_k_norm.weight"), c.head_dim);
  L.wqkv = optional_weight(n("attn_qkv.weight"), QD + 2 * KD, E);
  if (L.wqkv.data) {
    L.bqkv = optional_vector(n("attn_qkv.bias"), QD + 2 * KD);
  } else {
    L.wq = weight(n("attn_q.weight"), QD, E);
    L.wk = weight(n("attn_k.weight"), KD, E);
    L.wv = weight(n("attn_v.weight"), KD, E);
    L.bq = optional_vector(n("attn_q.bias"), QD);
    L.bk = optional_vector(n("attn_k.bias"), KD);
    L.bv = optional_vector(n("attn_v.bias"), KD);
  }
  L.wo = weight(n("attn_output.weight"), E, QD);
  L.bo = optional_vector(n("attn_output.bias"), E);
  if (file_->find_tensor(n("ffn_gate.weight"))) {
    L.gate = weight(n("ffn_gate.weight"), F, E);
    L.up = weight(n("ffn_up.weight"), F, E);
  } else {
    L.gate_up = weight(n("ffn_up.weight"), 2 * F, E);
  }
  L.down = weight(n("ffn_down.weight"), E, F);
  return L;
}

void Model::require_layers(const LayerNeeds& needs) const {
  const auto require = [&](bool present, int l, const char* tensor) {
    VQ_CHECK_DATA(present, fmt::format("{}: {} needs tensor 'blk.{}.{}'", file_->path(), cfg_.arch, l, tensor));
  };
  for (int l = 0; l < cfg_.n_layer; ++l) {
    const LayerWeights& L = layers_[size_t(l)];
    if (needs.qk_norm) {
      require(L.q_norm != nullptr, l, "attn_q_norm.weight");
      require(L.k_norm != nullptr, l, "attn_k_norm.weight");
    }
    if (needs.post_norms) {
      require(L.attn_post_norm != nullptr, l, "post_attention_norm.weight");
      require(L.ffn_post_norm != nullptr, l, "post_ffw_norm.weight");
    }
    if (needs.separate_gate) require(L.gate.data != nullptr, l, "ffn_gate.weight");
  }
}

void Model::load_common() {
  const GgufFile& g = *file_;
  embd_ = weight("token_embd.weight", cfg_.n_vocab, cfg_.n_embd);
  out_ = g.find_tensor("output.weight") ? weight("output.weight", cfg_.n_vocab, cfg_.n_embd) : embd_;
  out_norm_ = vector("output_norm.weight", cfg_.n_embd);
  if (const float* f = optional_vector("rope_freqs.weight", cfg_.head_dim / 2)) {
    for (int i = 0; i < cfg_.head_dim / 2; ++i) {
      VQ_CHECK_DATA(f[i] > 0.0f, fmt::format("{}: rope_freqs holds a non-positive factor at {}", g.path(), i));
    }
    cfg_.rope_freq_factors.assign(f, f + cfg_.head_dim / 2);
  }
  for (int l = 0; l < cfg_.n_layer; ++l) layers_.push_back(load_layer(l));
}

}  // namespace vq::engine
