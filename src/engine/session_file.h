// Saved sessions (--save-cache / --load-cache): the compressed KV cache exactly as stored (codes,
// parameters, fp16 window and sinks, positions), the method spec, the identity of the model
// (file size and CRC-32), the logits of the last token fed and the sampler's state, so a run
// continued from the file produces exactly the tokens of an uninterrupted run. The file is a
// checked file (src/core/checked_file.h): versioned, checksummed, written via rename.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/engine/session.h"

namespace vq::engine {

struct SessionState {
  std::vector<float> last_logits;  // n_vocab floats: what the next token is sampled from
  uint64_t rng[4] = {0, 0, 0, 0};  // the sampler's generator
};

void save_session(const std::string& path, const Session& session, const SessionState& state);

class SessionFile {
 public:
  // Reads and verifies the frame (magic, version, size, checksum) and the header.
  static SessionFile read(const std::string& path);
  const std::string& method_spec() const { return spec_; }
  int64_t n_past() const { return n_past_; }
  // Restores into a fresh session of the same model and method; refuses a file made for
  // another model, another method, or a context size too small for it.
  SessionState restore(Session& session) const;

 private:
  std::string path_, spec_;
  uint64_t model_size_ = 0;
  uint32_t model_crc_ = 0;
  int64_t n_past_ = 0;
  std::vector<uint8_t> payload_;
  size_t body_at_ = 0;  // where the logits start in payload_
};

}  // namespace vq::engine
