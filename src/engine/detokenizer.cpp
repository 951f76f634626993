// Streaming detokenization (see detokenizer.h).
#include "src/engine/detokenizer.h"

#include "src/engine/tokenizer.h"

namespace vq::engine {

size_t utf8_incomplete_tail(std::string_view s) {
  for (size_t back = 1; back <= 4 && back <= s.size(); ++back) {
    const unsigned char c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    const size_t need = c >= 0xF8 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;  // four continuation bytes: no character can complete them
}

std::string Detokenizer::push(int32_t id) {
  pending_ += tok_.piece(id, special_);
  const size_t keep = utf8_incomplete_tail(pending_);
  std::string out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string Detokenizer::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace vq::engine
