// `veloxquant perplexity`: perplexity over a text file, tokenized once (with BOS) and chunked
// exactly as llama.cpp's llama-perplexity (src/eval/perplexity.h). With a compressed --kv, an
// fp16-cache pass over the same tokens in the same process gives the KL divergence and top-1
// agreement against fp16. With --seeds N, a spec that draws a random rotation or sketch runs with N
// consecutive seeds (src/eval/seed_sweep.h) against the same fp16 pass, and is reported as the
// means over seeds with their spread.
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
    bool mmap = false;
    std::vector<std::string> kv, calib;
    std::string kv_budget;
    int64_t ctx = 512;
    int chunks = -1, threads = 2, ubatch = 512, seeds = 1;
    bool json = false, progress = true;
  };
  auto o = std::make_shared<Opts>();
  add_model_options(cmd, &o->model, &o->mmap);
  cmd->add_option("-f,--file", o->file, "Text file")->required();
  cmd->add_option("--kv", o->kv, "KV-cache method spec (repeatable: one fp16 pass serves every method's KL; default fp16)");
  cmd->add_option("--kv-budget", o->kv_budget, "Largest KV cache allowed, e.g. 2G (0: no limit; default: 80% of available memory)");
  cmd->add_option("-c,--ctx", o->ctx, "Chunk size (tokens)")->check(CLI::Range(int64_t(8), int64_t(1) << 20));
  cmd->add_option("--chunks", o->chunks, "Chunks to evaluate (default: all)");
  cmd->add_option("-t,--threads", o->threads, "Threads")->check(CLI::Range(1, 1024));
  cmd->add_option("--ubatch", o->ubatch, "Micro-batch size")->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--seeds", o->seeds,
                  "Seeds per method that draws a random rotation or sketch: the spec's seed and the next N-1; "
                  "reported as the mean with [min, max]")
      ->check(CLI::Range(1, eval::kMaxSeeds));
  cmd->add_flag("--json", o->json, "Print one JSON object (several methods: {\"runs\": [...]})");
  add_calib_option(cmd, &o->calib);
  add_part_option(cmd, &o->part);
  cmd->callback([o]() {
    if (o->kv.empty()) o->kv = {"fp16"};
    for (const auto& s : o->kv) eval::seed_variants(s, o->seeds);
  });
  return [o]() {
    set_num_threads(o->threads);
    const auto model = load_model(o->model, o->mmap);
    // Every seed of every spec, in spec order; runs[i] are the indices of spec i's seeds in methods.
    std::vector<kv::Method> methods;
    std::vector<std::vector<eval::SeedVariant>> variants;
    std::vector<std::vector<size_t>> runs_of;
    for (const auto& s : o->kv) {
      variants.push_back(eval::seed_variants(s, o->seeds));
      runs_of.emplace_back();
      for (const eval::SeedVariant& v : variants.back()) {
        runs_of.back().push_back(methods.size());
        methods.push_back(method_for_model(v.spec, o->calib, *model));
      }
    }
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
    // The bits a row really costs, where the cache keeps tokens in fp16 (sinks, window).
    const auto counted_note = [&](const kv::Method& m) -> std::string {
      if (m.fp16_tokens() == 0) return "";
      return fmt::format("; {:.3f} counting its {} fp16 token{} of {}", m.bits_counted(head_dim, n_ctx), m.fp16_tokens(),
                         m.fp16_tokens() == 1 ? "" : "s", n_ctx);
    };
    nlohmann::json runs = nlohmann::json::array();
    // --seeds N > 1: one table row per spec, means over its seeds with [min, max].
    std::vector<std::vector<std::string>> table = {{"kv", "bits/elem", "counted", "seeds", "PPL [min, max]",
                                                    "mean KL [min, max]", "p99 KL", "top-1 agreement"}};
    double ppl_fp16 = 0;
    for (size_t si = 0; si < o->kv.size(); ++si) {
      const kv::Method& method = methods[runs_of[si].front()];
      std::vector<eval::PerplexityScore> scores;
      for (size_t mi : runs_of[si]) scores.push_back(eval::score(tallies[mi]));
      const eval::SeedScores seeded = eval::score_seeds(scores);
      const eval::PerplexityScore& s = seeded.mean;
      const bool swept = scores.size() > 1;
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
      j["kv_window_tokens"] = method.window_tokens();
      j["kv_sink_tokens"] = method.sink_tokens();
      j["kv_bits_counted"] = method.bits_counted(head_dim, n_ctx);
      if (s.compared) {
        j["kl_mean"] = s.kl_mean;
        j["kl_p99"] = s.kl_p99;
        j["top1_agreement"] = s.top1_agreement;
        j["ppl_fp16"] = s.ppl_fp16;
        ppl_fp16 = s.ppl_fp16;
      }
      if (o->seeds > 1) j["n_seeds"] = scores.size();
      if (swept) {
        j["ppl_min"] = seeded.ppl.min;
        j["ppl_max"] = seeded.ppl.max;
        if (s.compared) {
          j["kl_mean_min"] = seeded.kl_mean.min;
          j["kl_mean_max"] = seeded.kl_mean.max;
        }
        nlohmann::json per_seed = nlohmann::json::array();
        for (size_t r = 0; r < scores.size(); ++r) {
          const kv::Method& m = methods[runs_of[si][r]];
          const eval::PerplexityScore& x = scores[r];
          nlohmann::json e{
              {"seed", variants[si][r].seed}, {"kv", m.spec()}, {"ppl", x.ppl}, {"ppl_stderr", x.ppl_stderr}};
          if (const kv::Calibration* cal = m.calibration()) e["calibration"] = cal->source;
          if (x.compared) {
            e["kl_mean"] = x.kl_mean;
            e["kl_p99"] = x.kl_p99;
            e["top1_agreement"] = x.top1_agreement;
          }
          per_seed.push_back(e);
        }
        j["seeds"] = per_seed;
      }
      if (!o->json && o->seeds == 1) {
        fmt::print("kv {} ({:.3f} bits/element{}): PPL = {:.4f} +/- {:.5f} over {} tokens ({} chunks of {})\n",
                   method.spec(), method.bits_per_element(head_dim), counted_note(method), s.ppl, s.ppl_stderr,
                   s.tokens_scored, n_chunks, n_ctx);
        if (s.compared) {
          fmt::print("against fp16 (PPL {:.4f} on the same tokens): mean KL {:.6f}, p99 KL {:.6f}, top-1 agreement {:.4f}\n",
                     double(j["ppl_fp16"]), double(j["kl_mean"]), double(j["kl_p99"]), double(j["top1_agreement"]));
        }
      }
      const auto with_spread = [swept](double mean, const eval::Spread& sp, int digits) {
        return swept ? fmt::format("{:.{}f} [{:.{}f}, {:.{}f}]", mean, digits, sp.min, digits, sp.max, digits)
                     : fmt::format("{:.{}f}", mean, digits);
      };
      table.push_back({method.spec(), fmt::format("{:.3f}", method.bits_per_element(head_dim)),
                       fmt::format("{:.3f}", method.bits_counted(head_dim, n_ctx)), std::to_string(scores.size()), with_spread(s.ppl, seeded.ppl, 4),
                       s.compared ? with_spread(s.kl_mean, seeded.kl_mean, 6) : "-",
                       s.compared ? fmt::format("{:.6f}", s.kl_p99) : "-",
                       s.compared ? fmt::format("{:.4f}", s.top1_agreement) : "-"});
      runs.push_back(j);
    }
    if (!o->json && o->seeds > 1) {
      fmt::print("perplexity over {} tokens ({} chunks of {}){}; rows with several seeds give the mean over seeds, "
                 "[min, max]; counted: bits per element with the fp16 sinks and window as their share of a chunk\n\n",
                 runs[0]["tokens_scored"].get<int64_t>(), n_chunks, n_ctx,
                 ppl_fp16 > 0 ? fmt::format(", fp16 PPL {:.4f} on the same tokens", ppl_fp16) : "");
      print_table(table);
    }
    if (o->json) fmt::print("{}\n", runs.size() == 1 ? runs[0].dump(2) : nlohmann::json{{"runs", runs}}.dump(2));
    return 0;
  };
}

}  // namespace vq::cli
