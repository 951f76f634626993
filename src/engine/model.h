// A language model loaded from a GGUF file: its hyperparameters (hparams.h), weights (kept as
// stored, over the file's memory map), tokenizer, and forward pass. Each architecture is a short
// file in models/ that composes the shared blocks (blocks.h). The forward pass hands each layer's
// keys and values to the KV cache and asks the cache for attention; it never touches cache
// storage.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/engine/blocks.h"
#include "src/engine/gguf.h"
#include "src/engine/hparams.h"
#include "src/engine/matmul.h"
#include "src/engine/tokenizer.h"
#include "veloxquant/kv/cache.h"
#include "veloxquant/kv/calibration.h"

namespace vq::engine {

class Model {
 public:
  // Refuses (one line naming the file) an architecture the engine does not run, listing those it
  // does, and any missing or malformed tensor. The weights are read into memory unless `how` asks
  // for the file to be mapped (see GgufLoad).
  static std::unique_ptr<Model> load(const std::string& path, GgufLoad how = GgufLoad::kRead);
  static std::unique_ptr<Model> load(std::unique_ptr<GgufFile> file);
  virtual ~Model() = default;

  const ModelConfig& config() const { return cfg_; }
  const Tokenizer& tokenizer() const { return *tok_; }
  const GgufFile& file() const { return *file_; }
  // One LayerConfig per layer (KV heads, head dim, sliding window, RoPE, soft-cap) for building a
  // cache.
  std::vector<kv::LayerConfig> cache_layout() const;
  // What a calibration made on this model records, and checks, of it.
  kv::ModelIdentity identity() const;

  // Runs n tokens at positions pos0 .. pos0+n-1: their keys and values enter `cache` (layer by
  // layer) before their queries attend to it. Writes logits of the tokens whose `want_logits`
  // flag is set (in order) to logits[k * n_vocab]; want_logits may be null (none). `act` holds
  // the activations, reused from call to call (one per caller running at the same time).
  void forward(const int32_t* tokens, int n, int64_t pos0, kv::KvCache& cache, const uint8_t* want_logits,
               float* logits, Activations& act) const;
  // Several sequences in one pass (each slice's tokens in its own cache, blocks.h): the weights are
  // read once for all of them, and each token's logits are those it would get in a pass of its
  // slice alone cut the same way (the kernels keep each row's arithmetic apart).
  void forward_batch(const int32_t* tokens, const CacheBatch& batch, const uint8_t* want_logits, float* logits,
                     Activations& act) const;

 protected:
  explicit Model(std::unique_ptr<GgufFile> f);
  // The architecture's layer stack over act.x (embedded already), leaving the last hidden states
  // in act.x.
  virtual void run_layers(int n, const CacheBatch& batch, Activations& act) const = 0;

  // Tensors, checked: shape (rows x cols as ggml's ne[1] x ne[0]), a type the kernels read, and
  // for vectors F32 with finite values. The optional forms return an empty Weight / null if absent.
  Weight weight(const std::string& name, int64_t rows, int64_t cols) const;
  Weight optional_weight(const std::string& name, int64_t rows, int64_t cols) const;
  const float* vector(const std::string& name, int64_t n) const;
  const float* optional_vector(const std::string& name, int64_t n) const;
  // Every tensor of layer l that any supported architecture has, each where present (Q/K/V or
  // fused QKV, biases, q/k norms, post-norms, gate/up or fused gate_up); the architecture then
  // requires what it uses with require().
  LayerWeights load_layer(int l) const;
  // The tensors beyond the common ones that every layer of the architecture must have.
  struct LayerNeeds {
    bool qk_norm = false;     // attn_q_norm, attn_k_norm
    bool post_norms = false;  // post_attention_norm, post_ffw_norm
    bool separate_gate = true;  // ffn_gate (not one fused gate+up)
  };
  void require_layers(const LayerNeeds& needs) const;
  // Loads token embeddings, the output norm and projection (tied to the embeddings when
  // output.weight is absent), Llama 3's rope_freqs, and every layer.
  void load_common();

  ModelConfig cfg_;
  std::unique_ptr<GgufFile> file_;
  std::unique_ptr<Tokenizer> tok_;
  Weight embd_, out_;
  const float* out_norm_ = nullptr;
  std::vector<LayerWeights> layers_;
};

// One per file in models/.
std::unique_ptr<Model> make_gemma2(std::unique_ptr<GgufFile> f);
std::unique_ptr<Model> make_gemma3(std::unique_ptr<GgufFile> f);
std::unique_ptr<Model> make_llama(std::unique_ptr<GgufFile> f);
std::unique_ptr<Model> make_phi3(std::unique_ptr<GgufFile> f);
std::unique_ptr<Model> make_qwen2(std::unique_ptr<GgufFile> f);
std::unique_ptr<Model> make_qwen3(std::unique_ptr<GgufFile> f);

}  // namespace vq::engine
