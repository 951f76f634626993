// `veloxquant perplexity`: perplexity over a text file, chunked exactly as llama.cpp's
// llama-perplexity: the file is tokenized once (with BOS), chunk i is tokens [i*ctx, (i+1)*ctx)
// with its first token replaced by BOS, the cache is cleared per chunk, and only the second half
// of each chunk is scored. With a compressed --kv, an fp16-cache pass over the same tokens in the
// same process gives the KL divergence and top-1 agreement against fp16.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "src/core/threads.h"
#include "src/engine/sampler.h"
#include "src/engine/session.h"
#include "tools/veloxquant/calibration_args.h"
#include "tools/veloxquant/cli_util.h"
#include "tools/veloxquant/logit_kl.h"
#include "veloxquant/kv/calibration.h"
#include "tools/veloxquant/commands.h"
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
    const kv::Method ref_method = kv::parse_method("fp16");
    bool compare = false;
    for (const auto& m : methods) compare = compare || m.spec() != "fp16";
    const auto& tok = model->tokenizer();
    const std::vector<int32_t> tokens = tok.encode(read_text_part(o->file, o->part));
    const int64_t n_ctx = o->ctx, V = model->config().n_vocab;
    VQ_CHECK(n_ctx <= model->config().n_ctx_train,
             fmt::format("-c {} exceeds the model's context length {}", n_ctx, model->config().n_ctx_train));
    int64_t n_chunks = int64_t(tokens.size()) / n_ctx;
    VQ_CHECK(n_chunks > 0, fmt::format("{}: {} tokens, fewer than one chunk of {}", o->file, tokens.size(), n_ctx));
    if (o->chunks >= 0) n_chunks = std::min<int64_t>(n_chunks, o->chunks);
    const int64_t first = n_ctx / 2;
    const size_t budget = kv_budget_bytes(o->kv_budget);
    std::unique_ptr<engine::Session> ref;
    if (compare) ref = std::make_unique<engine::Session>(*model, ref_method, n_ctx, o->ubatch, budget);
    std::vector<uint8_t> want(size_t(n_ctx), 0);
    for (int64_t j = first; j < n_ctx - 1; ++j) want[size_t(j)] = 1;
    struct Tally {
      double nll = 0, nll2 = 0, ref_nll = 0;
      int64_t count = 0, agree = 0;
      std::vector<double> kls;
    };
    std::vector<Tally> tallies(methods.size());
    std::vector<double> lp, lq;
    std::vector<float> logits, ref_logits;
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t c = 0; c < n_chunks; ++c) {
      std::vector<int32_t> chunk(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx);
      if (tok.add_bos() && tok.bos() >= 0) chunk[0] = tok.bos();
      if (ref) {
        ref->clear();
        ref->feed_select(chunk, want, &ref_logits);
      }
      for (size_t mi = 0; mi < methods.size(); ++mi) {
        Tally& t = tallies[mi];
        const bool cmp = ref && methods[mi].spec() != "fp16";
        {
          engine::Session session(*model, methods[mi], n_ctx, o->ubatch, budget);
          session.feed_select(chunk, want, &logits);
        }
        for (int64_t j = first; j < n_ctx - 1; ++j) {
          const int64_t k = j - first;
          log_softmax(logits.data() + k * V, V, &lq);
          const double l = -lq[size_t(chunk[size_t(j + 1)])];
          t.nll += l;
          t.nll2 += l * l;
          ++t.count;
          if (cmp) {
            log_softmax(ref_logits.data() + k * V, V, &lp);
            t.ref_nll -= lp[size_t(chunk[size_t(j + 1)])];
            double kl = 0;
            for (int64_t i = 0; i < V; ++i) kl += std::exp(lp[size_t(i)]) * (lp[size_t(i)] - lq[size_t(i)]);
            t.kls.push_back(std::max(0.0, kl));
            t.agree += engine::argmax(logits.data() + k * V, V) == engine::argmax(ref_logits.data() + k * V, V);
          }
        }
      }
      if (!o->json) {
        const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        fmt::print(stderr, "\r[{}/{}] ppl {:.4f}  ({:.0f} s, ~{:.0f} s left)   ", c + 1, n_chunks,
                   std::exp(tallies[0].nll / double(tallies[0].count)), el, el / double(c + 1) * double(n_chunks - c - 1));
      }
    }
    if (!o->json) fmt::print(stderr, "\n");
    const int head_dim = model->config().head_dim;
    nlohmann::json runs = nlohmann::json::array();
    for (size_t mi = 0; mi < methods.size(); ++mi) {
      const kv::Method& method = methods[mi];
      const Tally& t = tallies[mi];
      const double mean = t.nll / double(t.count);
      const double ppl = std::exp(mean);
      const double var = t.nll2 / double(t.count) - mean * mean;
      const double stderr_ppl = var > 0 && t.count > 1 ? ppl * std::sqrt(var / double(t.count - 1)) : 0.0;
      nlohmann::json j;
      j["model"] = o->model;
      j["file"] = o->file;
      j["part"] = o->part;
      j["kv"] = method.spec();
      if (const kv::Calibration* cal = method.calibration()) j["calibration"] = cal->source;
      j["ctx"] = n_ctx;
      j["chunks"] = n_chunks;
      j["ppl"] = ppl;
      j["ppl_stderr"] = stderr_ppl;
      j["tokens_scored"] = t.count;
      j["kv_bits_per_element"] = method.bits_per_element(head_dim);
      j["kv_key_bits"] = method.keys().key_bits(head_dim);
      j["kv_value_bits"] = method.values().value_bits(head_dim);
      j["kv_window_tokens"] = std::max(method.keys().key_keep(), method.values().value_keep());
      j["kv_sink_tokens"] = method.sink_tokens();
      const bool cmp = !t.kls.empty();
      if (cmp) {
        std::vector<double> sorted = t.kls;
        std::sort(sorted.begin(), sorted.end());
        double sum = 0;
        for (double k : t.kls) sum += k;
        j["kl_mean"] = sum / double(t.kls.size());
        j["kl_p99"] = sorted[std::min(sorted.size() - 1, size_t(0.99 * double(sorted.size())))];
        j["top1_agreement"] = double(t.agree) / double(t.count);
        j["ppl_fp16"] = std::exp(t.ref_nll / double(t.count));
      }
      if (!o->json) {
        fmt::print("kv {} ({:.3f} bits/element): PPL = {:.4f} +/- {:.5f} over {} tokens ({} chunks of {})\n", method.spec(),
                   method.bits_per_element(head_dim), ppl, stderr_ppl, t.count, n_chunks, n_ctx);
        if (cmp) {
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
