// The generation loop generate and chat share, on the real model with greedy sampling: what it
// feeds back, where it stops, and what banning tokens does.
#include "src/eval/generation.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "src/engine/model.h"
#include "tests/engine/model_path.h"

namespace vq::eval {
namespace {

class Generation : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = engine::Model::load(engine::testing::model_path()).release(); }
  static void TearDownTestSuite() { delete model_; }

  // A fresh session fed the prompt, and a greedy run of the loop from its logits.
  struct Run {
    Generated gen;
    std::string text;
    int64_t n_past = 0;
    int64_t prompt = 0;
  };
  static Run run(const GenerationLimits& limits) {
    const auto& tok = model_->tokenizer();
    engine::Session session(*model_, kv::parse_method("fp16"), 64);
    engine::Sampler sampler(engine::SamplerParams{});
    std::vector<float> logits;
    const std::vector<int32_t> prompt = tok.encode("The capital of France is");
    session.feed(prompt, &logits);
    Run r;
    r.prompt = int64_t(prompt.size());
    r.gen = generate_tokens(session, sampler, tok, model_->config().n_vocab, &logits, limits,
                            [&](const std::string& piece) { r.text += piece; });
    r.n_past = session.n_past();
    return r;
  }
  static engine::Model* model_;
};
engine::Model* Generation::model_ = nullptr;

TEST_F(Generation, FeedsEveryTokenButTheLastUnlessAsked) {
  GenerationLimits limits;
  limits.n_predict = 4;
  limits.n_ctx = 64;
  limits.feed_last = false;
  const Run a = run(limits);
  ASSERT_EQ(a.gen.ids.size(), 4u);
  EXPECT_FALSE(a.gen.last_fed);
  EXPECT_EQ(a.n_past, a.prompt + 3);
  limits.feed_last = true;
  const Run b = run(limits);
  EXPECT_EQ(b.gen.ids, a.gen.ids);  // greedy: the same tokens
  EXPECT_TRUE(b.gen.last_fed);
  EXPECT_EQ(b.n_past, b.prompt + 4);
  EXPECT_EQ(b.text, a.text);
  std::string pieces;
  for (int32_t id : a.gen.ids) pieces += model_->tokenizer().piece(id);
  EXPECT_EQ(a.text, pieces);
}

TEST_F(Generation, StopsWhenTheContextIsFull) {
  GenerationLimits limits;
  limits.n_predict = 10;
  const Run probe = run({1, 64, true, {}});
  limits.n_ctx = probe.prompt + 2;  // room for two fed tokens
  const Run r = run(limits);
  EXPECT_EQ(r.gen.ids.size(), 2u);
  EXPECT_EQ(r.n_past, r.prompt + 2);
}

TEST_F(Generation, BannedTokensAreNeverSampled) {
  const Run free = run({3, 64, true, {}});
  ASSERT_FALSE(free.gen.ids.empty());
  const int32_t first = free.gen.ids[0];
  const Run banned = run({3, 64, true, {first}});
  ASSERT_FALSE(banned.gen.ids.empty());
  for (int32_t id : banned.gen.ids) EXPECT_NE(id, first);
}

TEST_F(Generation, EogTokensOfTheVocabulary) {
  const auto& tok = model_->tokenizer();
  const std::vector<int32_t> eog = eog_tokens(tok);
  ASSERT_FALSE(eog.empty());
  for (int32_t id : eog) EXPECT_TRUE(tok.is_eog(id));
  int n = 0;
  for (int32_t id = 0; id < tok.n_vocab(); ++id) n += tok.is_eog(id);
  EXPECT_EQ(size_t(n), eog.size());
}

}  // namespace
}  // namespace vq::eval
