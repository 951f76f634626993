// Tokenizer from a GGUF vocabulary, giving llama.cpp's ids. SentencePiece-style ("llama" model,
// used by Gemma and Llama 2): spaces become U+2581, the text is first split around special and
// user-defined tokens (Gemma's newline, space and tab runs are user-defined), then adjacent
// symbols are merged greedily by score, and characters outside the vocabulary fall back to
// <0xXX> byte tokens.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace vq::engine {

class GgufFile;

class Tokenizer {
 public:
  enum TokenType : int { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

  explicit Tokenizer(const GgufFile& f);

  // Text to ids. add_bos follows the file's tokenizer.ggml.add_bos_token when `add_special`.
  // parse_special: control tokens written in the text (e.g. "<start_of_turn>") become their ids.
  std::vector<int32_t> encode(const std::string& text, bool add_special = true,
                              bool parse_special = true) const;
  // The bytes of one token (control tokens give "" unless `special`).
  std::string piece(int32_t id, bool special = false) const;
  std::string decode(const std::vector<int32_t>& ids, bool special = false) const;

  int32_t n_vocab() const { return int32_t(tokens_.size()); }
  int32_t bos() const { return bos_; }
  int32_t eos() const { return eos_; }
  bool add_bos() const { return add_bos_; }
  // Id of a token text, or -1.
  int32_t find(const std::string& text) const;
  bool is_eog(int32_t id) const;  // end of generation (eos, or <end_of_turn> for Gemma)

 private:
  void encode_spm(const std::string& text, std::vector<int32_t>* out) const;

  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<int32_t> types_;
  std::unordered_map<std::string, int32_t> index_;
  std::vector<int32_t> special_;  // control/user-defined/unknown ids, longest text first
  int32_t byte_tokens_[256];
  int32_t bos_ = -1, eos_ = -1, unk_ = -1, eot_ = -1;
  bool add_bos_ = true, add_space_prefix_ = false;
};

}  // namespace vq::engine
