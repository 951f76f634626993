// Sessions on the real model: feeding a prompt in pieces (as chat turns do, the cache kept
// between them) gives the logits of feeding it at once; --ubatch 1 (token by token) agrees with
// batched prefill on the fp16 cache; the context limit is enforced.
#include "src/engine/session.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/engine/model_path.h"
#include "veloxquant/error.h"

namespace vq::engine {
namespace {

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, double(std::fabs(a[i] - b[i])));
    den = std::max(den, double(std::fabs(b[i])));
  }
  return num / den;
}

class GemmaSession : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = Model::load(testing::model_path()).release(); }
  static void TearDownTestSuite() { delete model_; }
  static Model* model_;
};
Model* GemmaSession::model_ = nullptr;

TEST_F(GemmaSession, PiecesEqualWhole) {
  const auto ids = model_->tokenizer().encode("<start_of_turn>user\nHello there, how are you?<end_of_turn>\n<start_of_turn>model\n");
  const kv::Method fp16 = kv::parse_method("fp16");
  Session whole(*model_, fp16, 256), pieces(*model_, fp16, 256);
  std::vector<float> a, b;
  whole.feed(ids, &a);
  const size_t cut = ids.size() / 2;
  pieces.feed(std::vector<int32_t>(ids.begin(), ids.begin() + long(cut)), nullptr);
  pieces.feed(std::vector<int32_t>(ids.begin() + long(cut), ids.end()), &b);
  EXPECT_EQ(pieces.n_past(), whole.n_past());
  EXPECT_LT(max_rel_diff(b, a), 1e-3);
}

TEST_F(GemmaSession, TokenByTokenMatchesBatched) {
  const auto ids = model_->tokenizer().encode("The quick brown fox jumps over the lazy dog.");
  const kv::Method fp16 = kv::parse_method("fp16");
  Session batched(*model_, fp16, 128, 512), single(*model_, fp16, 128, 1);
  std::vector<float> a, b;
  batched.feed(ids, &a);
  single.feed(ids, &b);
  EXPECT_LT(max_rel_diff(b, a), 1e-3);
}

TEST_F(GemmaSession, RefusesToOverflowTheContext) {
  Session s(*model_, kv::parse_method("q4"), 8);
  std::vector<int32_t> ids(9, 100);
  EXPECT_THROW(s.feed(ids, nullptr), Error);
  EXPECT_EQ(s.n_past(), 0);
}

}  // namespace
}  // namespace vq::engine
