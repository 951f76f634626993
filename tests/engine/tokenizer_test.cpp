// Token ids from the Gemma 3 vocabulary equal llama.cpp's on every golden string
// (tests/golden/tokens.json, produced by llama-tokenize; see tests/golden/COMMANDS.md), and
// decoding gives the text back.
#include "src/engine/tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "src/engine/gguf.h"
#include "tests/engine/model_path.h"

namespace vq::engine {
namespace {

class GemmaTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    file_ = GgufFile::open(testing::model_path()).release();
    tok_ = new Tokenizer(*file_);
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete file_;
  }
  static GgufFile* file_;
  static Tokenizer* tok_;
};
GgufFile* GemmaTokenizer::file_ = nullptr;
Tokenizer* GemmaTokenizer::tok_ = nullptr;

TEST_F(GemmaTokenizer, MatchesLlamaCppOnGoldenStrings) {
  std::ifstream in(testing::golden("tokens.json"));
  ASSERT_TRUE(in) << "missing golden file";
  const auto cases = nlohmann::json::parse(in);
  ASSERT_GE(cases.size(), 20u);
  for (const auto& c : cases) {
    const std::string text = c["text"];
    const std::vector<int32_t> want = c["ids"];
    EXPECT_EQ(tok_->encode(text, c.value("add_bos", true)), want) << "text: " << text;
  }
}

TEST_F(GemmaTokenizer, DecodeRoundTrips) {
  for (const char* s : {"Hello, world!", "a\n\nb   c\td", "Ångström 日本語 🦙", "line1\r\nline2"}) {
    const auto ids = tok_->encode(s, false);
    EXPECT_EQ(tok_->decode(ids), s);
  }
}

TEST_F(GemmaTokenizer, SpecialTokens) {
  EXPECT_EQ(tok_->bos(), 2);
  EXPECT_TRUE(tok_->is_eog(tok_->find("<end_of_turn>")));
  EXPECT_TRUE(tok_->is_eog(tok_->eos()));
  // Without parse_special the control token's text is ordinary text.
  EXPECT_NE(tok_->encode("<start_of_turn>", false, false).size(), 1u);
  EXPECT_EQ(tok_->encode("<start_of_turn>", false, true).size(), 1u);
}

}  // namespace
}  // namespace vq::engine

namespace vq::engine {
namespace {

// The whole WikiText test file tokenizes to llama.cpp's 292,282 ids
// (tests/golden/wikitext_test_ids.json, from llama-tokenize).
TEST_F(GemmaTokenizer, WholeWikitextFileMatchesLlamaCpp) {
  std::ifstream ids_in(testing::golden("wikitext_test_ids.json"));
  ASSERT_TRUE(ids_in);
  const auto j = nlohmann::json::parse(ids_in);
  const std::vector<int32_t> want = j.is_object() ? j["ids"].get<std::vector<int32_t>>() : j.get<std::vector<int32_t>>();
  std::ifstream text_in(testing::source_dir() + "/data/wikitext-2-raw-test.txt", std::ios::binary);
  ASSERT_TRUE(text_in) << "data/wikitext-2-raw-test.txt missing";
  const std::string text((std::istreambuf_iterator<char>(text_in)), std::istreambuf_iterator<char>());
  const auto got = tok_->encode(text);
  ASSERT_EQ(got.size(), want.size());
  size_t first_diff = 0;
  while (first_diff < got.size() && got[first_diff] == want[first_diff]) ++first_diff;
  EXPECT_EQ(first_diff, got.size()) << "first difference at token " << first_diff;
}

}  // namespace
}  // namespace vq::engine
