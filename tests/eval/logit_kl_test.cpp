// KL divergence and top-1 agreement on hand-made distributions, and the reference-kept form
// (ReferenceDistributions, RateQuant's probe) against the per-row one (perplexity).
#include "src/eval/logit_kl.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "src/core/rng.h"

namespace vq::eval {
namespace {

TEST(LogitKl, LogSoftmaxOfKnownLogits) {
  // Logits log(1), log(2), log(5): probabilities 1/8, 2/8, 5/8.
  const std::vector<float> x = {0.0f, float(std::log(2.0)), float(std::log(5.0))};
  std::vector<double> lp;
  log_softmax(x.data(), 3, &lp);
  ASSERT_EQ(lp.size(), 3u);
  EXPECT_NEAR(lp[0], std::log(1.0 / 8), 1e-7);
  EXPECT_NEAR(lp[1], std::log(2.0 / 8), 1e-7);
  EXPECT_NEAR(lp[2], std::log(5.0 / 8), 1e-7);
  // Shifting every logit changes nothing.
  const std::vector<float> y = {100.0f, 100.0f + float(std::log(2.0)), 100.0f + float(std::log(5.0))};
  std::vector<double> ly;
  log_softmax(y.data(), 3, &ly);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(ly[size_t(i)], lp[size_t(i)], 1e-5);
}

TEST(LogitKl, KlOfHandMadeDistributions) {
  // p = (1/2, 1/2), q = (1/4, 3/4): KL = 1/2 log 2 + 1/2 log(2/3).
  const std::vector<double> lp = {std::log(0.5), std::log(0.5)};
  const std::vector<double> lq = {std::log(0.25), std::log(0.75)};
  EXPECT_NEAR(kl_divergence(lp.data(), lq.data(), 2), 0.5 * std::log(2.0) + 0.5 * std::log(2.0 / 3.0), 1e-15);
  // Not symmetric: KL(q || p) = 1/4 log(1/2) + 3/4 log(3/2).
  EXPECT_NEAR(kl_divergence(lq.data(), lp.data(), 2), 0.25 * std::log(0.5) + 0.75 * std::log(1.5), 1e-15);
  EXPECT_EQ(kl_divergence(lp.data(), lp.data(), 2), 0.0);
  // A row that rounds below 0 is clamped: "p" that sums to less than 1 against a true q.
  const std::vector<double> small = {std::log(0.25), std::log(0.25)};
  EXPECT_EQ(kl_divergence(small.data(), lp.data(), 2), 0.0);
}

TEST(LogitKl, Top1Agreement) {
  const std::vector<float> a = {0.1f, 3.0f, 2.0f}, b = {0.0f, 1.0f, 0.5f}, c = {0.0f, 1.0f, 1.5f};
  EXPECT_TRUE(top1_agrees(a.data(), b.data(), 3));
  EXPECT_FALSE(top1_agrees(a.data(), c.data(), 3));
  // Ties go to the first maximum in both rows.
  const std::vector<float> tie = {2.0f, 2.0f, 0.0f}, first = {1.0f, 0.0f, 0.0f};
  EXPECT_TRUE(top1_agrees(tie.data(), first.data(), 3));
}

TEST(LogitKl, ReferenceFormAgreesWithPerRowKl) {
  const int64_t rows = 5, V = 300;
  Rng rng(11);
  std::vector<float> ref(size_t(rows * V)), x(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    ref[i] = float(8 * rng.uniform() - 4);
    x[i] = ref[i] + float(rng.uniform() - 0.5);
  }
  double want = 0;
  std::vector<double> lp, lq;
  for (int64_t r = 0; r < rows; ++r) {
    log_softmax(ref.data() + r * V, V, &lp);
    log_softmax(x.data() + r * V, V, &lq);
    want += kl_divergence(lp.data(), lq.data(), V);
  }
  want /= double(rows);
  ASSERT_GT(want, 1e-3);
  const ReferenceDistributions p(ref, rows, V);
  EXPECT_EQ(p.rows(), rows);
  EXPECT_NEAR(p.mean_kl(x), want, 1e-6 * want);
  EXPECT_NEAR(p.mean_kl(ref), 0.0, 1e-6);
}

}  // namespace
}  // namespace vq::eval
