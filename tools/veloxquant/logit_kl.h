// KL divergence of a model's next-token distributions against reference ones (an fp16 cache's),
// shared by perplexity and RateQuant's probe.
#pragma once

#include <cstdint>
#include <vector>

namespace vq::cli {

// log-softmax of one row, in double.
void log_softmax(const float* x, int64_t n, std::vector<double>* out);

// Reference rows kept for many comparisons: the probabilities (float) and, per row, sum p log p
// and sum p in double, so that KL(p || softmax(x)) = sum p log p - sum p x + logsumexp(x) sum p
// costs one pass and one exp per logit (sum p is kept so that the float rounding of p cancels).
class ReferenceDistributions {
 public:
  ReferenceDistributions(const std::vector<float>& logits, int64_t rows, int64_t n_vocab);
  int64_t rows() const { return rows_; }
  // Mean over rows of KL(p_row || softmax(logits_row)), each row clamped at 0; rows in parallel,
  // summed in row order (the same at any thread count).
  double mean_kl(const std::vector<float>& logits) const;

 private:
  int64_t rows_, V_;
  std::vector<float> p_;
  std::vector<double> plogp_, psum_;
};

}  // namespace vq::cli
