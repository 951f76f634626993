// Perplexity's chunking (llama-perplexity's: BOS first, the second half scored) and its scoring
// on synthetic logits, against sums worked out by hand.
#include "src/eval/perplexity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace vq::eval {
namespace {

TEST(Perplexity, ChunkCount) {
  EXPECT_EQ(count_chunks(1000, 256, -1), 3);
  EXPECT_EQ(count_chunks(1000, 256, 2), 2);
  EXPECT_EQ(count_chunks(1000, 256, 10), 3);
  EXPECT_EQ(count_chunks(255, 256, -1), 0);
  EXPECT_EQ(count_chunks(512, 256, 0), 0);
}

TEST(Perplexity, ChunkBoundariesAndBos) {
  std::vector<int32_t> tokens(20);
  for (int i = 0; i < 20; ++i) tokens[size_t(i)] = 100 + i;
  EXPECT_EQ(chunk_tokens(tokens, 0, 8, 1), (std::vector<int32_t>{1, 101, 102, 103, 104, 105, 106, 107}));
  EXPECT_EQ(chunk_tokens(tokens, 1, 8, 1), (std::vector<int32_t>{1, 109, 110, 111, 112, 113, 114, 115}));
  EXPECT_EQ(chunk_tokens(tokens, 1, 8, -1), (std::vector<int32_t>{108, 109, 110, 111, 112, 113, 114, 115}));
}

TEST(Perplexity, ScoresTheSecondHalfButTheLastRow) {
  EXPECT_EQ(first_scored_row(8), 4);
  EXPECT_EQ(scored_rows(8), (std::vector<uint8_t>{0, 0, 0, 0, 1, 1, 1, 0}));
  EXPECT_EQ(scored_rows(7), (std::vector<uint8_t>{0, 0, 0, 1, 1, 1, 0}));
}

// Logits over a 2-token vocabulary whose softmax is (p, 1-p).
void put_row(std::vector<float>* out, double p) {
  out->push_back(float(std::log(p)));
  out->push_back(float(std::log(1 - p)));
}

TEST(Perplexity, ScoreAgainstHandComputation) {
  // A chunk of 6 tokens scores rows 3 and 4, which predict tokens 4 and 5.
  const std::vector<int32_t> chunk = {9, 0, 0, 0, 1, 0};
  std::vector<float> logits, ref;
  put_row(&logits, 0.5);  // row 3: p(token 1) = 0.5
  put_row(&logits, 0.8);  // row 4: p(token 0) = 0.8
  put_row(&ref, 0.25);    // reference row 3: p(token 1) = 0.75, top-1 token 1 (method: a tie, token 0)
  put_row(&ref, 0.9);     // reference row 4: p(token 0) = 0.9, top-1 token 0 as the method's
  PerplexityTally t;
  t.add_chunk(chunk, logits.data(), ref.data(), 2);
  ASSERT_EQ(t.count, 2);
  const double nll3 = -std::log(0.5), nll4 = -std::log(0.8);
  EXPECT_NEAR(t.nll, nll3 + nll4, 1e-6);
  EXPECT_NEAR(t.nll2, nll3 * nll3 + nll4 * nll4, 1e-6);
  EXPECT_NEAR(t.ref_nll, -std::log(0.75) - std::log(0.9), 1e-6);
  EXPECT_EQ(t.agree, 1);
  ASSERT_EQ(t.kls.size(), 2u);
  const double kl3 = 0.25 * std::log(0.25 / 0.5) + 0.75 * std::log(0.75 / 0.5);
  const double kl4 = 0.9 * std::log(0.9 / 0.8) + 0.1 * std::log(0.1 / 0.2);
  EXPECT_NEAR(t.kls[0], kl3, 1e-6);
  EXPECT_NEAR(t.kls[1], kl4, 1e-6);

  const PerplexityScore s = score(t);
  const double mean = (nll3 + nll4) / 2;
  EXPECT_NEAR(s.ppl, std::exp(mean), 1e-6);
  EXPECT_NEAR(t.ppl(), s.ppl, 1e-12);
  // llama-perplexity's error: ppl * sqrt(var / (n - 1)) with var = E[nll^2] - E[nll]^2.
  const double var = (nll3 * nll3 + nll4 * nll4) / 2 - mean * mean;
  EXPECT_NEAR(s.ppl_stderr, s.ppl * std::sqrt(var), 1e-6);
  EXPECT_EQ(s.tokens_scored, 2);
  ASSERT_TRUE(s.compared);
  EXPECT_NEAR(s.kl_mean, (kl3 + kl4) / 2, 1e-6);
  EXPECT_NEAR(s.kl_p99, std::max(kl3, kl4), 1e-6);  // index min(1, int(0.99 * 2)) = 1 of 2 sorted
  EXPECT_DOUBLE_EQ(s.top1_agreement, 0.5);
  EXPECT_NEAR(s.ppl_fp16, std::exp((-std::log(0.75) - std::log(0.9)) / 2), 1e-6);
}

TEST(Perplexity, WithoutReferenceNothingIsCompared) {
  const std::vector<int32_t> chunk = {9, 0, 0, 0, 1, 0};
  std::vector<float> logits;
  put_row(&logits, 0.5);
  put_row(&logits, 0.5);
  PerplexityTally t;
  t.add_chunk(chunk, logits.data(), nullptr, 2);
  t.add_chunk(chunk, logits.data(), nullptr, 2);
  EXPECT_EQ(t.count, 4);
  const PerplexityScore s = score(t);
  EXPECT_FALSE(s.compared);
  EXPECT_TRUE(t.kls.empty());
  EXPECT_NEAR(s.ppl, 2.0, 1e-6);      // every token at probability 1/2
  EXPECT_EQ(s.ppl_stderr, 0.0);       // no spread
  EXPECT_EQ(s.kl_mean, 0.0);
}

TEST(Perplexity, P99PicksTheUpperTail) {
  PerplexityTally t;
  t.count = 200;
  t.nll = 200;
  for (int i = 0; i < 200; ++i) t.kls.push_back(double((i * 37) % 200));  // 0..199, shuffled
  const PerplexityScore s = score(t);
  EXPECT_EQ(s.kl_p99, 198.0);  // sorted[int(0.99 * 200)]
  EXPECT_DOUBLE_EQ(s.kl_mean, 99.5);
}

}  // namespace
}  // namespace vq::eval
