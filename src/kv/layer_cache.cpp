// LayerCache and KvCache: codecs per layer, two TokenStreams per KV head, memory accounting.
#include <fmt/format.h>

#include "src/core/aligned_buffer.h"
#include "src/core/threads.h"
#include "src/kv/registry.h"
#include "src/kv/stream.h"
#include "veloxquant/error.h"
#include "veloxquant/kv/cache.h"
#include "veloxquant/kv/calibration.h"

namespace vq::kv {

namespace {
// Tokens that leave the window at a time: one for codecs that encode tokens on their own.
template <typename Codec>
int flush_step(const Codec& c) {
  return c.encodes_single_tokens() ? 1 : c.block_tokens();
}

// What the codecs of a layer (and KV head, for per-head codecs) are built for.
CodecContext codec_context(const Method& method, const LayerConfig& config, int kv_head = 0) {
  CodecContext ctx{config.head_dim, config.layer_index, config.rope, nullptr};
  ctx.kv_head = kv_head;
  if (const Calibration* calib = method.calibration()) {
    VQ_CHECK_DATA(config.layer_index >= 0 && size_t(config.layer_index) < calib->layers.size() &&
                      calib->layers[size_t(config.layer_index)].head_dim == config.head_dim,
                  fmt::format("the calibration for '{}' does not fit layer {} (head size {})", method.spec(),
                              config.layer_index, config.head_dim));
    ctx.calib = &calib->layers[size_t(config.layer_index)];
  }
  return ctx;
}
}  // namespace

MemoryUsage& MemoryUsage::operator+=(const MemoryUsage& o) {
  block_bytes += o.block_bytes;
  window_bytes += o.window_bytes;
  sink_bytes += o.sink_bytes;
  param_bytes += o.param_bytes;
  key_elements_compressed += o.key_elements_compressed;
  value_elements_compressed += o.value_elements_compressed;
  elements_retained += o.elements_retained;
  return *this;
}

LayerCache::LayerCache(const Method& method, const LayerConfig& config) : config_(config) {
  VQ_CHECK(config.n_kv_heads > 0 && config.head_dim > 0,
           fmt::format("layer {}: n_kv_heads and head_dim must be positive", config.layer_index));
  VQ_CHECK(config.sliding_window >= 0, "sliding_window must be >= 0");
  const int H = config.n_kv_heads;
  for (int h = 0; h < (method.keys().per_head_codecs() ? H : 1); ++h) {
    key_codecs_.push_back(method.keys().key_codec(codec_context(method, config, h)));
  }
  for (int h = 0; h < (method.values().per_head_codecs() ? H : 1); ++h) {
    value_codecs_.push_back(method.values().value_codec(codec_context(method, config, h)));
  }
  // Per-head codecs may differ in shape (RateQuant's widths per head): each head's streams take
  // their own codec's blocks, and attention each codec's own query states and accumulators.
  const int sinks = method.sink_tokens();
  for (int h = 0; h < H; ++h) {
    const KeyCodec& kc = key_codec(h);
    const ValueCodec& vc = value_codec(h);
    keys_.push_back(std::make_unique<TokenStream>(config.head_dim, kc.block_tokens(), kc.block_bytes(),
                                                  method.keys().key_keep(), sinks, flush_step(kc),
                                                  TokenStream::page_tokens_for(config.sliding_window, vc.preferred_run_tokens())));
    values_.push_back(std::make_unique<TokenStream>(config.head_dim, vc.block_tokens(), vc.block_bytes(),
                                                    method.values().value_keep(), sinks, flush_step(vc),
                                                    TokenStream::page_tokens_for(config.sliding_window, vc.preferred_run_tokens())));
  }
}

LayerCache::~LayerCache() = default;
LayerCache::LayerCache(LayerCache&&) noexcept = default;
LayerCache& LayerCache::operator=(LayerCache&&) noexcept = default;

void LayerCache::append(const float* k, const float* v, int n) {
  VQ_CHECK(n >= 0, "append: negative token count");
  if (observer_) observer_->on_append(config_.layer_index, k, v, n, n_tokens_);
  const int H = config_.n_kv_heads, d = config_.head_dim;
  if (config_.sliding_window > 0) {
    // Queries from now on sit at positions >= n_tokens_, so they see nothing before this.
    const int64_t first_visible = n_tokens_ - config_.sliding_window + 1;
    for (int h = 0; h < H; ++h) {
      keys_[h]->evict_before(first_visible);
      values_[h]->evict_before(first_visible);
    }
  }
  const auto encoder = [](const auto& codec) -> BlockEncoder {
    if (codec.encodes_single_tokens()) {
      return [&codec](const float* x, int64_t p, int slot, uint8_t* b) { codec.encode_token(x, p, slot, b); };
    }
    return [&codec](const float* x, int64_t p, int, uint8_t* b) { codec.encode(x, p, b); };
  };
  const auto run_encoder = [](const auto& codec) -> RunEncoder {
    if (!codec.encodes_single_tokens()) return nullptr;
    return [&codec](const float* x, int64_t p, int slot, int count, uint8_t* b) {
      codec.encode_tokens(x, p, slot, count, b);
    };
  };
  // Each head (and K vs V) is independent: encoding runs in parallel over 2*H streams.
  parallel_for(2 * H, [&](int64_t job) {
    const int h = int(job / 2);
    const bool is_key = job % 2 == 0;
    TokenStream& s = is_key ? *keys_[h] : *values_[h];
    const float* src = is_key ? k : v;
    const BlockEncoder enc = is_key ? encoder(key_codec(h)) : encoder(value_codec(h));
    const RunEncoder run = is_key ? run_encoder(key_codec(h)) : run_encoder(value_codec(h));
    s.push_run(src + size_t(h) * d, size_t(H) * d, n, enc, run);
  });
  n_tokens_ += n;
}

void LayerCache::clear() {
  for (auto& s : keys_) s->clear();
  for (auto& s : values_) s->clear();
  n_tokens_ = 0;
}

MemoryUsage LayerCache::memory() const {
  MemoryUsage m;
  for (int h = 0; h < config_.n_kv_heads; ++h) {
    for (const TokenStream* s : {keys_[h].get(), values_[h].get()}) {
      m.block_bytes += s->page_bytes();
      m.window_bytes += s->window_bytes();
      m.sink_bytes += s->sink_bytes();
    }
    const int64_t d = config_.head_dim;
    m.key_elements_compressed += keys_[h]->compressed_tokens() * d;
    m.value_elements_compressed += values_[h]->compressed_tokens() * d;
    m.elements_retained += (keys_[h]->retained_tokens() + values_[h]->retained_tokens()) * d;
  }
  for (const auto& c : key_codecs_) m.param_bytes += c->param_bytes();
  for (const auto& c : value_codecs_) m.param_bytes += c->param_bytes();
  return m;
}


size_t estimate_kv_bytes(const Method& method, const std::vector<LayerConfig>& layers, int64_t n_tokens,
                         int64_t max_batch) {
  const auto round = [](size_t b) { return (b + kAlignment - 1) / kAlignment * kAlignment; };
  size_t total = 0;
  const int sinks = method.sink_tokens();
  for (const LayerConfig& c : layers) {
    // A sliding layer keeps its window, the batch and at most two pages; a global layer keeps all.
    const int64_t span =
        c.sliding_window > 0 ? std::min<int64_t>(n_tokens, c.sliding_window + max_batch + 512) : n_tokens;
    // Codecs built per head are counted per head (their parameters and blocks may differ); shared
    // ones once, their parameters once and their streams for every head.
    const int key_codecs = method.keys().per_head_codecs() ? c.n_kv_heads : 1;
    const int value_codecs = method.values().per_head_codecs() ? c.n_kv_heads : 1;
    std::vector<std::unique_ptr<KeyCodec>> kcs;
    std::vector<std::unique_ptr<ValueCodec>> vcs;
    for (int h = 0; h < key_codecs; ++h) kcs.push_back(method.keys().key_codec(codec_context(method, c, h)));
    for (int h = 0; h < value_codecs; ++h) vcs.push_back(method.values().value_codec(codec_context(method, c, h)));
    for (const auto& kc : kcs) total += kc->param_bytes();
    for (const auto& vc : vcs) total += vc->param_bytes();
    for (int h = 0; h < c.n_kv_heads; ++h) {
      const KeyCodec* kc = kcs[size_t(h % key_codecs)].get();
      const ValueCodec* vc = vcs[size_t(h % value_codecs)].get();
      const auto stream = [&](int B, size_t block_bytes, int keep, int step) {
        const int64_t blocks = (std::max<int64_t>(0, span - sinks) + B - 1) / B;
        const int64_t per_page =
            TokenStream::blocks_per_page(B, TokenStream::page_tokens_for(c.sliding_window, vc->preferred_run_tokens()));
        const int64_t pages = (blocks + per_page - 1) / per_page;
        return size_t(pages) * round(size_t(per_page) * block_bytes) + round(size_t(keep + step) * c.head_dim * 2) +
               round(size_t(sinks) * c.head_dim * 2);
      };
      total += stream(kc->block_tokens(), kc->block_bytes(), method.keys().key_keep(), flush_step(*kc)) +
               stream(vc->block_tokens(), vc->block_bytes(), method.values().value_keep(), flush_step(*vc));
    }
  }
  return total;
}

KvCache::KvCache(const Method& method, const std::vector<LayerConfig>& layers) : method_(method) {
  layers_.reserve(layers.size());
  for (const auto& c : layers) layers_.emplace_back(method_, c);
}

void KvCache::clear() {
  for (auto& l : layers_) l.clear();
}

MemoryUsage KvCache::memory() const {
  MemoryUsage m;
  for (const auto& l : layers_) m += l.memory();
  return m;
}

}  // namespace vq::kv
