// Writes text as it streams, holding back an incomplete UTF-8 sequence until its last byte
// arrives (a character can be split across byte-fallback tokens).
#pragma once

#include <cstdio>
#include <string>

namespace vq::cli {

class Utf8Stream {
 public:
  explicit Utf8Stream(std::FILE* f) : f_(f) {}
  void write(const std::string& s) {
    pending_ += s;
    size_t keep = 0;  // bytes of an unfinished sequence at the end
    for (size_t back = 1; back <= 4 && back <= pending_.size(); ++back) {
      const unsigned char c = static_cast<unsigned char>(pending_[pending_.size() - back]);
      if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
      const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
      if (need > back) keep = back;
      break;
    }
    std::fwrite(pending_.data(), 1, pending_.size() - keep, f_);
    std::fflush(f_);
    pending_.erase(0, pending_.size() - keep);
  }
  void flush() {
    std::fwrite(pending_.data(), 1, pending_.size(), f_);
    pending_.clear();
    std::fflush(f_);
  }

 private:
  std::FILE* f_;
  std::string pending_;
};

}  // namespace vq::cli
