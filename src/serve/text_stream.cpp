#include "src/serve/text_stream.h"

#include <algorithm>

namespace vq::serve {

size_t incomplete_utf8_tail(const std::string& s) {
  // Look back over at most 3 continuation bytes for the lead byte of the last character.
  const size_t n = s.size();
  for (size_t back = 1; back <= std::min<size_t>(4, n); ++back) {
    const unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;  // only continuation bytes (invalid UTF-8): nothing to wait for
}

TextStream::TextStream(std::vector<std::string> stop) : stop_(std::move(stop)) {}

std::string TextStream::push(const std::string& piece) {
  if (stopped_) return {};
  pending_ += piece;
  size_t first = std::string::npos;
  for (const std::string& s : stop_) first = std::min(first, pending_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, first);
    pending_.clear();
    return out;
  }
  // Hold back the longest tail that is a proper prefix of a stop sequence, and an unfinished
  // character.
  size_t hold = incomplete_utf8_tail(pending_);
  for (const std::string& s : stop_) {
    for (size_t k = std::min(s.size() - 1, pending_.size()); k > hold; --k) {
      if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string TextStream::finish() {
  std::string out;
  out.swap(pending_);
  return stopped_ ? std::string() : out;
}

}  // namespace vq::serve
