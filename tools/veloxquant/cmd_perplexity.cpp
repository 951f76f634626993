// `veloxquant perplexity`: perplexity over a text file, tokenized once (with BOS) and chunked
// exactly as llama.cpp's llama-perplexity (src/eval/perplexity.h). With a compressed --kv, an
// fp16-cache pass over the same tokens in the same process gives the KL divergence and top-1
// agreement against fp16.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "src/core/threads.h"
#include "src/eval/perplexity.h"
#include "tools/veloxquant/calibration_args.h"
#include "tools/veloxquant/cli_util.h"
#include "tools/veloxquant/commands.h"
#include "veloxquant/kv/calibration.h"
#include "veloxquant/error.h"

namespace vq::cli {

Runner add_perplexity_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("perplexity", "Perplexity over a text file, chunked as llama-perplexity");
  struct Opts {
    std::string model, file, part = "all";
    std::vector<std::string> kv, calib;
    std::string kv_budget;
    int64_t ctx = 512;
    int chunks = -1, threads = 2, ubatch = 512;
    bool json = false, progress = true;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("-m,--model", o->model, "GGUF model file")->required();
  cmd->add_option("-f,--file", o->file, "Text file")->required();
  cmd->add_option("--kv", o->kv, "KV-cache method spec (repeatable: one fp16 pass serves every method's KL; default fp16)");
  cmd->add_option("--kv-budget", o->kv_budget, "Largest KV cache allowed, e.g. 2G (0: no limit; default: 80% of available memory)");
  cmd->add_option("-c,--ctx", o->ctx, "Chunk size (tokens)")->check(CLI::Range(int64_t(8), int64_t(1) << 20));
  cmd->add_option("--chunks", o->chunks, "Chunks to evaluate (default: all)");
  cmd->add_option("-t,--threads", o->threads, "Threads")->check(CLI::Range(1, 1024));
  cmd->add_option("--ubatch", o->ubatch, "Micro-batch size")->check(CLI::Range(1, 1 << 16));
  cmd->add_flag("--json", o->json, "Print one JSON object (several methods: {\"runs\": [...]})");
  add_calib_option(cmd, &o->calib);
  add_part_option(cmd, &o->part);
  cmd->callback([o]() {
    if (o->kv.empty()) o->kv = {"fp16"};
    for (const auto& s : o->kv) kv::parse_method(s);
  });
  return [o]() {
    set_num_threads(o->threads);
    const auto model = engine::Model::load(o->model);
    std::vector<kv::Method> methods;
    for (const auto& s : o->kv) methods.push_back(method_for_model(s, o->calib, *model));
    const auto& tok = model->tokenizer();
    const std::vector<int32_t> tokens = tok.encode(read_text_part(o->file, o->part));
    const int64_t n_ctx = o->ctx;
    VQ_CHECK(n_ctx <= model->config().n_ctx_train,
             fmt::format("-c {} exceeds the model's context length {}", n_ctx, model->config().n_ctx_train));
    VQ_CHECK(eval::count_chunks(int64_t(tokens.size()), n_ctx, -1) > 0,
             fmt::format("{}: {} tokens, fewer than one chunk of {}", o->file, tokens.size(), n_ctx));
    eval::PerplexityRun run;
    run.n_ctx = n_ctx;
    run.n_chunks = eval::count_chunks(int64_t(tokens.size()), n_ctx, o->chunks);
    run.ubatch = o->ubatch;
    run.kv_budget = kv_budget_bytes(o->kv_budget);
    const int64_t n_chunks = run.n_chunks;
    const auto t0 = std::chrono::steady_clock::now();
    const auto progress = [&](int64_t done, const std::vector<eval::PerplexityTally>& tallies) {
      if (o->json) return;
      const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      fmt::print(stderr, "\r[{}/{}] ppl {:.4f}  ({:.0f} s, ~{:.0f} s left)   ", done, n_chunks, tallies[0].ppl(), el,
                 el / double(done) * double(n_chunks - done));
    };
    const std::vector<eval::PerplexityTally> tallies = eval::run_perplexity(*model, methods, tokens, run, progress);
    if (!o->json) fmt::print(stderr, "\n");
    const int head_dim = model->config().head_dim;
    nlohmann::json runs = nlohmann::json::array();
    for (size_t mi = 0; mi < methods.size(); ++mi) {
      const kv::Method& method = methods[mi];
      const eval::PerplexityScore s = eval::score(tallies[mi]);
      nlohmann::json j;
      j["model"] = o->model;
      j["file"] = o->file;
      j["part"] = o->part;
      j["kv"] = method.spec();
      if (const kv::Calibration* cal = method.calibration()) j["calibration"] = cal->source;
      j["ctx"] = n_ctx;
      j["chunks"] = n_chunks;
      j["ppl"] = s.ppl;
      j["ppl_stderr"] = s.ppl_stderr;
      j["tokens_scored"] = s.tokens_scored;
      j["kv_bits_per_element"] = method.bits_per_element(head_dim);
      j["kv_key_bits"] = method.keys().key_bits(head_dim);
      j["kv_value_bits"] = method.values().value_bits(head_dim);
      j["kv_window_tokens"] = std::max(method.keys().key_keep(), method.values().value_keep());
      j["kv_sink_tokens"] = method.sink_tokens();
      if (s.compared) {
        j["kl_mean"] = s.kl_mean;
        j["kl_p99"] = s.kl_p99;
        j["top1_agreement"] = s.top1_agreement;
        j["ppl_fp16"] = s.ppl_fp16;
      }
      if (!o->json) {
        fmt::print("kv {} ({:.3f} bits/element): PPL = {:.4f} +/- {:.5f} over {} tokens ({} chunks of {})\n", method.spec(),
                   method.bits_per_element(head_dim), s.ppl, s.ppl_stderr, s.tokens_scored, n_chunks, n_ctx);
        if (s.compared) {
          fmt::print("against fp16 (PPL {:.4f} on the same tokens): mean KL {:.6f}, p99 KL {:.6f}, top-1 agreement {:.4f}\n",
                     double(j["ppl_fp16"]), double(j["kl_mean"]), double(j["kl_p99"]), double(j["top1_agreement"]));
        }
      }
      runs.push_back(j);
    }
    if (o->json) fmt::print("{}\n", runs.size() == 1 ? runs[0].dump(2) : nlohmann::json{{"runs", runs}}.dump(2));
    return 0;
  };
}

}  // namespace vq::cli
