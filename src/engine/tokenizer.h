// Tokenizer from a GGUF vocabulary, giving llama.cpp's ids. Two models (tokenizer.ggml.model):
//   "llama": SentencePiece-style (Gemma, Llama 2): spaces become U+2581, the text is first split
//     around special and user-defined tokens (Gemma's newline, space and tab runs are
//     user-defined), then adjacent symbols are merged greedily by score, and characters outside
//     the vocabulary fall back to <0xXX> byte tokens.
//   "gpt2": byte-level BPE (Llama 3, Qwen 2, GPT-2, ...; tokenizer_bpe.h): the same special-token
//     split, then regex pre-tokenization chosen by tokenizer.ggml.pre (pre_tokenizer.h) and merges
//     by rank from tokenizer.ggml.merges.
// Token attributes, the end-of-generation set and the special-token split follow llama.cpp's
// llama_vocab::impl::load and tokenizer_st_partition, including the tokens it recognises by text
// (<|eot_id|>, <|im_end|>, <end_of_turn>, FIM tokens, ...) and the lstrip/rstrip attributes it sets
// for Phi-3 and Jina models.
// ref: https://github.com/TheTom/llama-cpp-turboquant/blob/69d8e4be47243e83b3d0d71e932bc7aa61c644dc/src/llama-vocab.cpp#L2903
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace vq::engine {

class GgufFile;
class BpeEncoder;

// std::hash of the text, usable with string_view look-ups. Same values as std::hash<std::string>,
// so a TokenIndex filled in id order iterates in the order llama.cpp's token_to_id does (which
// decides, as in llama.cpp, which of several look-alike tokens becomes the EOT or FIM token).
struct TokenTextHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using TokenIndex = std::unordered_map<std::string, int32_t, TokenTextHash, std::equal_to<>>;

class Tokenizer {
 public:
  enum TokenType : int { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };
  // llama.cpp's token attributes (llama_token_attr), a bit set derived from the type.
  enum TokenAttr : uint32_t {
    kAttrUnknown = 1u << 0,
    kAttrUnused = 1u << 1,
    kAttrNormal = 1u << 2,
    kAttrControl = 1u << 3,
    kAttrUserDefined = 1u << 4,
    kAttrByte = 1u << 5,
    kAttrLstrip = 1u << 7,  // a special token in text takes the whitespace before it
    kAttrRstrip = 1u << 8,  // ... and after it
  };

  // Throws vq::Error (kData) for a model type other than "llama" and "gpt2", an unknown or
  // unimplemented tokenizer.ggml.pre, or inconsistent vocabulary arrays.
  explicit Tokenizer(const GgufFile& f);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Text to ids. With `add_special`, BOS and EOS are added as the file's
  // tokenizer.ggml.add_bos_token / add_eos_token say (defaults: SPM adds BOS; BPE adds it for
  // Llama 3-style pre-tokenizers only).
  // parse_special: control tokens written in the text (e.g. "<start_of_turn>") become their ids;
  // user-defined tokens always do.
  std::vector<int32_t> encode(const std::string& text, bool add_special = true,
                              bool parse_special = true) const;
  // The bytes of one token, as llama.cpp's token_to_piece: control and unknown tokens give "" unless
  // `special`; unused and undefined ones give "". SPM: U+2581 back to spaces, <0xXX> to its byte.
  // BPE: the token's characters mapped back to bytes, so a multi-byte UTF-8 character may span
  // tokens (see detokenizer.h).
  std::string piece(int32_t id, bool special = false) const;
  // The pieces concatenated (no clean-up of spaces: llama.cpp's detokenize with clean_spaces off).
  std::string decode(const std::vector<int32_t>& ids, bool special = false) const;

  int32_t n_vocab() const { return int32_t(tokens_.size()); }
  bool is_bpe() const { return bpe_ != nullptr; }
  int32_t bos() const { return bos_; }
  int32_t eos() const { return eos_; }
  int32_t eot() const { return eot_; }  // -1 if none
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  uint32_t attr(int32_t id) const { return attrs_[size_t(id)]; }
  // Id of a token text, or -1.
  int32_t find(const std::string& text) const;
  // End of generation: EOS, EOT, EOM, the FIM pad/repo/separator tokens, and every token llama.cpp
  // recognises by its text (<|eot_id|>, <|im_end|>, <|end|>, <end_of_turn>, <|endoftext|>, ...).
  bool is_eog(int32_t id) const;
  const std::vector<int32_t>& eog_ids() const { return eog_; }  // sorted

 private:
  struct Fragment {
    int32_t token;  // -1: raw text at [off, off + len)
    size_t off, len;
  };
  std::vector<Fragment> partition(std::string_view text, bool parse_special) const;
  void encode_spm(const std::string& text, std::vector<int32_t>* out) const;
  void find_special_tokens(const GgufFile& f);

  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<uint32_t> attrs_;
  TokenIndex index_;
  std::vector<int32_t> special_;  // control/user-defined/unknown ids, longest text first
  std::vector<int32_t> eog_;
  int32_t byte_tokens_[256];
  int32_t bos_ = -1, eos_ = -1, unk_ = -1, eot_ = -1, eom_ = -1;
  int32_t fim_pre_ = -1, fim_suf_ = -1, fim_mid_ = -1, fim_pad_ = -1, fim_rep_ = -1, fim_sep_ = -1;
  bool add_bos_ = true, add_eos_ = false, add_space_prefix_ = false;
  std::unique_ptr<BpeEncoder> bpe_;  // set for "gpt2"
  std::vector<std::string> pieces_;   // each token's bytes, as piece(id, true)
};

}  // namespace vq::engine
