// Sampling over a candidate list that each filter shrinks.
#include "src/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace vq::engine {

int32_t argmax(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return int32_t(best);
}

int32_t Sampler::sample(const float* logits, int64_t n_vocab) {
  if (p_.temperature <= 0.0f) return argmax(logits, n_vocab);
  struct Cand {
    int32_t id;
    float logit;
  };
  std::vector<Cand> c(static_cast<size_t>(n_vocab));
  for (int64_t i = 0; i < n_vocab; ++i) c[size_t(i)] = {int32_t(i), logits[i]};
  const auto by_logit = [](const Cand& a, const Cand& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); };
  if (p_.top_k > 0 && p_.top_k < n_vocab) {
    std::partial_sort(c.begin(), c.begin() + p_.top_k, c.end(), by_logit);
    c.resize(size_t(p_.top_k));
  } else {
    std::sort(c.begin(), c.end(), by_logit);
  }
  const auto probs = [&]() {
    std::vector<double> p(c.size());
    double sum = 0;
    for (size_t i = 0; i < c.size(); ++i) sum += p[i] = std::exp(double(c[i].logit - c[0].logit));
    for (auto& x : p) x /= sum;
    return p;
  };
  if (p_.top_p < 1.0f) {
    const auto p = probs();
    double cum = 0;
    size_t keep = c.size();
    for (size_t i = 0; i < c.size(); ++i) {
      cum += p[i];
      if (cum >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
    c.resize(keep);
  }
  if (p_.min_p > 0.0f) {
    const auto p = probs();
    size_t keep = 1;
    while (keep < c.size() && p[keep] >= p_.min_p * p[0]) ++keep;
    c.resize(keep);
  }
  for (auto& x : c) x.logit /= p_.temperature;
  const auto p = probs();
  double r = rng_.uniform(), cum = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    cum += p[i];
    if (r < cum) return c[i].id;
  }
  return c.back().id;
}

}  // namespace vq::engine
