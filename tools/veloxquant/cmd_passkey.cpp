// `veloxquant passkey`: a random 5-digit key hidden at a random depth in filler text of a given
// length; the model is asked to repeat it (the task of llama.cpp's examples/passkey). Reports
// retrieval accuracy per length and per depth band, for any KV method.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "src/core/rng.h"
#include "src/core/threads.h"
#include "src/engine/sampler.h"
#include "src/engine/session.h"
#include "tools/veloxquant/calibration_args.h"
#include "tools/veloxquant/cli_util.h"
#include "tools/veloxquant/commands.h"
#include "veloxquant/error.h"

namespace vq::cli {
namespace {

const char* kPrefix =
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
    "I will quiz you about the important information there.\n";
const char* kFiller = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ";
const char* kQuestion = "\nWhat is the pass key? The pass key is";

std::string prompt_text(int n_filler, int key_at, const std::string& key) {
  std::string s = kPrefix;
  for (int i = 0; i < n_filler; ++i) {
    if (i == key_at) s += "The pass key is " + key + ". Remember it. " + key + " is the pass key. ";
    s += kFiller;
  }
  if (key_at >= n_filler) s += "The pass key is " + key + ". Remember it. " + key + " is the pass key. ";
  return s + kQuestion;
}

}  // namespace

Runner add_passkey_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("passkey", "Passkey retrieval accuracy at several context lengths");
  struct Opts {
    std::string model, kv = "fp16";
    std::string kv_budget;
    std::vector<std::string> calib;
    std::vector<int64_t> ctx = {1024, 4096};
    int trials = 5, threads = 2, bands = 3;
    uint64_t seed = 1;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("-m,--model", o->model, "GGUF model file")->required();
  cmd->add_option("--kv", o->kv, "KV-cache method spec");
  cmd->add_option("--kv-budget", o->kv_budget, "Largest KV cache allowed, e.g. 2G (0: no limit; default: 80% of available memory)");
  cmd->add_option("--ctx", o->ctx, "Prompt lengths in tokens (comma separated)")->delimiter(',');
  cmd->add_option("--trials", o->trials, "Trials per length")->check(CLI::Range(1, 100000));
  cmd->add_option("--bands", o->bands, "Depth bands to report")->check(CLI::Range(1, 100));
  cmd->add_option("-t,--threads", o->threads, "Threads")->check(CLI::Range(1, 1024));
  cmd->add_option("--seed", o->seed, "Seed for keys and depths");
  cmd->add_flag("--json", o->json, "Print one JSON object");
  add_calib_option(cmd, &o->calib);
  cmd->callback([o]() {
    kv::parse_method(o->kv);
    for (int64_t c : o->ctx) VQ_CHECK(c >= 64, fmt::format("--ctx {} is below 64 tokens", c));
  });
  return [o]() {
    set_num_threads(o->threads);
    const auto model = engine::Model::load(o->model);
    const kv::Method method = method_for_model(o->kv, o->calib, *model);
    const auto& tok = model->tokenizer();
    const int64_t per_filler = int64_t(tok.encode(kFiller, false).size());
    const int64_t fixed = int64_t(tok.encode(prompt_text(0, 0, "12345")).size());
    Rng rng(o->seed);
    nlohmann::json j;
    j["kv"] = method.spec();
    j["model"] = o->model;
    std::vector<std::vector<std::string>> rows = {{"ctx", "accuracy", "trials"}};
    for (int b = 0; b < o->bands; ++b) rows[0].push_back(fmt::format("depth {}-{}%", 100 * b / o->bands, 100 * (b + 1) / o->bands));
    for (int64_t ctx : o->ctx) {
      VQ_CHECK(ctx + 16 <= model->config().n_ctx_train,
               fmt::format("--ctx {} exceeds the model's context length {}", ctx, model->config().n_ctx_train));
      int n_filler = int(std::max<int64_t>(1, (ctx - fixed) / per_filler));
      std::vector<int> hits(size_t(o->bands), 0), counts(size_t(o->bands), 0);
      int ok = 0;
      for (int t = 0; t < o->trials; ++t) {
        const std::string key = std::to_string(10000 + rng.below(90000));
        const double depth = rng.uniform();
        std::vector<int32_t> ids;
        for (;;) {  // fit the prompt into ctx tokens
          ids = tok.encode(prompt_text(n_filler, int(depth * n_filler), key));
          if (int64_t(ids.size()) <= ctx || n_filler == 1) break;
          --n_filler;
        }
        engine::Session s(*model, method, int64_t(ids.size()) + 16, 512, kv_budget_bytes(o->kv_budget));
        std::vector<float> logits;
        s.feed(ids, &logits);
        std::string answer;
        for (int i = 0; i < 8; ++i) {
          const int32_t id = engine::argmax(logits.data(), model->config().n_vocab);
          if (tok.is_eog(id)) break;
          answer += tok.piece(id);
          if (i + 1 < 8) s.feed({id}, &logits);
        }
        const bool hit = answer.find(key) != std::string::npos;
        const int band = std::min(o->bands - 1, int(depth * o->bands));
        ok += hit;
        hits[size_t(band)] += hit;
        counts[size_t(band)] += 1;
        if (!o->json) {
          fmt::print(stderr, "ctx {} trial {}/{}: depth {:.2f} key {} answer '{}' {}\n", ctx, t + 1, o->trials, depth, key,
                     answer, hit ? "ok" : "miss");
        }
      }
      nlohmann::json r = {{"ctx", ctx}, {"accuracy", double(ok) / o->trials}, {"trials", o->trials}};
      std::vector<std::string> row = {std::to_string(ctx), fmt::format("{:.2f}", double(ok) / o->trials),
                                      std::to_string(o->trials)};
      for (int b = 0; b < o->bands; ++b) {
        const double acc = counts[size_t(b)] ? double(hits[size_t(b)]) / counts[size_t(b)] : 0.0;
        r["depth_bands"].push_back({{"from", double(b) / o->bands}, {"to", double(b + 1) / o->bands},
                                    {"trials", counts[size_t(b)]}, {"accuracy", acc}});
        row.push_back(counts[size_t(b)] ? fmt::format("{:.2f} ({})", acc, counts[size_t(b)]) : "-");
      }
      j["results"].push_back(r);
      rows.push_back(row);
    }
    if (o->json) {
      fmt::print("{}\n", j.dump(2));
    } else {
      fmt::print("passkey retrieval, kv {}\n\n", method.spec());
      print_table(rows);
    }
    return 0;
  };
}

}  // namespace vq::cli
