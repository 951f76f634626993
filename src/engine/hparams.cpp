// Hyperparameters from GGUF metadata: the table of keys and the per-architecture facts.
// ref: llama.cpp src/llama-arch.cpp (LLM_KV names) and src/llama-model.cpp load_hparams, at
// TheTom/llama-cpp-turboquant 69d8e4be47243e83b3d0d71e932bc7aa61c644dc.
#include "src/engine/hparams.h"

#include <fmt/format.h>

#include <cmath>

#include "src/engine/gguf.h"
#include "veloxquant/error.h"

namespace vq::engine {
namespace {

// Every hyperparameter key the engine reads, without its "<arch>." prefix.
enum class Key {
  kContextLength,
  kEmbeddingLength,
  kBlockCount,
  kFeedForwardLength,
  kHeadCount,
  kHeadCountKv,
  kKeyLength,
  kValueLength,
  kRmsEpsilon,
  kRopeDimensionCount,
  kRopeFreqBase,
  kRopeFreqBaseSwa,
  kRopeScalingType,
  kRopeScalingFactor,
  kSlidingWindow,
  kSlidingWindowPattern,
  kAttnLogitSoftcap,
  kFinalLogitSoftcap,
};

const char* key_name(Key k) {
  switch (k) {
    case Key::kContextLength: return "context_length";
    case Key::kEmbeddingLength: return "embedding_length";
    case Key::kBlockCount: return "block_count";
    case Key::kFeedForwardLength: return "feed_forward_length";
    case Key::kHeadCount: return "attention.head_count";
    case Key::kHeadCountKv: return "attention.head_count_kv";
    case Key::kKeyLength: return "attention.key_length";
    case Key::kValueLength: return "attention.value_length";
    case Key::kRmsEpsilon: return "attention.layer_norm_rms_epsilon";
    case Key::kRopeDimensionCount: return "rope.dimension_count";
    case Key::kRopeFreqBase: return "rope.freq_base";
    case Key::kRopeFreqBaseSwa: return "rope.freq_base_swa";
    case Key::kRopeScalingType: return "rope.scaling.type";
    case Key::kRopeScalingFactor: return "rope.scaling.factor";
    case Key::kSlidingWindow: return "attention.sliding_window";
    case Key::kSlidingWindowPattern: return "attention.sliding_window_pattern";
    case Key::kAttnLogitSoftcap: return "attn_logit_softcapping";
    case Key::kFinalLogitSoftcap: return "final_logit_softcapping";
  }
  return "";
}

// What differs between architectures in how their metadata is read.
struct ArchFacts {
  const char* name;
  bool rope_neox;
  bool gemma;                 // sqrt(n_embd) embedding scale, GELU FFN, post-norms, fp32 eps 1e-6
  bool key_length_required;   // head size must be given (gemma3)
  int64_t ctx_default;        // when context_length is absent
  double eps_default;         // when the RMS epsilon is absent
  double rope_base_default;
  // Alternating sliding-window layers: layer l slides when l % period < period - 1.
  bool swa_pattern;
  int64_t swa_period_default;
  int64_t swa_window_default;
  bool swa_rope_like_global;  // sliding layers default to the global base and scale (gemma2)
  double swa_base_default;    // otherwise this base and scale 1 (gemma3)
  bool softcaps;              // attention and final logit soft-capping (gemma2)
  // Gemma's 27B models scale queries by 1/sqrt(n_embd / n_head) instead of 1/sqrt(head_dim);
  // llama.cpp tells them by their layer count (gemma2: 46, gemma3: 62). 0: never.
  int n_layer_scaled_by_embd;
};

constexpr ArchFacts kArchs[] = {
    // name     neox   gemma  kreq   ctx    eps    base  swa    per win   like   swab   caps   27B
    {"gemma2", true, true, false, 8192, 1e-6, 10000.0, true, 2, 4096, true, 10000.0, true, 46},
    {"gemma3", true, true, true, 8192, 1e-6, 1e6, true, 6, 0, false, 10000.0, false, 62},
    {"llama", false, false, false, 4096, 1e-5, 10000.0, false, 0, 0, false, 0.0, false, 0},
    {"phi3", true, false, false, 4096, 1e-5, 10000.0, false, 0, 0, false, 0.0, false, 0},
    {"qwen2", true, false, false, 4096, 1e-5, 10000.0, false, 0, 0, false, 0.0, false, 0},
    {"qwen3", true, false, false, 4096, 1e-5, 10000.0, false, 0, 0, false, 0.0, false, 0},
};

const ArchFacts* find_arch(const std::string& name) {
  for (const ArchFacts& a : kArchs) {
    if (name == a.name) return &a;
  }
  return nullptr;
}

// Reads keys of one architecture, naming file and key in every error.
class KeyReader {
 public:
  KeyReader(const GgufFile& f, const std::string& arch) : f_(f), arch_(arch) {}
  std::string full(Key k) const { return arch_ + "." + key_name(k); }
  bool has(Key k) const { return f_.has(full(k)); }
  int64_t ranged(Key k, int64_t lo, int64_t hi) const { return check(k, f_.get_int(full(k)), lo, hi); }
  int64_t ranged(Key k, int64_t fallback, int64_t lo, int64_t hi) const {
    return check(k, f_.get_int(full(k), fallback), lo, hi);
  }
  double real(Key k, double fallback) const { return f_.get_float(full(k), fallback); }
  std::string text(Key k, const std::string& fallback) const { return f_.get_string(full(k), fallback); }
  const std::string& path() const { return f_.path(); }

 private:
  int64_t check(Key k, int64_t v, int64_t lo, int64_t hi) const {
    VQ_CHECK_DATA(v >= lo && v <= hi, fmt::format("{}: {} = {} is out of range", f_.path(), full(k), v));
    return v;
  }
  const GgufFile& f_;
  std::string arch_;
};

// Refuses hyperparameters no model can have: they would give wrong answers, not errors, later.
void validate(const ModelConfig& c, const std::string& p) {
  VQ_CHECK_DATA(c.n_ctx_train >= 1 && c.n_ctx_train <= (int64_t(1) << 30),
                fmt::format("{}: context_length {} is out of range", p, c.n_ctx_train));
  VQ_CHECK_DATA(std::isfinite(c.rms_eps) && c.rms_eps > 0.0f && c.rms_eps < 1.0f,
                fmt::format("{}: layer_norm_rms_epsilon {} is out of range", p, c.rms_eps));
  for (float b : {c.rope_base, c.rope_base_swa, c.rope_scale, c.rope_scale_swa}) {
    VQ_CHECK_DATA(std::isfinite(b) && b > 0.0f, fmt::format("{}: RoPE base or scale {} is not a positive number", p, b));
  }
  VQ_CHECK_DATA(c.sliding_window >= 0 && c.sliding_window <= (1 << 30),
                fmt::format("{}: sliding_window {} is out of range", p, c.sliding_window));
  for (float s : {c.attn_softcap, c.final_softcap}) {
    VQ_CHECK_DATA(std::isfinite(s) && s >= 0.0f, fmt::format("{}: logit soft-cap {} is out of range", p, s));
  }
}

}  // namespace

const std::vector<std::string>& supported_architectures() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const ArchFacts& a : kArchs) v.emplace_back(a.name);
    return v;
  }();
  return names;
}

bool is_supported_architecture(const std::string& arch) { return find_arch(arch) != nullptr; }

std::string supported_architectures_text() {
  const auto& v = supported_architectures();
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i == 0 ? "" : i + 1 == v.size() ? " and " : ", ") + v[i];
  return s;
}

ModelConfig read_hparams(const GgufFile& f) {
  const std::string arch = f.get_string("general.architecture");
  const ArchFacts* a = find_arch(arch);
  if (!a) {
    throw_error(ErrorKind::kData, fmt::format("{}: architecture '{}' is not supported (the engine runs {})", f.path(),
                                              arch, supported_architectures_text()));
  }
  const KeyReader key(f, arch);
  const std::string& p = f.path();
  ModelConfig c;
  c.arch = arch;
  c.rope_neox = a->rope_neox;
  c.n_layer = int(key.ranged(Key::kBlockCount, 1, 1024));
  c.n_embd = int(key.ranged(Key::kEmbeddingLength, 1, 1 << 16));
  c.n_head = int(key.ranged(Key::kHeadCount, 1, 1024));
  c.n_head_kv = int(key.ranged(Key::kHeadCountKv, c.n_head, 1, c.n_head));
  VQ_CHECK_DATA(c.n_head % c.n_head_kv == 0,
                fmt::format("{}: head_count {} is not a multiple of head_count_kv {}", p, c.n_head, c.n_head_kv));
  if (a->key_length_required || key.has(Key::kKeyLength)) {
    c.head_dim = int(key.ranged(Key::kKeyLength, 1, 1024));
  } else {
    VQ_CHECK_DATA(c.n_embd % c.n_head == 0, fmt::format("{}: embedding_length is not a multiple of head_count", p));
    c.head_dim = c.n_embd / c.n_head;
  }
  VQ_CHECK_DATA(c.head_dim >= 2 && c.head_dim % 2 == 0 && c.head_dim <= 1024,
                fmt::format("{}: bad head size {}", p, c.head_dim));
  VQ_CHECK_DATA(key.ranged(Key::kValueLength, c.head_dim, 0, 1 << 20) == c.head_dim,
                fmt::format("{}: key and value head sizes differ", p));
  VQ_CHECK_DATA(key.ranged(Key::kRopeDimensionCount, c.head_dim, 0, 1 << 20) == c.head_dim,
                fmt::format("{}: partial rotary embeddings are not supported", p));
  c.n_ff = int(key.ranged(Key::kFeedForwardLength, 1, 1 << 20));
  c.n_ctx_train = key.ranged(Key::kContextLength, a->ctx_default, INT64_MIN, INT64_MAX);
  c.rms_eps = float(key.real(Key::kRmsEpsilon, a->eps_default));

  c.rope_base = float(key.real(Key::kRopeFreqBase, a->rope_base_default));
  const std::string scaling = key.text(Key::kRopeScalingType, "linear");
  VQ_CHECK_DATA(scaling == "linear" || scaling == "none",
                fmt::format("{}: RoPE scaling type '{}' is not supported (linear and none are)", p, scaling));
  if (key.has(Key::kRopeScalingFactor) && scaling == "linear") {
    const double factor = key.real(Key::kRopeScalingFactor, 0.0);
    if (factor != 0.0) c.rope_scale = float(1.0 / factor);
  }
  const bool swa_like_global = a->swa_rope_like_global || !a->swa_pattern;
  c.rope_base_swa = swa_like_global ? c.rope_base : float(a->swa_base_default);
  c.rope_base_swa = float(key.real(Key::kRopeFreqBaseSwa, c.rope_base_swa));
  c.rope_scale_swa = swa_like_global ? c.rope_scale : 1.0f;

  c.swa_layer.assign(size_t(c.n_layer), false);
  if (a->swa_pattern) {
    c.sliding_window = int(key.ranged(Key::kSlidingWindow, a->swa_window_default, 0, 1 << 30));
    const int period = int(key.ranged(Key::kSlidingWindowPattern, a->swa_period_default, 0, 1024));
    for (int l = 0; l < c.n_layer; ++l) {
      c.swa_layer[size_t(l)] = c.sliding_window > 0 && (period == 0 || l % period < period - 1);
    }
  }
  // Phi-3 files carry a sliding_window that llama.cpp ignores (its Phi SWA is disabled): so do we.

  const int scale_dim = a->n_layer_scaled_by_embd != 0 && c.n_layer == a->n_layer_scaled_by_embd
                            ? c.n_embd / c.n_head
                            : c.head_dim;
  c.attn_scale = 1.0f / std::sqrt(float(scale_dim));
  if (a->softcaps) {
    c.attn_softcap = float(key.real(Key::kAttnLogitSoftcap, 50.0));
    c.final_softcap = float(key.real(Key::kFinalLogitSoftcap, 30.0));
  }
  if (a->gemma) {
    c.embd_scale = std::sqrt(float(c.n_embd));
    c.ffn_act = FfnActivation::kGeluTanh;
  }
  validate(c, p);
  return c;
}

}  // namespace vq::engine
