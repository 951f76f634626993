// Writes the synthetic models of synthetic_model.h.
#include "tests/engine/synthetic_model.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "src/core/fp16.h"
#include "src/core/rng.h"
#include "src/engine/gguf.h"
#include "tests/engine/gguf_writer.h"
#include "tests/engine/vocab_files.h"

namespace vq::engine::testing {
namespace {

// Shapes follow each family's real heads: Llama-3-8B's 32/8 heads of 128, Mistral-7B's (same),
// Qwen2.5-0.5B's head of 64 with 4 query heads per KV head, Qwen3's 16/8 heads of 128 with q/k
// norms, Phi-3-mini's heads of 96 (as many KV heads as query heads) with fused tensors, Gemma 2's
// heads of 256 (8/4). The embedding width is kept small where the architecture allows it to
// differ from heads x head size, so that the vocabulary's tables stay small.
std::vector<SyntheticSpec> make_specs() {
  // clang-format off
  return {
      {.name = "llama3", .arch = "llama", .vocab = "ggml-vocab-llama-bpe.gguf",
       .n_embd = 64, .n_head = 32, .n_head_kv = 8, .head_dim = 128, .n_ff = 192, .rope_freqs = true, .seed = 31},
      {.name = "mistral", .arch = "llama", .vocab = "ggml-vocab-llama-spm.gguf",
       .n_embd = 128, .n_head = 32, .n_head_kv = 8, .head_dim = 128, .n_ff = 192, .seed = 32},
      {.name = "qwen2", .arch = "qwen2", .vocab = "ggml-vocab-deepseek-coder.gguf",
       .n_embd = 512, .n_head = 8, .n_head_kv = 2, .head_dim = 64, .n_ff = 256, .qkv_bias = true, .seed = 33},
      {.name = "qwen3", .arch = "qwen3", .vocab = "ggml-vocab-qwen2.gguf",
       .n_embd = 64, .n_head = 16, .n_head_kv = 8, .head_dim = 128, .n_ff = 192, .qk_norm = true, .seed = 34},
      {.name = "phi3", .arch = "phi3", .vocab = "ggml-vocab-phi-3.gguf",
       .n_embd = 384, .n_head = 4, .n_head_kv = 4, .head_dim = 96, .n_ff = 256, .fused = true, .seed = 35},
      {.name = "gemma2", .arch = "gemma2", .vocab = "ggml-vocab-llama-spm.gguf",
       .n_embd = 128, .n_head = 8, .n_head_kv = 4, .head_dim = 256, .n_ff = 192, .gemma = true,
       .sliding_window = 8, .attn_softcap = 5.0f, .final_softcap = 10.0f, .seed = 36},
  };
  // clang-format on
}

// Unit-variance uniform values from the portable RNG (cheaper than normals for the large tables).
struct Filler {
  Rng rng;
  explicit Filler(uint64_t seed) : rng(seed) {}
  float next(float sd) { return float((rng.uniform() * 2.0 - 1.0) * std::sqrt(3.0)) * sd; }
};

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

void matrix(Filler& r, GgufWriter& w, const std::string& name, int64_t rows, int64_t cols, float gain, bool f16 = false) {
  const float sd = gain / std::sqrt(float(cols));
  std::vector<float> m(static_cast<size_t>(rows * cols));
  for (float& x : m) x = r.next(sd);
  if (f16) {
    std::vector<uint8_t> b(m.size() * 2);
    for (size_t i = 0; i < m.size(); ++i) {
      const uint16_t h = f32_to_f16(m[i]);
      std::memcpy(&b[2 * i], &h, 2);
    }
    w.tensor(name, {uint64_t(cols), uint64_t(rows)}, 1, b);
  } else {
    w.tensor(name, {uint64_t(cols), uint64_t(rows)}, 0, f32_bytes(m));
  }
}

void vec(Filler& r, GgufWriter& w, const std::string& name, int64_t n, float mean, float sd) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = mean + r.next(sd);
  w.tensor(name, {uint64_t(n)}, 0, f32_bytes(v));
}

void copy_vocabulary(const std::string& vocab_path, GgufWriter& w, int64_t* n_vocab) {
  // Stored plain or gzip-compressed (tests/data/vocab/README.md).
  const bool plain = std::ifstream(vocab_path).good();
  const auto f = open_vocab(plain ? vocab_path : vocab_path + ".gz");
  for (const auto& [k, val] : f->metadata()) {
    if (k.rfind("tokenizer.", 0) != 0) continue;
    switch (val.type) {
      case GgufType::kString: w.kv_str(k, std::get<std::string>(val.v)); break;
      case GgufType::kBool:
        w.kv_bool(k, std::holds_alternative<bool>(val.v) ? std::get<bool>(val.v) : std::get<int64_t>(val.v) != 0);
        break;
      case GgufType::kFloat32: case GgufType::kFloat64: w.kv_f32(k, float(std::get<double>(val.v))); break;
      case GgufType::kArray: {
        const GgufArray& a = std::get<GgufArray>(val.v);
        if (a.type == GgufType::kString) {
          w.kv_str_array(k, a.strings);
        } else if (a.type == GgufType::kFloat32 || a.type == GgufType::kFloat64) {
          w.kv_f32_array(k, std::vector<float>(a.floats.begin(), a.floats.end()));
        } else {
          w.kv_i32_array(k, std::vector<int32_t>(a.ints.begin(), a.ints.end()));
        }
        break;
      }
      default: w.kv_u32(k, uint32_t(std::get<int64_t>(val.v))); break;
    }
  }
  *n_vocab = int64_t(f->get_array("tokenizer.ggml.tokens").strings.size());
}

// Llama 3.1's rope_freqs (factor 8, low- and high-frequency factors 1 and 4, original context
// 8192), as llama.cpp's converter computes them from the checkpoint's rope_scaling.
std::vector<float> llama3_rope_freqs(int head_dim, float base) {
  const double factor = 8.0, low = 1.0, high = 4.0, old_ctx = 8192.0;
  std::vector<float> out;
  for (int i = 0; i < head_dim; i += 2) {
    const double freq = 1.0 / std::pow(double(base), double(i) / head_dim);
    const double wavelen = 2.0 * M_PI / freq;
    if (wavelen < old_ctx / high) {
      out.push_back(1.0f);
    } else if (wavelen > old_ctx / low) {
      out.push_back(float(factor));
    } else {
      const double smooth = (old_ctx / wavelen - low) / (high - low);
      out.push_back(float(1.0 / ((1.0 - smooth) / factor + smooth)));
    }
  }
  return out;
}

}  // namespace

const std::vector<SyntheticSpec>& synthetic_specs() {
  static const std::vector<SyntheticSpec> specs = make_specs();
  return specs;
}

const SyntheticSpec& synthetic_spec(const std::string& name) {
  for (const auto& s : synthetic_specs()) {
    if (s.name == name) return s;
  }
  throw std::invalid_argument("no synthetic model named " + name);
}

void write_synthetic_model(const SyntheticSpec& s, const std::string& vocab_path, const std::string& out_path) {
  GgufWriter w;
  const std::string& a = s.arch;
  const float base = s.rope_freqs ? 500000.0f : 10000.0f;
  w.kv_str("general.architecture", a);
  w.kv_str("general.name", "synthetic-" + s.name);
  w.kv_u32(a + ".block_count", uint32_t(s.n_layer));
  w.kv_u32(a + ".context_length", 4096);
  w.kv_u32(a + ".embedding_length", uint32_t(s.n_embd));
  w.kv_u32(a + ".feed_forward_length", uint32_t(s.n_ff));
  w.kv_u32(a + ".attention.head_count", uint32_t(s.n_head));
  w.kv_u32(a + ".attention.head_count_kv", uint32_t(s.n_head_kv));
  w.kv_u32(a + ".attention.key_length", uint32_t(s.head_dim));
  w.kv_u32(a + ".attention.value_length", uint32_t(s.head_dim));
  w.kv_u32(a + ".rope.dimension_count", uint32_t(s.head_dim));
  w.kv_f32(a + ".rope.freq_base", base);
  w.kv_f32(a + ".attention.layer_norm_rms_epsilon", s.gemma ? 1e-6f : 1e-5f);
  if (s.gemma) {
    w.kv_u32(a + ".attention.sliding_window", uint32_t(s.sliding_window));
    w.kv_f32(a + ".attn_logit_softcapping", s.attn_softcap);
    w.kv_f32(a + ".final_logit_softcapping", s.final_softcap);
  }
  int64_t V = 0;
  copy_vocabulary(vocab_path, w, &V);
  Filler r(s.seed);
  const int64_t E = s.n_embd, F = s.n_ff, QD = int64_t(s.n_head) * s.head_dim, KD = int64_t(s.n_head_kv) * s.head_dim;
  // Embeddings in F16 (a row lookup: exact) where the output is separate; every product in F32, so
  // that llama.cpp's kernels do not round activations (as they do for F16 and quantized weights)
  // and the comparison sees the architecture's arithmetic and attention only.
  // Gemma's output is tied to the embeddings: F32 there.
  matrix(r, w, "token_embd.weight", V, E, s.gemma ? 3.0f : float(std::sqrt(double(E))), !s.gemma);
  vec(r, w, "output_norm.weight", E, 1.0f, 0.2f);
  if (!s.gemma) matrix(r, w, "output.weight", V, E, 3.0f);
  if (s.rope_freqs) {
    const std::vector<float> f = llama3_rope_freqs(s.head_dim, base);
    w.tensor("rope_freqs.weight", {uint64_t(f.size())}, 0, f32_bytes(f));
  }
  for (int l = 0; l < s.n_layer; ++l) {
    const auto n = [l](const char* t) { return "blk." + std::to_string(l) + "." + t; };
    vec(r, w, n("attn_norm.weight"), E, 1.0f, 0.2f);
    if (s.fused) {
      matrix(r, w, n("attn_qkv.weight"), QD + 2 * KD, E, 2.0f);
    } else {
      matrix(r, w, n("attn_q.weight"), QD, E, 2.0f);
      matrix(r, w, n("attn_k.weight"), KD, E, 2.0f);
      matrix(r, w, n("attn_v.weight"), KD, E, 1.0f);
    }
    if (s.qkv_bias) {
      vec(r, w, n("attn_q.bias"), QD, 0.0f, 0.5f);
      vec(r, w, n("attn_k.bias"), KD, 0.0f, 0.5f);
      vec(r, w, n("attn_v.bias"), KD, 0.0f, 0.5f);
    }
    if (s.qk_norm) {
      vec(r, w, n("attn_q_norm.weight"), s.head_dim, 1.0f, 0.2f);
      vec(r, w, n("attn_k_norm.weight"), s.head_dim, 1.0f, 0.2f);
    }
    matrix(r, w, n("attn_output.weight"), E, QD, 1.0f);
    vec(r, w, n("ffn_norm.weight"), E, 1.0f, 0.2f);
    if (s.gemma) {
      vec(r, w, n("post_attention_norm.weight"), E, 1.0f, 0.2f);
      vec(r, w, n("post_ffw_norm.weight"), E, 1.0f, 0.2f);
    }
    if (s.fused) {
      matrix(r, w, n("ffn_up.weight"), 2 * F, E, 1.5f);
    } else {
      matrix(r, w, n("ffn_gate.weight"), F, E, 1.5f);
      matrix(r, w, n("ffn_up.weight"), F, E, 1.5f);
    }
    matrix(r, w, n("ffn_down.weight"), E, F, 1.0f);
  }
  GgufWriter::save(out_path, w.bytes());
}

}  // namespace vq::engine::testing
