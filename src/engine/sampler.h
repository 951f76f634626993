// Token sampling: greedy (temperature 0), or temperature with top-k, top-p and min-p filters
// applied in llama.cpp's default order (top-k, top-p, min-p, temperature), from a seeded RNG.
#pragma once

#include <cstdint>
#include <vector>

#include "src/core/rng.h"

namespace vq::engine {

struct SamplerParams {
  float temperature = 0.0f;  // <= 0: greedy
  int top_k = 40;            // <= 0: off
  float top_p = 0.95f;       // >= 1: off
  float min_p = 0.05f;       // <= 0: off
  uint64_t seed = 1234;
};

class Sampler {
 public:
  explicit Sampler(const SamplerParams& p) : p_(p), rng_(p.seed) {}
  int32_t sample(const float* logits, int64_t n_vocab);
  Rng& rng() { return rng_; }

 private:
  SamplerParams p_;
  Rng rng_;
};

// Index of the largest logit (the first on ties).
int32_t argmax(const float* logits, int64_t n);

}  // namespace vq::engine
