// `veloxquant bench`: model speed and memory per KV method. Prefill tokens/s on a prompt of
// --prompt tokens, decode tokens/s at each --depths (tokens already in the cache), resident KV
// bytes per token against the method's formula, and the process's peak RSS. Methods are measured
// interleaved (round-robin over --reps rounds); each figure is the median with min and max, and
// the fp16 spread is printed as the noise floor.
#include <fmt/format.h>
#include <sys/resource.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "src/core/simd.h"
#include "src/core/threads.h"
#include "src/engine/sampler.h"
#include "src/engine/session.h"
#include "tools/veloxquant/calibration_args.h"
#include "tools/veloxquant/cli_util.h"
#include "tools/veloxquant/commands.h"
#include "veloxquant/error.h"

namespace vq::cli {
namespace {

// Default prompt text (-f replaces it), repeated as often as the prompt and depths need: ordinary
// English, so that its tokens are ordinary tokens of any vocabulary.
constexpr const char* kBenchText =
    "The river had been rising for three days, and by the fourth morning the lower road was gone. "
    "People in the village carried what they could up the hill: bread, blankets, a few chickens in a "
    "basket, and the old clock from the school. Nobody spoke much. The rain came in long grey sheets "
    "from the west, and the water moved faster than anyone remembered. At noon the baker counted the "
    "families on the hill and found that one was missing, so two of the fishermen took a boat and went "
    "back down between the roofs to look for them. They returned an hour later with a woman, her son "
    "and a dog, all of them wet and silent, and the village made room for them by the fire. ";

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Runner add_bench_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Prefill and decode speed, KV bytes and peak RSS per KV method");
  struct Opts {
    std::string model, text, simd = "best";
    bool mmap = false;
    std::vector<std::string> kv, calib;
    std::vector<int64_t> depths = {0};
    int prompt = 512, n_decode = 64, reps = 3, threads = 2;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  add_model_options(cmd, &o->model, &o->mmap);
  cmd->add_option("--kv", o->kv, "KV-cache method spec (repeatable; default fp16)");
  cmd->add_option("-p,--prompt", o->prompt, "Prompt tokens for the prefill figure")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("-n,--n-decode", o->n_decode, "Decode steps per decode figure")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--depths", o->depths, "Cache depths for decode (comma separated)")->delimiter(',');
  cmd->add_option("--reps", o->reps, "Interleaved rounds")->check(CLI::Range(1, 1000));
  cmd->add_option("-t,--threads", o->threads, "Threads")->check(CLI::Range(1, 1024));
  cmd->add_option("-f,--file", o->text, "Text whose tokens fill prompts and depths, repeated as needed (default: a built-in English paragraph)");
  cmd->add_flag("--json", o->json, "Print one JSON object");
  cmd->add_option("--simd", o->simd,
                  "Best SIMD target the kernels may use: best, avx3 or avx2 (to measure what a CPU without AVX-512 runs)");
  add_calib_option(cmd, &o->calib);
  cmd->callback([o]() {
    if (o->kv.empty()) o->kv = {"fp16"};
    for (const auto& s : o->kv) kv::parse_method(s);
    for (int64_t d : o->depths) VQ_CHECK(d >= 0, fmt::format("--depths: {} is negative", d));
  });
  return [o]() {
    limit_simd_target(o->simd);
    set_num_threads(o->threads);
    const auto model = load_model(o->model, o->mmap);
    const auto& cfg = model->config();
    int64_t max_depth = 0;
    for (int64_t d : o->depths) max_depth = std::max(max_depth, d);
    const int64_t n_ctx = std::max<int64_t>(o->prompt, max_depth + o->n_decode);
    VQ_CHECK(n_ctx <= cfg.n_ctx_train, fmt::format("a context of {} exceeds the model's {}", n_ctx, cfg.n_ctx_train));
    // Prompt and depth tokens: BOS, then the text's tokens (the -f file's, else kBenchText) repeated.
    const auto& tok = model->tokenizer();
    std::string text = kBenchText;
    if (!o->text.empty()) {
      std::ifstream in(o->text, std::ios::binary);
      VQ_CHECK(bool(in), fmt::format("{}: cannot open", o->text));
      std::stringstream ss;
      ss << in.rdbuf();
      text = ss.str();
    }
    const std::vector<int32_t> unit = tok.encode(text, /*add_special=*/false);
    VQ_CHECK(!unit.empty(), fmt::format("{}: the text has no tokens", o->text.empty() ? "bench's text" : o->text));
    std::vector<int32_t> pool;
    if (tok.bos() >= 0) pool.push_back(tok.bos());
    while (int64_t(pool.size()) < n_ctx) pool.insert(pool.end(), unit.begin(), unit.end());

    struct Result {
      std::string spec;
      double bits = 0;
      std::vector<double> prefill;
      std::vector<std::vector<double>> decode;
      std::vector<size_t> depth_kv_bytes;  // resident KV bytes after decoding at each depth
      std::vector<int64_t> depth_kv_tokens;
      size_t kv_bytes = 0;
      int64_t kv_tokens = 0;
      double formula_bytes = 0;
    };
    std::vector<Result> results;
    for (const auto& s : o->kv) {
      Result r;
      const kv::Method m = method_for_model(s, o->calib, *model);
      r.spec = m.spec();
      r.bits = m.bits_per_element(cfg.head_dim);
      r.decode.resize(o->depths.size());
      r.depth_kv_bytes.resize(o->depths.size());
      r.depth_kv_tokens.resize(o->depths.size());
      results.push_back(r);
    }
    for (int rep = 0; rep < o->reps; ++rep) {
      for (auto& r : results) {
        const kv::Method m = method_for_model(r.spec, o->calib, *model);
        if (!o->json) fmt::print(stderr, "round {}/{}: {}\n", rep + 1, o->reps, r.spec);
        {
          engine::Session s(*model, m, n_ctx);
          std::vector<float> logits;
          const auto t0 = std::chrono::steady_clock::now();
          s.feed(std::vector<int32_t>(pool.begin(), pool.begin() + o->prompt), &logits);
          r.prefill.push_back(o->prompt / seconds_since(t0));
        }
        for (size_t di = 0; di < o->depths.size(); ++di) {
          engine::Session s(*model, m, n_ctx);
          std::vector<float> logits;
          const int64_t depth = o->depths[di];
          if (depth > 0) s.feed(std::vector<int32_t>(pool.begin(), pool.begin() + depth), &logits);
          int32_t tok = pool[size_t(depth)];
          const auto t0 = std::chrono::steady_clock::now();
          for (int i = 0; i < o->n_decode; ++i) {
            s.feed({tok}, &logits);
            tok = engine::argmax(logits.data(), cfg.n_vocab);
          }
          r.decode[di].push_back(o->n_decode / seconds_since(t0));
          r.depth_kv_bytes[di] = s.cache().memory().total();
          r.depth_kv_tokens[di] = s.n_past();
          if (di + 1 == o->depths.size()) {
            const kv::MemoryUsage mem = s.cache().memory();
            r.kv_bytes = mem.total();
            r.kv_tokens = s.n_past();
            r.formula_bytes = mem.key_elements_compressed * m.keys().key_bits(cfg.head_dim) / 8 +
                              mem.value_elements_compressed * m.values().value_bits(cfg.head_dim) / 8;
            r.formula_bytes = double(mem.block_bytes) == 0 ? 0 : double(mem.block_bytes) / r.formula_bytes;
          }
        }
      }
    }
    const Result* base = nullptr;
    for (const auto& r : results) {
      if (r.spec == "fp16") base = &r;
    }
    nlohmann::json j;
    j["model"] = o->model;
    j["threads"] = o->threads;
    j["simd_target"] = simd_target_name();
    j["prompt_tokens"] = o->prompt;
    j["decode_tokens"] = o->n_decode;
    j["reps"] = o->reps;
    j["peak_rss_bytes"] = peak_rss_bytes();
    double noise = 0;
    if (base) {
      const Stats p = stats_of(base->prefill);
      noise = p.median > 0 ? (p.max - p.min) / p.median : 0;
      for (const auto& d : base->decode) {
        const Stats s = stats_of(d);
        if (s.median > 0) noise = std::max(noise, (s.max - s.min) / s.median);
      }
      j["fp16_noise_floor"] = noise;
    }
    std::vector<std::vector<std::string>> rows = {{"spec", "bits/elem", "prefill tok/s"}};
    for (int64_t d : o->depths) rows[0].push_back(fmt::format("decode@{}", d));
    rows[0].push_back("KV bytes/token");
    rows[0].push_back("blocks/formula");
    for (const auto& r : results) {
      const Stats p = stats_of(r.prefill);
      nlohmann::json jr = {{"spec", r.spec}, {"bits_per_element", r.bits},
                           {"prefill_tps", p.median}, {"prefill_tps_min", p.min}, {"prefill_tps_max", p.max},
                           {"kv_bytes", r.kv_bytes}, {"kv_tokens", r.kv_tokens},
                           {"kv_bytes_per_token", r.kv_tokens ? double(r.kv_bytes) / r.kv_tokens : 0.0},
                           {"block_bytes_over_formula", r.formula_bytes}};
      std::vector<std::string> row = {r.spec, fmt::format("{:.3f}", r.bits),
                                      fmt::format("{:.1f} [{:.1f}, {:.1f}]", p.median, p.min, p.max)};
      for (size_t di = 0; di < o->depths.size(); ++di) {
        const Stats s = stats_of(r.decode[di]);
        jr["decode"].push_back({{"depth", o->depths[di]}, {"tps", s.median}, {"tps_min", s.min}, {"tps_max", s.max},
                                {"kv_bytes", r.depth_kv_bytes[di]}, {"kv_tokens", r.depth_kv_tokens[di]}});
        row.push_back(fmt::format("{:.1f} [{:.1f}, {:.1f}]", s.median, s.min, s.max));
      }
      row.push_back(fmt::format("{:.0f}", r.kv_tokens ? double(r.kv_bytes) / r.kv_tokens : 0.0));
      row.push_back(r.formula_bytes > 0 ? fmt::format("{:.4f}", r.formula_bytes) : "-");
      j["results"].push_back(jr);
      rows.push_back(row);
    }
    if (o->json) {
      fmt::print("{}\n", j.dump(2));
    } else {
      fmt::print("{} threads, SIMD {}; prompt {} tokens; {} decode steps per depth; median [min, max] of {} interleaved rounds\n",
                 o->threads, simd_target_name(), o->prompt, o->n_decode, o->reps);
      if (base) fmt::print("fp16 noise floor (max-min)/median: {:.1f}%\n", 100 * noise);
      fmt::print("peak RSS {:.1f} MiB\n\n", peak_rss_bytes() / 1048576.0);
      print_table(rows);
    }
    return 0;
  };
}

}  // namespace vq::cli
