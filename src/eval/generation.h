// The token-by-token generation loop that `generate` and `chat` share: sample from the current
// logits, stop at an end-of-generation token, hand each token's text to the caller, feed the
// token back into the session.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "src/engine/sampler.h"
#include "src/engine/session.h"
#include "src/engine/tokenizer.h"

namespace vq::eval {

struct GenerationLimits {
  int n_predict = 0;    // most tokens sampled
  int64_t n_ctx = 0;    // no token is sampled once the session holds this many positions
  bool feed_last = true;  // feed the n_predict-th token too (false: its logits are not needed)
  std::vector<int32_t> banned;  // tokens whose logits are set to -inf before each sample
};

struct Generated {
  std::vector<int32_t> ids;  // every sampled token, the end-of-generation one included
  bool last_fed = false;     // whether the last sampled token is in the session
};

// Every end-of-generation token of the vocabulary (to ban them, as llama.cpp's --ignore-eos).
std::vector<int32_t> eog_tokens(const engine::Tokenizer& tok);

// Samples from *logits (the session's last logits, n_vocab of them), and after each token that is
// not end-of-generation calls on_piece with its text and (within the limits) feeds it, leaving its
// logits in *logits.
Generated generate_tokens(engine::Session& session, engine::Sampler& sampler, const engine::Tokenizer& tok,
                          int64_t n_vocab, std::vector<float>* logits, const GenerationLimits& limits,
                          const std::function<void(const std::string&)>& on_piece);

}  // namespace vq::eval
