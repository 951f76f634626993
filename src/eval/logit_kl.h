// Comparing a model's next-token distributions with reference ones (an fp16 cache's): log-softmax,
// the KL divergence and top-1 agreement of one row, and a reference kept for many comparisons.
// Perplexity scores rows one at a time; RateQuant's probe compares hundreds of runs with one
// reference and uses ReferenceDistributions, which does the same sum in a cheaper order.
#pragma once

#include <cstdint>
#include <vector>

namespace vq::eval {

// log-softmax of one row of n logits, in double.
void log_softmax(const float* x, int64_t n, std::vector<double>* out);

// KL(p || q) = sum_i p_i (log p_i - log q_i) for one row, from the log-probabilities lp and lq
// (log_softmax outputs, n each), summed in index order and clamped at 0.
double kl_divergence(const double* lp, const double* lq, int64_t n);

// Whether the most likely token (engine::argmax: the first of equal maxima) of the two rows of
// n logits is the same.
bool top1_agrees(const float* logits, const float* ref_logits, int64_t n);

// Reference rows kept for many comparisons: the probabilities (float) and, per row, sum p log p
// and sum p in double, so that KL(p || softmax(x)) = sum p log p - sum p x + logsumexp(x) sum p
// costs one pass and one exp per logit (sum p is kept so that the float rounding of p cancels).
class ReferenceDistributions {
 public:
  // logits: rows * n_vocab floats, row after row.
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

}  // namespace vq::eval
