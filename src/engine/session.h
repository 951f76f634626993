// A generation session: a model, its compressed KV cache, and the position reached. Prompts are
// fed in micro-batches (`ubatch` tokens): a micro-batch's keys and values enter the cache before
// its queries attend to the cache as stored, as in llama.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "src/core/byte_io.h"
#include "src/engine/model.h"
#include "veloxquant/kv/cache.h"

namespace vq::engine {

class Session {
 public:
  // Refuses (vq::Error, usage) a cache whose estimated size at n_ctx tokens exceeds kv_budget
  // bytes, before allocating anything; 0 means no limit.
  Session(const Model& model, const kv::Method& method, int64_t n_ctx, int ubatch = 512, size_t kv_budget = 0);

  // Feeds tokens at the current position. Logits of the last token go to `last` (if given);
  // with `all`, logits of every token ([n][n_vocab]). Refuses to run past n_ctx.
  void feed(const std::vector<int32_t>& tokens, std::vector<float>* last, std::vector<float>* all = nullptr);
  // Like feed, but only the tokens whose flag is set produce logits, written in order to `out`.
  void feed_select(const std::vector<int32_t>& tokens, const std::vector<uint8_t>& want, std::vector<float>* out);

  int64_t n_past() const { return n_past_; }
  int64_t n_ctx() const { return n_ctx_; }
  void clear();
  // Loads a saved cache holding n_past positions (see session_file.h).
  void restore_cache(ByteReader& r, int64_t n_past);
  const kv::KvCache& cache() const { return cache_; }
  // Reports every layer's keys, values and queries to `o` (capture for fidelity, calibration).
  void set_observer(kv::CacheObserver* o) { cache_.set_observer(o); }
  const Model& model() const { return model_; }

 private:
  const Model& model_;
  kv::KvCache cache_;
  Activations act_;  // the forward pass's buffers, kept across calls
  int64_t n_ctx_;
  int ubatch_;
  int64_t n_past_ = 0;
};

// 80% of the memory the system reports available (MemAvailable), the default --kv-budget.
size_t default_kv_budget();

}  // namespace vq::engine
