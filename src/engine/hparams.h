// A model's hyperparameters, read from its GGUF metadata in one place (read_hparams) through one
// table of keys and one row of per-architecture facts, as llama.cpp's llama-arch.cpp (key names)
// and llama_model::load_hparams (per-architecture switch) do.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vq::engine {

class GgufFile;

enum class FfnActivation { kSilu, kGeluTanh };

struct ModelConfig {
  std::string arch;
  int n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ff = 0, n_vocab = 0;
  int64_t n_ctx_train = 0;
  float rms_eps = 1e-6f;
  float rope_base = 10000.0f, rope_scale = 1.0f;          // global layers
  float rope_base_swa = 10000.0f, rope_scale_swa = 1.0f;  // sliding-window layers
  bool rope_neox = true;  // NEOX pairs (i, i+d/2); else NORM (2i, 2i+1)
  // Per rotary pair, the divisor of its frequency (Llama 3's rope_freqs tensor); empty: none.
  // Filled by the model from its tensor, after read_hparams.
  std::vector<float> rope_freq_factors;
  int sliding_window = 0;       // 0: none
  std::vector<bool> swa_layer;  // per layer: uses the sliding window
  // The attention scale, owned here and applied in one place (blocks.cpp, attention): queries
  // are multiplied by it before they meet the cache.
  float attn_scale = 1.0f;
  float attn_softcap = 0.0f;   // scores s -> c * tanh(s / c) before the softmax (Gemma 2); 0: off
  float final_softcap = 0.0f;  // the same on the output logits; 0: off
  float embd_scale = 1.0f;     // applied to token embeddings
  FfnActivation ffn_act = FfnActivation::kSilu;
};

// The architectures the engine runs, as `general.architecture` names them.
const std::vector<std::string>& supported_architectures();
bool is_supported_architecture(const std::string& arch);
// "gemma2, gemma3, llama, phi3, qwen2 and qwen3", for messages.
std::string supported_architectures_text();

// Reads and checks every hyperparameter of the file's architecture (vq::Error, data, naming the
// file and key, for a missing or impossible value; usage for an architecture the engine does not
// run). n_vocab is left 0: the tokenizer sets it.
ModelConfig read_hparams(const GgufFile& f);

}  // namespace vq::engine
