// Pre-tokenization for byte-level BPE: the regexes llama.cpp picks for a tokenizer.ggml.pre name,
// and the split of text into words by applying them one after another, as llama.cpp's
// unicode_regex_split does (each regex splits every piece the previous ones left; the text between
// matches is a piece too). PCRE2 (UTF + UCP, JIT) runs the regexes on the text itself.
//
// Where llama.cpp's own regex handling differs from PCRE2's, the text PCRE2 sees is adjusted
// instead of the regex (offsets are mapped back):
//   - llama.cpp decodes leniently (unicode_cpts_from_utf8): a byte that does not start a
//     complete sequence becomes U+FFFD, overlong forms are accepted, and words are re-encoded
//     from the codepoints. Codepoints PCRE2 cannot hold (surrogates) are matched as U+E000 (also
//     category C), values above U+10FFFF become U+FFFD.
//   - llama.cpp hands its regexes every non-ASCII whitespace character (Unicode White_Space) as
//     U+000B, so literal ranges such as DeepSeek's [ࠀ-一] do not match them; so does this. U+180E,
//     which PCRE2 counts as \s and llama.cpp does not, is matched as U+200B (category Cf too).
//   - $ is the end of the piece only (PCRE2_DOLLAR_ENDONLY), as in std::regex.
//   - Category tables: PCRE2 10.42's are Unicode 14.0, llama.cpp's unicode-data.cpp 15.1. The
//     letters, digits, marks, punctuation and symbols assigned in 15.0 and 15.1 (CJK extensions H
//     and I, Kawi, Nag Mundari, new emoji, ...) are matched as a character of the same category.
// ref: https://github.com/TheTom/llama-cpp-turboquant/blob/69d8e4be47243e83b3d0d71e932bc7aa61c644dc/src/unicode.cpp#L1083
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace vq::engine {

// What a tokenizer.ggml.pre name selects (llama.cpp's llama_vocab_pre_type and the flags its
// loader sets with it).
struct BpePreConfig {
  std::string type;                  // canonical name, e.g. "llama3" for "llama-bpe"
  std::vector<std::string> regexes;  // applied in order
  bool ignore_merges = false;        // a word that is a whole token is that token (Llama 3)
  bool add_bos = false;              // default of tokenizer.ggml.add_bos_token
  bool no_bos = false;               // the BOS id defaults to none (ChatGLM)
};

// The configuration for a tokenizer.ggml.pre value ("" when the key is absent: llama.cpp's
// 'default', with its warning about degraded quality). Throws vq::Error (kData) naming `pre` and
// `path` for a name llama.cpp rejects or one this project does not implement.
BpePreConfig bpe_pre_config(const std::string& pre, const std::string& path);

class PreTokenizer {
 public:
  // Compiles the regexes (PCRE2 with JIT). Throws vq::Error (kInternal) if one does not compile.
  explicit PreTokenizer(const std::vector<std::string>& regexes);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Splits `text` (any bytes). `*repaired` receives the text as llama.cpp re-encodes it (equal to
  // `text` when that is valid UTF-8), `*word_ends` the byte offset in `*repaired` where each word
  // ends (words are consecutive and cover it; none is empty). Thread-safe.
  void split(std::string_view text, std::string* repaired, std::vector<uint32_t>* word_ends) const;

 private:
  struct Regex;
  std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace vq::engine
