// Passkey retrieval (the task of llama.cpp's examples/passkey): a random 5-digit key hidden at a
// random depth in filler text of a given length; the model is asked to repeat it, greedily, and
// a trial is a hit when the key appears in its first 8 tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "src/engine/model.h"
#include "veloxquant/kv/method.h"

namespace vq::eval {

// One repetition of the filler text.
extern const char* const kPasskeyFiller;

// The prompt: the instructions, n_filler fillers with the key's sentences before filler key_at
// (after the last one if key_at >= n_filler), and the question.
std::string passkey_prompt(int n_filler, int key_at, const std::string& key);

// The depth band (of `bands` equal ones over [0, 1)) that a depth in [0, 1] falls in.
int depth_band(double depth, int bands);

// What the model answers to `ids` with `method`: up to 8 greedy tokens' text, stopping at an
// end-of-generation token.
std::string passkey_answer(const engine::Model& model, const kv::Method& method, const std::vector<int32_t>& ids,
                           size_t kv_budget);

struct PasskeyTrial {
  int64_t ctx = 0;
  int index = 0;  // 0-based, within its length
  double depth = 0;
  std::string key, answer;
  bool hit = false;
};

// One prompt length's tally: hits and trials overall and per depth band.
struct PasskeyLength {
  int64_t ctx = 0;
  int ok = 0, trials = 0;
  std::vector<int> hits, counts;  // per depth band
};

struct PasskeyRun {
  std::vector<int64_t> ctx;  // prompt lengths in tokens
  int trials = 5, bands = 3;
  uint64_t seed = 1;
  size_t kv_budget = 0;  // bytes, 0: no limit
};

// Runs run.trials trials at each length in order, keys and depths drawn from one generator
// seeded with run.seed; on_trial (if set) sees each trial as it ends.
std::vector<PasskeyLength> run_passkey(const engine::Model& model, const kv::Method& method, const PasskeyRun& run,
                                       const std::function<void(const PasskeyTrial&)>& on_trial);

}  // namespace vq::eval
