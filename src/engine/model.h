// A language model loaded from a GGUF file: its hyperparameters, weights (kept as stored, over
// the file's memory map), tokenizer, and forward pass. The forward pass hands each layer's keys
// and values to the KV cache and asks the cache for attention; it never touches cache storage.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/engine/gguf.h"
#include "src/engine/matmul.h"
#include "src/engine/tokenizer.h"
#include "veloxquant/kv/cache.h"
#include "veloxquant/kv/calibration.h"

namespace vq::engine {

struct ModelConfig {
  std::string arch;
  int n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ff = 0, n_vocab = 0;
  int64_t n_ctx_train = 0;
  float rms_eps = 1e-6f;
  float rope_base = 10000.0f, rope_scale = 1.0f;  // global layers
  float rope_base_swa = 10000.0f;                  // sliding-window layers
  bool rope_neox = true;                           // NEOX pairs (i, i+d/2); else NORM (2i, 2i+1)
  int sliding_window = 0;                          // 0: none
  std::vector<bool> swa_layer;                     // per layer: uses the sliding window
  float attn_scale = 1.0f;                         // applied to q before attention
  float embd_scale = 1.0f;                         // applied to token embeddings
};

class Model {
 public:
  static std::unique_ptr<Model> load(const std::string& path);
  static std::unique_ptr<Model> load(std::unique_ptr<GgufFile> file);
  virtual ~Model() = default;

  const ModelConfig& config() const { return cfg_; }
  const Tokenizer& tokenizer() const { return *tok_; }
  const GgufFile& file() const { return *file_; }
  // One LayerConfig per layer (KV heads, head dim, sliding window, RoPE) for building a cache.
  std::vector<kv::LayerConfig> cache_layout() const;
  // What a calibration made on this model records, and checks, of it.
  kv::ModelIdentity identity() const;

  // Runs n tokens at positions pos0 .. pos0+n-1: their keys and values enter `cache` (layer by
  // layer) before their queries attend to it. Writes logits of the tokens whose `want_logits`
  // flag is set (in order) to logits[k * n_vocab]; want_logits may be null (none).
  virtual void forward(const int32_t* tokens, int n, int64_t pos0, kv::KvCache& cache,
                       const uint8_t* want_logits, float* logits) const = 0;

 protected:
  Model() = default;
  // Refuses hyperparameters no model can have (a context of 0, a NaN or negative epsilon or
  // RoPE base, a negative window): they would give wrong answers, not errors, later.
  void validate_config() const;
  Weight weight(const std::string& name, int64_t rows, int64_t cols) const;
  const float* vector(const std::string& name, int64_t n) const;
  // Final norm and output projection of the rows of x ([n][n_embd]) whose want flag is set,
  // written in order to logits.
  void output_logits(const std::vector<float>& x, int n, const uint8_t* want, const float* norm,
                     const Weight& out, float* logits) const;

  ModelConfig cfg_;
  std::unique_ptr<GgufFile> file_;
  std::unique_ptr<Tokenizer> tok_;
};

std::unique_ptr<Model> make_gemma3(std::unique_ptr<GgufFile> f);
std::unique_ptr<Model> make_llama(std::unique_ptr<GgufFile> f);  // llama and qwen2

}  // namespace vq::engine
