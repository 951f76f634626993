// --save-cache / --load-cache as generate and chat use them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "src/engine/sampler.h"
#include "src/engine/session_file.h"

namespace vq::cli {

// The file named by --load-cache (if any), read and verified, and the method spec to build the
// session with: the file's, which a --kv given on the command line must equal.
struct SavedSession {
  std::optional<engine::SessionFile> file;
  std::string spec;
};
SavedSession open_saved_session(const std::string& load_path, const std::string& kv, bool kv_given);

// Restores a saved session into a fresh one: the cache, the last logits and the sampler state.
void restore_saved_session(const engine::SessionFile& file, engine::Session& session, engine::Sampler& sampler,
                           std::vector<float>* logits);

// Saves the session with the logits its next token is sampled from and the sampler state.
void save_current_session(const std::string& path, const engine::Session& session, engine::Sampler& sampler,
                          const std::vector<float>& logits);

}  // namespace vq::cli
