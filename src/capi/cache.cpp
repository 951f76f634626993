// The C API's KV cache on its own: built from layer shapes and a method, fed keys and values,
// attended by queries. Every shape and position is checked here, before the cache sees it.
#include <climits>
#include <cmath>

#include "src/capi/handles.h"
#include "src/core/fp16.h"

using namespace vq::capi;

namespace {

constexpr int64_t kMaxTokensPerCall = int64_t(1) << 24;

const vq::kv::LayerConfig& layer_config(const vq_cache* cache, int32_t layer) {
  VQ_CHECK(layer >= 0 && size_t(layer) < cache->layers.size(),
           fmt::format("layer {} is outside [0, {})", layer, cache->layers.size()));
  return cache->layers[size_t(layer)];
}

void check_kv_shape(const vq_cache* cache, int32_t layer, int64_t n_tokens, int32_t n_kv_heads, int32_t head_dim) {
  const vq::kv::LayerConfig& c = layer_config(cache, layer);
  VQ_CHECK(n_kv_heads == c.n_kv_heads && head_dim == c.head_dim,
           fmt::format("keys and values shaped [tokens][{}][{}], the cache holds [tokens][{}][{}]", n_kv_heads,
                       head_dim, c.n_kv_heads, c.head_dim));
  VQ_CHECK(n_tokens >= 0 && n_tokens <= kMaxTokensPerCall,
           fmt::format("n_tokens {} is outside [0, {}]", n_tokens, kMaxTokensPerCall));
}

// The checks of both appends (cache, shape, then the arrays unless there are no tokens); false
// when there is nothing to append.
bool check_append(vq_cache* cache, int32_t layer, const void* k, const void* v, int64_t n_tokens, int32_t n_kv_heads,
                  int32_t head_dim) {
  require_ptr(cache, "cache");
  check_kv_shape(cache, layer, n_tokens, n_kv_heads, head_dim);
  if (n_tokens == 0) return false;
  require_ptr(k, "k");
  require_ptr(v, "v");
  return true;
}

void append(vq_cache* cache, int32_t layer, const float* k, const float* v, int64_t n_tokens) {
  cache->cache->layer(size_t(layer)).append(k, v, int(n_tokens));
  cache->last_append[size_t(layer)] = n_tokens;
}

// The positions of a query batch, checked against what the layer can answer: every position
// must hold a token, and on a sliding-window layer the tokens before the last append may be gone.
std::vector<int64_t> query_positions(const vq_cache* cache, int32_t layer, int64_t n_q, const int64_t* positions) {
  const int64_t n = cache->cache->layer(size_t(layer)).n_tokens();
  VQ_CHECK(n > 0, fmt::format("layer {} holds no tokens to attend to", layer));
  std::vector<int64_t> pos(static_cast<size_t>(n_q));
  const bool windowed = cache->layers[size_t(layer)].sliding_window > 0;
  const int64_t oldest = windowed ? n - cache->last_append[size_t(layer)] : 0;
  for (int64_t i = 0; i < n_q; ++i) {
    pos[size_t(i)] = positions ? positions[i] : n - n_q + i;
    const int64_t p = pos[size_t(i)];
    VQ_CHECK(p >= 0 && p < n, fmt::format("query {} sits at position {}, outside the layer's [0, {})", i, p, n));
    VQ_CHECK(p >= oldest,
             fmt::format("query {} sits at position {}, before the last append (from {}) on a sliding-window layer, "
                         "whose older tokens may be dropped",
                         i, p, oldest));
  }
  return pos;
}

template <class Attend>
vq_status attend_checked(const vq_cache* cache, int32_t layer, const float* q, int64_t n_q, int32_t n_heads,
                         int32_t head_dim, const int64_t* positions, float scale, float* out, Attend&& attend) {
  return guard([&] {
    require_ptr(cache, "cache");
    const vq::kv::LayerConfig& c = layer_config(cache, layer);
    VQ_CHECK(head_dim == c.head_dim, fmt::format("head_dim {}, the cache's is {}", head_dim, c.head_dim));
    VQ_CHECK(n_heads >= 1 && n_heads <= 65536 && n_heads % c.n_kv_heads == 0,
             fmt::format("n_heads {} is not a positive multiple of the cache's {} KV heads", n_heads, c.n_kv_heads));
    VQ_CHECK(n_q >= 0 && n_q <= kMaxTokensPerCall, fmt::format("n_q {} is outside [0, {}]", n_q, kMaxTokensPerCall));
    VQ_CHECK(std::isfinite(scale), "scale is not finite");
    if (n_q == 0) return;
    require_ptr(q, "q");
    require_ptr(out, "out");
    const std::vector<int64_t> pos = query_positions(cache, layer, n_q, positions);
    const float s = scale > 0 ? scale : 1.0f / std::sqrt(float(head_dim));
    attend(cache->cache->layer(size_t(layer)), q, int(n_q), int(n_heads), pos.data(), s, out);
  });
}

}  // namespace

extern "C" {

VQ_API void vq_cache_config_init(vq_cache_config* config) {
  if (!config) return;
  *config = vq_cache_config{};
  config->rope_style = VQ_ROPE_NONE;
  config->rope_base = 10000.0f;
  config->rope_freq_scale = 1.0f;
}

VQ_API vq_status vq_cache_create(const vq_cache_config* config, vq_cache** out) {
  return guard([&] {
    require_ptr(out, "out");
    *out = nullptr;
    require_ptr(config, "config");
    require_ptr(config->spec, "config->spec");
    const vq_cache_config& c = *config;
    VQ_CHECK(c.n_layers >= 1 && c.n_layers <= 4096, fmt::format("n_layers {} is outside [1, 4096]", c.n_layers));
    VQ_CHECK(c.n_kv_heads >= 1 && c.n_kv_heads <= 1024, fmt::format("n_kv_heads {} is outside [1, 1024]", c.n_kv_heads));
    VQ_CHECK(c.head_dim >= 1 && c.head_dim <= 4096, fmt::format("head_dim {} is outside [1, 4096]", c.head_dim));
    VQ_CHECK(c.rope_style == VQ_ROPE_NONE || c.rope_style == VQ_ROPE_NEOX || c.rope_style == VQ_ROPE_NORM,
             fmt::format("rope_style {} is not VQ_ROPE_NONE, VQ_ROPE_NEOX or VQ_ROPE_NORM", c.rope_style));
    VQ_CHECK(std::isfinite(c.rope_base) && c.rope_base > 0, "rope_base must be positive and finite");
    VQ_CHECK(std::isfinite(c.rope_freq_scale) && c.rope_freq_scale > 0, "rope_freq_scale must be positive and finite");
    VQ_CHECK(std::isfinite(c.logit_softcap) && c.logit_softcap >= 0, "logit_softcap must be >= 0 and finite");
    auto h = std::make_unique<vq_cache>(vq_cache{method_with_calibration(c.spec, c.calib_path, nullptr), {}, {}, {}, {}});
    vq::kv::RopeSpec rope;
    rope.style = c.rope_style == VQ_ROPE_NEOX   ? vq::kv::RopeSpec::Style::kNeox
                 : c.rope_style == VQ_ROPE_NORM ? vq::kv::RopeSpec::Style::kNorm
                                                : vq::kv::RopeSpec::Style::kNone;
    rope.base = c.rope_base;
    rope.freq_scale = c.rope_freq_scale;
    for (int32_t l = 0; l < c.n_layers; ++l) {
      const int32_t window = c.sliding_window ? c.sliding_window[l] : 0;
      VQ_CHECK(window >= 0, fmt::format("sliding_window[{}] = {} is negative", l, window));
      vq::kv::LayerConfig lc(c.n_kv_heads, c.head_dim, l, window, rope);
      lc.logit_softcap = c.logit_softcap;
      h->layers.push_back(lc);
    }
    h->cache = std::make_unique<vq::kv::KvCache>(h->method, h->layers);
    h->last_append.assign(h->layers.size(), 0);
    *out = h.release();
  });
}

VQ_API void vq_cache_free(vq_cache* cache) { delete cache; }

VQ_API const char* vq_cache_spec(const vq_cache* cache) { return cache ? cache->method.spec().c_str() : ""; }

VQ_API vq_status vq_cache_shape(const vq_cache* cache, int32_t* n_layers, int32_t* n_kv_heads, int32_t* head_dim) {
  return guard([&] {
    require_ptr(cache, "cache");
    if (n_layers) *n_layers = int32_t(cache->layers.size());
    if (n_kv_heads) *n_kv_heads = cache->layers[0].n_kv_heads;
    if (head_dim) *head_dim = cache->layers[0].head_dim;
  });
}

VQ_API vq_status vq_cache_append_f32(vq_cache* cache, int32_t layer, const float* k, const float* v, int64_t n_tokens,
                                     int32_t n_kv_heads, int32_t head_dim) {
  return guard([&] {
    if (check_append(cache, layer, k, v, n_tokens, n_kv_heads, head_dim)) append(cache, layer, k, v, n_tokens);
  });
}

VQ_API vq_status vq_cache_append_f16(vq_cache* cache, int32_t layer, const uint16_t* k, const uint16_t* v,
                                     int64_t n_tokens, int32_t n_kv_heads, int32_t head_dim) {
  return guard([&] {
    if (!check_append(cache, layer, k, v, n_tokens, n_kv_heads, head_dim)) return;
    const size_t n = size_t(n_tokens) * size_t(n_kv_heads) * size_t(head_dim);
    std::vector<float> kf(n), vf(n);
    vq::f16_to_f32(k, kf.data(), n);
    vq::f16_to_f32(v, vf.data(), n);
    append(cache, layer, kf.data(), vf.data(), n_tokens);
  });
}

VQ_API vq_status vq_cache_n_tokens(const vq_cache* cache, int32_t layer, int64_t* n_tokens) {
  return guard([&] {
    require_ptr(cache, "cache");
    require_ptr(n_tokens, "n_tokens");
    layer_config(cache, layer);
    *n_tokens = cache->cache->layer(size_t(layer)).n_tokens();
  });
}

VQ_API vq_status vq_cache_attend(const vq_cache* cache, int32_t layer, const float* q, int64_t n_q, int32_t n_heads,
                                 int32_t head_dim, const int64_t* positions, float scale, float* out) {
  return attend_checked(cache, layer, q, n_q, n_heads, head_dim, positions, scale, out,
                        [&](const vq::kv::LayerCache& lc, const float* q_, int nq, int nh, const int64_t* p, float s,
                            float* o) { lc.attend(q_, nq, nh, p, s, o, cache->workspace); });
}

VQ_API vq_status vq_cache_attend_reference(const vq_cache* cache, int32_t layer, const float* q, int64_t n_q,
                                           int32_t n_heads, int32_t head_dim, const int64_t* positions, float scale,
                                           float* out) {
  return attend_checked(cache, layer, q, n_q, n_heads, head_dim, positions, scale, out,
                        [](const vq::kv::LayerCache& lc, const float* q_, int nq, int nh, const int64_t* p, float s,
                           float* o) { lc.attend_reference(q_, nq, nh, p, s, o); });
}

VQ_API vq_status vq_cache_memory(const vq_cache* cache, int32_t layer, vq_memory* out) {
  return guard([&] {
    require_ptr(cache, "cache");
    require_ptr(out, "out");
    if (layer < 0) {
      *out = to_c(cache->cache->memory());
    } else {
      layer_config(cache, layer);
      *out = to_c(cache->cache->layer(size_t(layer)).memory());
    }
  });
}

VQ_API vq_status vq_cache_clear(vq_cache* cache) {
  return guard([&] {
    require_ptr(cache, "cache");
    cache->cache->clear();
    cache->last_append.assign(cache->layers.size(), 0);
  });
}

}  // extern "C"
