// Session: splits input into micro-batches and tracks the position.
#include "src/engine/session.h"

#include <fmt/format.h>

#include <cmath>
#include <string>

#include "src/core/byte_io.h"
#include "src/core/meminfo.h"
#include "src/kv/cache_io.h"
#include "veloxquant/error.h"

namespace vq::engine {

namespace {

kv::KvCache budgeted_cache(const Model& model, const kv::Method& method, int64_t n_ctx, int ubatch, size_t budget) {
  VQ_CHECK(n_ctx > 0, "context size must be positive");
  const auto layout = model.cache_layout();
  if (budget > 0) {
    const size_t need = kv::estimate_kv_bytes(method, layout, n_ctx, ubatch);
    VQ_CHECK(need <= budget, fmt::format("the KV cache for {} tokens with {} needs {:.1f} MiB, over the budget of "
                                         "{:.1f} MiB (--kv-budget): lower -c or use a smaller method",
                                         n_ctx, method.spec(), need / 1048576.0, budget / 1048576.0));
  }
  return kv::KvCache(method, layout);
}

}  // namespace

size_t default_kv_budget() { return mem_available_bytes() / 10 * 8; }  // 0 (no limit) where unknown

Session::Session(const Model& model, const kv::Method& method, int64_t n_ctx, int ubatch, size_t kv_budget)
    : model_(model), cache_(budgeted_cache(model, method, n_ctx, ubatch, kv_budget)), n_ctx_(n_ctx), ubatch_(ubatch) {
  VQ_CHECK(ubatch > 0, "--ubatch must be positive");
}

void Session::restore_cache(ByteReader& r, int64_t n_past) {
  kv::load_cache(cache_, r);
  for (size_t l = 0; l < cache_.n_layers(); ++l) {
    r.check(cache_.layer(l).n_tokens() == n_past, "position", "layers disagree with the saved position");
  }
  n_past_ = n_past;
}

void Session::clear() {
  cache_.clear();
  n_past_ = 0;
}

void Session::feed_select(const std::vector<int32_t>& tokens, const std::vector<uint8_t>& want, std::vector<float>* out) {
  VQ_CHECK(n_past_ + int64_t(tokens.size()) <= n_ctx_,
           fmt::format("context full: {} tokens in the cache plus {} new exceed the context size {}", n_past_,
                       tokens.size(), n_ctx_));
  const int64_t V = model_.config().n_vocab;
  int64_t n_want = 0;
  for (uint8_t w : want) n_want += w ? 1 : 0;
  if (out) out->assign(size_t(n_want * V), 0.0f);
  int64_t written = 0;
  for (size_t b = 0; b < tokens.size(); b += size_t(ubatch_)) {
    const int n = int(std::min<size_t>(size_t(ubatch_), tokens.size() - b));
    int64_t k = 0;
    for (int i = 0; i < n; ++i) k += want[b + size_t(i)] ? 1 : 0;
    float* logits = out ? out->data() + written * V : nullptr;
    model_.forward(tokens.data() + b, n, n_past_, cache_, want.data() + b, logits, act_);
    // A NaN or Inf logit (from the weights or a cache method) would be sampled from silently.
    for (int64_t i = 0; logits && i < k * V; ++i) {
      if (!std::isfinite(logits[i])) {
        throw_error(ErrorKind::kInternal, fmt::format("non-finite logit at position {} (the model or the {} "
                                                      "KV cache produced NaN or Inf)", n_past_, cache_.method().spec()));
      }
    }
    written += k;
    n_past_ += n;
  }
}

void Session::feed(const std::vector<int32_t>& tokens, std::vector<float>* last, std::vector<float>* all) {
  std::vector<uint8_t> want(tokens.size(), all ? 1 : 0);
  if (!want.empty()) want.back() = (all || last) ? 1 : 0;
  std::vector<float> out;
  feed_select(tokens, want, &out);
  const int64_t V = model_.config().n_vocab;
  if (last && !tokens.empty()) last->assign(out.end() - V, out.end());
  if (all) *all = std::move(out);
}

}  // namespace vq::engine
