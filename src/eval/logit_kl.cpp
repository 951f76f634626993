#include "src/eval/logit_kl.h"

#include <algorithm>
#include <cmath>

#include "src/core/threads.h"
#include "src/engine/sampler.h"
#include "veloxquant/error.h"

namespace vq::eval {

void log_softmax(const float* x, int64_t n, std::vector<double>* out) {
  double mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, double(x[i]));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double(x[i]) - mx);
  const double lse = mx + std::log(sum);
  out->resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) (*out)[size_t(i)] = double(x[i]) - lse;
}

double kl_divergence(const double* lp, const double* lq, int64_t n) {
  double kl = 0;
  for (int64_t i = 0; i < n; ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
  return std::max(0.0, kl);
}

bool top1_agrees(const float* logits, const float* ref_logits, int64_t n) {
  return engine::argmax(logits, n) == engine::argmax(ref_logits, n);
}

ReferenceDistributions::ReferenceDistributions(const std::vector<float>& logits, int64_t rows, int64_t n_vocab)
    : rows_(rows), V_(n_vocab), p_(size_t(rows * n_vocab)), plogp_(size_t(rows)), psum_(size_t(rows)) {
  VQ_ASSERT(int64_t(logits.size()) >= rows * n_vocab);
  parallel_for(rows, [&](int64_t r) {
    std::vector<double> lp;
    log_softmax(logits.data() + r * V_, V_, &lp);
    double h = 0, s = 0;
    float* p = p_.data() + r * V_;
    for (int64_t i = 0; i < V_; ++i) {
      p[i] = float(std::exp(lp[size_t(i)]));
      h += double(p[i]) * lp[size_t(i)];
      s += double(p[i]);
    }
    plogp_[size_t(r)] = h;
    psum_[size_t(r)] = s;
  });
}

double ReferenceDistributions::mean_kl(const std::vector<float>& logits) const {
  VQ_ASSERT(int64_t(logits.size()) >= rows_ * V_);
  std::vector<double> kl(static_cast<size_t>(rows_));
  parallel_for(rows_, [&](int64_t r) {
    const float* x = logits.data() + r * V_;
    const float* p = p_.data() + r * V_;
    double mx = x[0];
    for (int64_t i = 1; i < V_; ++i) mx = std::max(mx, double(x[i]));
    double z = 0, px = 0;
    for (int64_t i = 0; i < V_; ++i) {
      z += std::exp(double(x[i]) - mx);
      px += double(p[i]) * x[i];
    }
    const double lse = mx + std::log(z);
    kl[size_t(r)] = std::max(0.0, plogp_[size_t(r)] - px + lse * psum_[size_t(r)]);
  });
  double sum = 0;
  for (double k : kl) sum += k;
  return sum / double(rows_);
}

}  // namespace vq::eval
