// Random-weight GGUF models of each architecture the engine runs, at the family's real head shape
// and with a real vocabulary copied from a vocabulary-only GGUF, written the same bytes on every
// machine (a seeded portable RNG, no floating-point formatting): the same file is run by
// llama.cpp to make the golden logits (tests/golden/arch/) and by the engine in the tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vq::engine::testing {

struct SyntheticSpec {
  std::string name;   // "llama3", "mistral", "qwen2", "qwen3", "phi3", "gemma2"
  std::string arch;   // general.architecture
  std::string vocab;  // vocabulary GGUF under tests/data/vocab/
  int n_layer = 2, n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ff = 0;
  bool qkv_bias = false;     // Qwen 2
  bool qk_norm = false;      // Qwen 3
  bool fused = false;        // Phi-3: attn_qkv and a gate+up ffn_up
  bool gemma = false;        // Gemma 2: post-norms, soft-caps, sliding window every other layer
  bool rope_freqs = false;   // Llama 3.1's frequency factors
  int sliding_window = 0;
  float attn_softcap = 0.0f, final_softcap = 0.0f;
  uint64_t seed = 1;
};

// The specs the tests and golden data use, by name; throws for an unknown name.
const std::vector<SyntheticSpec>& synthetic_specs();
const SyntheticSpec& synthetic_spec(const std::string& name);

// Writes the model to out_path, its vocabulary (every tokenizer.* key) copied from vocab_path (or
// vocab_path + ".gz").
void write_synthetic_model(const SyntheticSpec& spec, const std::string& vocab_path, const std::string& out_path);

}  // namespace vq::engine::testing
