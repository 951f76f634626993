// Byte-level BPE (tokenizer.ggml.model "gpt2"), following llama.cpp's llm_tokenizer_bpe so that ids
// match: the text is split into words by the pre-tokenizer regexes, each word's bytes are mapped to
// GPT-2's printable characters (byte b is U+00b for the 188 printable Latin-1 bytes, U+0100 + k for
// the k-th other byte), then adjacent symbols (UTF-8 characters at first) are merged by the lowest
// rank in tokenizer.ggml.merges (leftmost first on ties). A final symbol that is not a token falls
// back to the tokens of its single bytes (skipped where there is none, as llama.cpp does).
// ref: https://github.com/TheTom/llama-cpp-turboquant/blob/69d8e4be47243e83b3d0d71e932bc7aa61c644dc/src/llama-vocab.cpp#L522
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "src/engine/pre_tokenizer.h"
#include "src/engine/tokenizer.h"

namespace vq::engine {

class BpeEncoder {
 public:
  // Ids of words already encoded, for one encode() call (or one thread): text repeats words, and
  // a word's ids never depend on its neighbours.
  struct Cache {
    std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, TokenTextHash, std::equal_to<>> where;
    std::vector<int32_t> ids;  // where[word] = {offset, count} into ids
    std::string scratch;
  };

  // `merges`: tokenizer.ggml.merges, "left right" per rank (split at the first space after the
  // first byte, as llama.cpp does; a repeated pair keeps its first rank).
  BpeEncoder(const std::vector<std::string>& merges, const BpePreConfig& pre);

  // Appends the ids of one fragment of raw text (special tokens already split off).
  void encode(std::string_view text, const TokenIndex& vocab, std::vector<int32_t>* out, Cache* cache) const;

  // GPT-2's character for byte b (UTF-8).
  static const std::string& byte_char(uint8_t b);
  // The bytes a normal token's text stands for (llama.cpp's llama_decode_text): each character
  // back to its byte; a character outside the byte alphabet gives "[UNK_BYTE_0x<hex>" + text + "]".
  static std::string decode_text(std::string_view token_text);

 private:
  void encode_word(std::string_view word, const TokenIndex& vocab, std::vector<int32_t>* out) const;
  int32_t part(std::string_view s) const;

  PreTokenizer pre_;
  bool ignore_merges_;
  // Every string that is one side of a merge gets a number; a rank is looked up by the pair.
  std::unordered_map<std::string, int32_t, TokenTextHash, std::equal_to<>> parts_;
  std::unordered_map<uint64_t, int32_t> ranks_;
  std::vector<int32_t> merged_;  // by rank: the number of left+right as a part, or -1
};

}  // namespace vq::engine
