#include "src/eval/generation.h"

#include <limits>

namespace vq::eval {

std::vector<int32_t> eog_tokens(const engine::Tokenizer& tok) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    if (tok.is_eog(id)) ids.push_back(id);
  }
  return ids;
}

Generated generate_tokens(engine::Session& session, engine::Sampler& sampler, const engine::Tokenizer& tok,
                          int64_t n_vocab, std::vector<float>* logits, const GenerationLimits& limits,
                          const std::function<void(const std::string&)>& on_piece) {
  Generated g;
  for (int i = 0; i < limits.n_predict && session.n_past() < limits.n_ctx; ++i) {
    for (int32_t e : limits.banned) (*logits)[size_t(e)] = -std::numeric_limits<float>::infinity();
    const int32_t id = sampler.sample(logits->data(), n_vocab);
    g.ids.push_back(id);
    g.last_fed = false;
    if (tok.is_eog(id)) break;
    on_piece(tok.piece(id));
    if (limits.feed_last || i + 1 < limits.n_predict) {
      session.feed({id}, logits);
      g.last_fed = true;
    }
  }
  return g;
}

}  // namespace vq::eval
