// The text a client is sent as tokens are generated: whole UTF-8 characters only, cut before the
// first stop sequence, and text that could be the start of a stop sequence held back until the
// next pieces show it is not.
#pragma once

#include <string>
#include <vector>

namespace vq::serve {

class TextStream {
 public:
  explicit TextStream(std::vector<std::string> stop);
  // Adds a generated piece and returns the text that is now safe to send (maybe empty). Once a
  // stop sequence has been met, stopped() is true and nothing more is returned.
  std::string push(const std::string& piece);
  // The text still held back at the end of generation (a partial stop sequence, or an incomplete
  // UTF-8 character the end of generation cut).
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stop_;
  std::string pending_;
  bool stopped_ = false;
};

// Bytes at the end of s that begin a UTF-8 character not yet complete (0 to 3).
size_t incomplete_utf8_tail(const std::string& s);

}  // namespace vq::serve
