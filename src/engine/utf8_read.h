// llama.cpp's lenient reading of UTF-8, shared by the BPE pre-tokenizer and merger so that both
// see the code points llama.cpp sees.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vq::engine {

// llama.cpp's lenient UTF-8 read (unicode_cpt_from_utf8 inside unicode_cpts_from_utf8): lead and
// continuation bits are checked, overlong forms and surrogates are not; a byte that does not start
// such a sequence is U+FFFD and consumes one byte. *len receives the bytes consumed.
inline uint32_t read_cpt(const unsigned char* s, size_t n, size_t* len) {
  const unsigned c = s[0];
  const auto cont = [&](size_t i) { return i < n && (s[i] & 0xC0) == 0x80; };
  *len = 1;
  if (c < 0x80) return c;
  if (!(c & 0x40)) return 0xFFFD;
  if (!(c & 0x20)) {
    if (!cont(1)) return 0xFFFD;
    *len = 2;
    return ((c & 0x1F) << 6) | (s[1] & 0x3F);
  }
  if (!(c & 0x10)) {
    if (!cont(1) || !cont(2)) return 0xFFFD;
    *len = 3;
    return ((c & 0x0F) << 12) | ((s[1] & 0x3F) << 6) | (s[2] & 0x3F);
  }
  if (!(c & 0x08)) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0xFFFD;
    *len = 4;
    return ((c & 0x07) << 18) | ((s[1] & 0x3F) << 12) | ((s[2] & 0x3F) << 6) | (s[3] & 0x3F);
  }
  return 0xFFFD;
}

}  // namespace vq::engine
