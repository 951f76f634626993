// Streaming detokenization: token ids in one by one, text out that never splits a UTF-8
// character. A byte-level BPE token (or an SPM <0xXX> byte token) can end in the middle of a
// multi-byte character; the bytes of an unfinished character are held back until the rest
// arrives, and handed out by flush() at the end of generation if it never does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace vq::engine {

class Tokenizer;

// Bytes at the end of `s` that begin a UTF-8 sequence still missing continuation bytes (0 when
// the text ends on a complete character, or on bytes that cannot become one).
size_t utf8_incomplete_tail(std::string_view s);

class Detokenizer {
 public:
  // `special`: control tokens give their text (as Tokenizer::piece).
  explicit Detokenizer(const Tokenizer& tok, bool special = false) : tok_(tok), special_(special) {}

  // Adds the piece of `id`; returns the text now complete (possibly empty).
  std::string push(int32_t id);
  // Returns the bytes held back, if any, and empties the buffer.
  std::string flush();
  size_t pending() const { return pending_.size(); }

 private:
  const Tokenizer& tok_;
  bool special_;
  std::string pending_;
};

}  // namespace vq::engine
