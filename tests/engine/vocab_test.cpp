// Token ids equal llama.cpp's for every vocabulary in tests/data/vocab/ (llama.cpp's own
// ggml-vocab-*.gguf files with its .inp/.out test strings, run as its tests/test-tokenizer-0.cpp
// does: add_special = false, parse_special = false), and on the whole WikiText test file
// (wikitext_ids.txt: id count and FNV-1a hash of llama-tokenize's output). A tiny synthetic BPE
// vocabulary pins special-token handling (parse_special, lstrip/rstrip, BOS/EOS, end of
// generation, ignore_merges) to what llama.cpp does with the same file.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "src/engine/gguf.h"
#include "src/engine/pre_tokenizer.h"
#include "src/engine/tokenizer.h"
#include "src/engine/tokenizer_bpe.h"
#include "tests/engine/gguf_writer.h"
#include "tests/engine/vocab_files.h"
#include "veloxquant/error.h"

namespace vq::engine {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool exists(const std::string& path) { return std::ifstream(path).good(); }

std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) out += (c >= 0x20 && c < 0x7F) ? std::string(1, char(c)) : fmt::format("\\x{:02x}", c);
  return out;
}

// Vocab files that have llama.cpp's .inp/.out beside them.
std::vector<std::string> vocabs_with_tests() {
  std::vector<std::string> out;
  for (const std::string& p : testing::vocab_files()) {
    const std::string base = testing::vocab_dir() + "/" + testing::vocab_name(p);
    if (exists(base + ".inp") && exists(base + ".out")) out.push_back(p);
  }
  return out;
}

std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = testing::vocab_name(info.param);
  if (n.rfind("ggml-vocab-", 0) == 0) n = n.substr(11);
  if (n.size() > 5) n.resize(n.size() - 5);  // .gguf
  for (char& c : n) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return n;
}

class Vocab : public ::testing::TestWithParam<std::string> {};

// test-tokenizer-0's reading: inputs separated by "\n__ggml_vocab_test__\n", one line of ids per
// input, kept in a map by input text.
TEST_P(Vocab, MatchesLlamaCppTestStrings) {
  const std::string base = testing::vocab_dir() + "/" + testing::vocab_name(GetParam());
  const std::string raw = slurp(base + ".inp");
  std::vector<std::string> inputs;
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (size_t pos = 0; pos < raw.size();) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(raw.substr(pos));
      break;
    }
    inputs.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<std::string> lines;
  std::istringstream out_file(slurp(base + ".out"));
  for (std::string line; std::getline(out_file, line);) lines.push_back(line);
  ASSERT_EQ(inputs.size(), lines.size()) << base;
  std::map<std::string, std::vector<int32_t>> cases;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<int32_t> ids;
    std::istringstream in(lines[i]);
    for (int32_t id; in >> id;) ids.push_back(id);
    cases[inputs[i]] = ids;
  }
  ASSERT_GE(cases.size(), 40u);

  const auto file = testing::open_vocab(GetParam());
  const Tokenizer tok(*file);
  for (const auto& [text, want] : cases) {
    const std::vector<int32_t> got = tok.encode(text, false, false);
    EXPECT_EQ(got, want) << "text: '" << printable(text) << "'";
    if (tok.is_bpe()) {
      EXPECT_EQ(tok.decode(got), text) << "text: '" << printable(text) << "'";
    }
  }
}

TEST_P(Vocab, WholeWikitextMatchesLlamaCpp) {
  const std::string name = testing::vocab_name(GetParam());
  std::istringstream golden(slurp(testing::vocab_dir() + "/wikitext_ids.txt"));
  std::string file_name, crc_hex, hash_hex;
  size_t count = 0;
  bool found = false;
  while (golden >> file_name >> crc_hex >> count >> hash_hex) {
    if (file_name == name) {
      found = true;
      break;
    }
  }
  ASSERT_TRUE(found) << "no WikiText golden for " << name;
  const std::string text = slurp(testing::source_dir() + "/data/wikitext-2-raw-test.txt");
  ASSERT_FALSE(text.empty()) << "data/wikitext-2-raw-test.txt missing";
  const auto file = testing::open_vocab(GetParam());
  ASSERT_EQ(fmt::format("{:08x}", file->content_crc32()), crc_hex) << name << " is not the file the golden was made from";
  const Tokenizer tok(*file);
  const std::vector<int32_t> ids = tok.encode(text, false, false);
  uint64_t h = 14695981039346656037ull;  // FNV-1a over the ids
  for (int32_t id : ids) {
    h ^= uint32_t(id);
    h *= 1099511628211ull;
  }
  EXPECT_EQ(ids.size(), count);
  EXPECT_EQ(fmt::format("{:016x}", h), hash_hex);
  if (tok.is_bpe()) {
    EXPECT_EQ(tok.decode(ids), text);
  }
}

INSTANTIATE_TEST_SUITE_P(LlamaCpp, Vocab, ::testing::ValuesIn(vocabs_with_tests()), test_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Vocab);

TEST(VocabFiles, AllLlamaCppBpeAndSpmVocabsArePresent) {
  const auto files = vocabs_with_tests();
  std::vector<std::string> names;
  for (const auto& f : files) names.push_back(testing::vocab_name(f));
  for (const char* n : {"ggml-vocab-gpt-2.gguf", "ggml-vocab-falcon.gguf", "ggml-vocab-deepseek-coder.gguf",
                        "ggml-vocab-deepseek-llm.gguf", "ggml-vocab-starcoder.gguf", "ggml-vocab-refact.gguf",
                        "ggml-vocab-mpt.gguf", "ggml-vocab-llama-spm.gguf", "ggml-vocab-phi-3.gguf"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  }
}

// ids 0-255: the byte characters (id = byte); 256 "ab", 257 "abc", 258 "Ġa" (merges a+b, ab+c,
// Ġ+a), 259 <|endoftext|> (control, BOS and EOS), 260 <|im_end|> (control), 261 <mask> (control),
// 262 <tool> (user-defined), 263 <|fim_pad|> (normal type: llama.cpp makes it control and an end
// of generation), 264 "ac" (a token no merge makes), 265 <s>, 266 </s> (control), 267 <unk>
// (unknown). The expectations below are llama.cpp's (llama_tokenize on the same file).
std::unique_ptr<GgufFile> tiny_bpe(const std::string& name, const std::string& pre, int add_bos = -1,
                                   int add_eos = -1) {
  testing::GgufWriter w;
  w.kv_str("general.architecture", "gpt2");
  w.kv_str("general.name", name);
  w.kv_u32("gpt2.block_count", 1);
  w.kv_u32("gpt2.context_length", 64);
  w.kv_u32("gpt2.embedding_length", 8);
  w.kv_u32("gpt2.feed_forward_length", 16);
  w.kv_u32("gpt2.attention.head_count", 1);
  w.kv_f32("gpt2.attention.layer_norm_epsilon", 1e-5f);
  w.kv_str("tokenizer.ggml.model", "gpt2");
  if (!pre.empty()) w.kv_str("tokenizer.ggml.pre", pre);
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(BpeEncoder::byte_char(uint8_t(b)));
  const std::string sp = BpeEncoder::byte_char(' ');
  for (const char* t : {"ab", "abc"}) tokens.push_back(t);
  tokens.push_back(sp + "a");
  for (const char* t : {"<|endoftext|>", "<|im_end|>", "<mask>", "<tool>", "<|fim_pad|>", "ac", "<s>", "</s>", "<unk>"}) {
    tokens.push_back(t);
  }
  std::vector<int32_t> types(tokens.size(), Tokenizer::kNormal);
  types[259] = types[260] = types[261] = types[265] = types[266] = Tokenizer::kControl;
  types[262] = Tokenizer::kUserDefined;
  types[267] = Tokenizer::kUnknown;
  w.kv_str_array("tokenizer.ggml.tokens", tokens);
  w.kv_i32_array("tokenizer.ggml.token_type", types);
  w.kv_str_array("tokenizer.ggml.merges", {"a b", "ab c", sp + " a"});
  w.kv_u32("tokenizer.ggml.bos_token_id", 259);
  w.kv_u32("tokenizer.ggml.eos_token_id", 259);
  if (add_bos >= 0) w.kv_bool("tokenizer.ggml.add_bos_token", add_bos != 0);
  if (add_eos >= 0) w.kv_bool("tokenizer.ggml.add_eos_token", add_eos != 0);
  return GgufFile::from_memory(w.bytes(), "tiny-" + name + "-" + pre);
}

using Ids = std::vector<int32_t>;

TEST(TinyBpe, MergesAndSpecialTokens) {
  const auto f = tiny_bpe("tiny", "gpt-2");
  const Tokenizer tok(*f);
  EXPECT_TRUE(tok.is_bpe());
  EXPECT_FALSE(tok.add_bos());
  EXPECT_EQ(tok.encode("abc ac a"), (Ids{257, 258, 99, 258}));
  EXPECT_EQ(tok.encode("ac"), (Ids{97, 99}));  // no merge makes "ac"
  // Control tokens only with parse_special; user-defined ones always.
  const std::string s = "x<|im_end|>y <tool> <|fim_pad|>";
  EXPECT_EQ(tok.encode(s, false, false),
            (Ids{120, 60, 124, 105, 109, 95, 101, 110, 100, 124, 62, 121, 32, 262, 32, 60, 124, 102, 105, 109, 95,
                 112, 97, 100, 124, 62}));
  EXPECT_EQ(tok.encode(s, false, true), (Ids{120, 260, 121, 32, 262, 32, 263}));
  EXPECT_EQ(tok.encode(" <unk> ", false, true), (Ids{32, 267, 32}));
  // Invalid UTF-8 and a multi-byte character falling back to its bytes.
  EXPECT_EQ(tok.encode("ab\xe2\x82\xac" "c"), (Ids{256, 226, 130, 172, 99}));
  // End of generation: EOS, and the tokens llama.cpp recognises by text.
  EXPECT_EQ(tok.eog_ids(), (Ids{259, 260, 263, 266}));
  EXPECT_TRUE(tok.is_eog(260));
  EXPECT_FALSE(tok.is_eog(262));
  EXPECT_EQ(tok.attr(263), uint32_t(Tokenizer::kAttrNormal | Tokenizer::kAttrControl));
  // Pieces: bytes for normal tokens, "" for control ones unless asked.
  EXPECT_EQ(tok.piece(258), " a");
  EXPECT_EQ(tok.piece(0xE2), "\xe2");
  EXPECT_EQ(tok.piece(260), "");
  EXPECT_EQ(tok.piece(260, true), "<|im_end|>");
  EXPECT_EQ(tok.piece(262), "<tool>");
}

TEST(TinyBpe, LstripAndRstripAsLlamaCppSetsThem) {
  // Jina v2 pre-tokenizers: <mask> takes the whitespace before it.
  const auto jina = tiny_bpe("tiny", "jina-v2-code");
  EXPECT_EQ(Tokenizer(*jina).encode("x  <mask>  y", false, true), (Ids{120, 261, 32, 32, 121}));
  const auto plain = tiny_bpe("tiny", "gpt-2");
  EXPECT_EQ(Tokenizer(*plain).encode("x  <mask>  y", false, true), (Ids{120, 32, 32, 261, 32, 32, 121}));
  // Phi-3 (by general.name): every special token but <unk>, <s>, <|endoftext|> takes the
  // whitespace after it.
  const auto phi = tiny_bpe("Phi-3 tiny", "gpt-2");
  EXPECT_EQ(Tokenizer(*phi).encode("a<|im_end|>  b <tool>\n c </s>\t\tz <s> q", false, true),
            (Ids{97, 260, 98, 32, 262, 99, 32, 266, 122, 32, 265, 32, 113}));
}

TEST(TinyBpe, BosEosAndIgnoreMerges) {
  const auto both = tiny_bpe("tiny", "gpt-2", 1, 1);
  const Tokenizer t(*both);
  EXPECT_EQ(t.encode("abc ac a"), (Ids{259, 257, 258, 99, 258, 259}));
  EXPECT_EQ(t.encode("abc ac a", false), (Ids{257, 258, 99, 258}));
  // Llama 3 ("llama-bpe"): BOS by default, and a word that is a token is that token.
  const auto l3 = tiny_bpe("tiny", "llama-bpe");
  const Tokenizer t3(*l3);
  EXPECT_TRUE(t3.add_bos());
  EXPECT_EQ(t3.encode("ac"), (Ids{259, 264}));
  EXPECT_EQ(t3.encode("x ac", false), (Ids{120, 258, 99}));
}

TEST(TinyBpe, ErrorsNameTheModelAndThePreTokenizer) {
  const auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const auto bad_model = [] {
    testing::GgufWriter w;
    w.kv_str("tokenizer.ggml.model", "bert");
    w.kv_str_array("tokenizer.ggml.tokens", {"a"});
    const auto f = GgufFile::from_memory(w.bytes(), "bert.gguf");
    Tokenizer t(*f);
  };
  const std::string m = message(bad_model);
  EXPECT_NE(m.find("'bert'"), std::string::npos) << m;
  EXPECT_NE(m.find("'gpt2'"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  const std::string p = message([] { Tokenizer t(*tiny_bpe("tiny", "no-such-pre")); });
  EXPECT_NE(p.find("unknown tokenizer.ggml.pre 'no-such-pre'"), std::string::npos) << p;
  const std::string k = message([] { Tokenizer t(*tiny_bpe("tiny", "kimi-k2")); });
  EXPECT_NE(k.find("'kimi-k2' is not supported"), std::string::npos) << k;
  // No pre name: llama.cpp's "default" pre-tokenizer.
  EXPECT_EQ(Tokenizer(*tiny_bpe("tiny", "")).encode("abc ac a"), (Ids{257, 258, 99, 258}));
}

TEST(PreTokenizer, AliasesSelectLlamaCppTypes) {
  EXPECT_EQ(bpe_pre_config("llama-bpe", "f").type, "llama3");
  EXPECT_TRUE(bpe_pre_config("llama3", "f").ignore_merges);
  EXPECT_EQ(bpe_pre_config("smaug-bpe", "f").type, "smaug");
  EXPECT_FALSE(bpe_pre_config("smaug-bpe", "f").ignore_merges);
  EXPECT_EQ(bpe_pre_config("deepseek-r1-qwen", "f").type, "qwen2");
  EXPECT_EQ(bpe_pre_config("refact", "f").type, "starcoder");
  EXPECT_EQ(bpe_pre_config("mpt", "f").type, "gpt2");
  EXPECT_EQ(bpe_pre_config("", "f").type, "default");
  EXPECT_TRUE(bpe_pre_config("chatglm-bpe", "f").no_bos);
  EXPECT_THROW(bpe_pre_config("deepseek-v3", "f"), Error);
}

std::vector<std::string> split(const PreTokenizer& pt, std::string_view text, std::string* repaired) {
  std::vector<uint32_t> ends;
  pt.split(text, repaired, &ends);
  std::vector<std::string> words;
  uint32_t start = 0;
  for (uint32_t e : ends) {
    words.push_back(repaired->substr(start, e - start));
    start = e;
  }
  return words;
}

TEST(PreTokenizer, SplitsAsLlamaCpp) {
  std::string repaired;
  const PreTokenizer gpt2(bpe_pre_config("gpt-2", "f").regexes);
  EXPECT_EQ(split(gpt2, "Hello world's  end  ", &repaired),
            (std::vector<std::string>{"Hello", " world", "'s", " ", " end", "  "}));
  // Invalid bytes become U+FFFD; an overlong NUL is re-encoded as NUL.
  EXPECT_EQ(split(gpt2, "a\xff" "b\xc0\x80", &repaired), (std::vector<std::string>{"a", "\xef\xbf\xbd", "b", std::string(1, '\0')}));
  EXPECT_EQ(repaired, "a\xef\xbf\xbd" "b" + std::string(1, '\0'));
  // Non-ASCII whitespace is whitespace, and DeepSeek's literal range U+0800-U+4E00 does not take
  // it (U+2029 PARAGRAPH SEPARATOR stays with the gap it is in).
  const PreTokenizer ds(bpe_pre_config("deepseek-llm", "f").regexes);
  EXPECT_EQ(split(ds, "s\u2029 \x1f\ud55c", &repaired), (std::vector<std::string>{"s", "\u2029 \x1f", "\ud55c"}));
  // U+180E is not whitespace for llama.cpp (PCRE2 says it is).
  const PreTokenizer l3(bpe_pre_config("llama-bpe", "f").regexes);
  EXPECT_EQ(split(l3, "a \u180e b", &repaired), (std::vector<std::string>{"a", " \u180e", " b"}));
  EXPECT_EQ(split(l3, "a \u00a0 b", &repaired), (std::vector<std::string>{"a", " \u00a0", " b"}));
}

}  // namespace
}  // namespace vq::engine
