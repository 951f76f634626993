#include "src/eval/passkey.h"

#include <fmt/format.h>

#include <algorithm>

#include "src/core/rng.h"
#include "src/engine/sampler.h"
#include "src/engine/session.h"
#include "veloxquant/error.h"

namespace vq::eval {
namespace {

const char* kPrefix =
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
    "I will quiz you about the important information there.\n";
const char* kQuestion = "\nWhat is the pass key? The pass key is";
constexpr int kAnswerTokens = 8;

}  // namespace

const char* const kPasskeyFiller =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ";

std::string passkey_prompt(int n_filler, int key_at, const std::string& key) {
  std::string s = kPrefix;
  for (int i = 0; i < n_filler; ++i) {
    if (i == key_at) s += "The pass key is " + key + ". Remember it. " + key + " is the pass key. ";
    s += kPasskeyFiller;
  }
  if (key_at >= n_filler) s += "The pass key is " + key + ". Remember it. " + key + " is the pass key. ";
  return s + kQuestion;
}

int depth_band(double depth, int bands) { return std::min(bands - 1, int(depth * bands)); }

std::string passkey_answer(const engine::Model& model, const kv::Method& method, const std::vector<int32_t>& ids,
                           size_t kv_budget) {
  const auto& tok = model.tokenizer();
  engine::Session s(model, method, int64_t(ids.size()) + 16, 512, kv_budget);
  std::vector<float> logits;
  s.feed(ids, &logits);
  std::string answer;
  for (int i = 0; i < kAnswerTokens; ++i) {
    const int32_t id = engine::argmax(logits.data(), model.config().n_vocab);
    if (tok.is_eog(id)) break;
    answer += tok.piece(id);
    if (i + 1 < kAnswerTokens) s.feed({id}, &logits);
  }
  return answer;
}

std::vector<PasskeyLength> run_passkey(const engine::Model& model, const kv::Method& method, const PasskeyRun& run,
                                       const std::function<void(const PasskeyTrial&)>& on_trial) {
  const auto& tok = model.tokenizer();
  const int64_t per_filler = int64_t(tok.encode(kPasskeyFiller, false).size());
  const int64_t fixed = int64_t(tok.encode(passkey_prompt(0, 0, "12345")).size());
  Rng rng(run.seed);
  std::vector<PasskeyLength> out;
  for (int64_t ctx : run.ctx) {
    VQ_CHECK(ctx + 16 <= model.config().n_ctx_train,
             fmt::format("--ctx {} exceeds the model's context length {}", ctx, model.config().n_ctx_train));
    int n_filler = int(std::max<int64_t>(1, (ctx - fixed) / per_filler));
    PasskeyLength r{ctx, 0, run.trials, std::vector<int>(size_t(run.bands), 0), std::vector<int>(size_t(run.bands), 0)};
    for (int t = 0; t < run.trials; ++t) {
      PasskeyTrial trial;
      trial.ctx = ctx;
      trial.index = t;
      trial.key = std::to_string(10000 + rng.below(90000));
      trial.depth = rng.uniform();
      std::vector<int32_t> ids;
      for (;;) {  // fit the prompt into ctx tokens
        ids = tok.encode(passkey_prompt(n_filler, int(trial.depth * n_filler), trial.key));
        if (int64_t(ids.size()) <= ctx || n_filler == 1) break;
        --n_filler;
      }
      trial.answer = passkey_answer(model, method, ids, run.kv_budget);
      trial.hit = trial.answer.find(trial.key) != std::string::npos;
      const int band = depth_band(trial.depth, run.bands);
      r.ok += trial.hit;
      r.hits[size_t(band)] += trial.hit;
      r.counts[size_t(band)] += 1;
      if (on_trial) on_trial(trial);
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace vq::eval
