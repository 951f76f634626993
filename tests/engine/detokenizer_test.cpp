// Streaming detokenization never hands out part of a UTF-8 character: byte-level BPE tokens (GPT-2's
// vocabulary from tests/data/vocab/) that split a multi-byte character are held back until it is
// complete, and the stream's text equals the whole decode.
#include "src/engine/detokenizer.h"

#include <gtest/gtest.h>

#include "src/engine/tokenizer.h"
#include "src/engine/tokenizer_bpe.h"
#include "tests/engine/vocab_files.h"

namespace vq::engine {
namespace {

// True if `s` is a sequence of complete UTF-8 characters.
bool complete_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

TEST(Utf8IncompleteTail, CountsOnlyAnUnfinishedCharacter) {
  EXPECT_EQ(utf8_incomplete_tail(""), 0u);
  EXPECT_EQ(utf8_incomplete_tail("abc"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("a\xe2"), 1u);
  EXPECT_EQ(utf8_incomplete_tail("a\xe2\x82"), 2u);
  EXPECT_EQ(utf8_incomplete_tail("a\xe2\x82\xac"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("\xf0\x9f\xa6"), 3u);
  EXPECT_EQ(utf8_incomplete_tail("\xf0\x9f\xa6\x99"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("a\x80\x80\x80\x80"), 0u);  // stray continuation bytes: nothing to wait for
  EXPECT_EQ(utf8_incomplete_tail("a\xff"), 0u);              // not a lead byte
}

class GptDetokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    file_ = testing::open_vocab(testing::vocab_dir() + "/ggml-vocab-gpt-2.gguf.gz").release();
    tok_ = new Tokenizer(*file_);
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete file_;
  }
  static GgufFile* file_;
  static Tokenizer* tok_;
};
GgufFile* GptDetokenizer::file_ = nullptr;
Tokenizer* GptDetokenizer::tok_ = nullptr;

TEST_F(GptDetokenizer, ByteTokensOfOneCharacterComeOutTogether) {
  // "€" (E2 82 AC) as three single-byte tokens.
  std::vector<int32_t> ids;
  for (uint8_t b : {0xE2, 0x82, 0xAC}) ids.push_back(tok_->find(BpeEncoder::byte_char(b)));
  ids.push_back(tok_->find("x"));
  Detokenizer d(*tok_);
  EXPECT_EQ(d.push(ids[0]), "");
  EXPECT_EQ(d.push(ids[1]), "");
  EXPECT_EQ(d.pending(), 2u);
  EXPECT_EQ(d.push(ids[2]), "\xe2\x82\xac");
  EXPECT_EQ(d.push(ids[3]), "x");
  EXPECT_EQ(d.flush(), "");
}

TEST_F(GptDetokenizer, StreamNeverSplitsACharacter) {
  const std::string text = "Llamas 🦙 and 日本語, naïve café — ½ € 👨‍👩‍👧 done";
  const std::vector<int32_t> ids = tok_->encode(text, false, false);
  // GPT-2 has no token for most of these characters: some tokens must end mid-character.
  size_t split_pieces = 0;
  for (int32_t id : ids) split_pieces += complete_utf8(tok_->piece(id)) ? 0 : 1;
  ASSERT_GT(split_pieces, 0u);
  Detokenizer d(*tok_);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string out = d.push(id);
    EXPECT_TRUE(complete_utf8(out)) << "token " << id;
    streamed += out;
  }
  streamed += d.flush();
  EXPECT_EQ(streamed, text);
  EXPECT_EQ(tok_->decode(ids), text);
}

TEST_F(GptDetokenizer, FlushGivesBackAnUnfinishedCharacter) {
  Detokenizer d(*tok_);
  EXPECT_EQ(d.push(tok_->find(BpeEncoder::byte_char(0xF0))), "");
  EXPECT_EQ(d.flush(), "\xf0");
  EXPECT_EQ(d.pending(), 0u);
  // Control tokens give nothing unless `special`.
  const int32_t eot = tok_->find("<|endoftext|>");
  EXPECT_EQ(Detokenizer(*tok_).push(eot), "");
  EXPECT_EQ(Detokenizer(*tok_, true).push(eot), "<|endoftext|>");
}

}  // namespace
}  // namespace vq::engine
