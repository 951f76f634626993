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
#include "veloxquant/kv/calibration.h"
#include "tools/veloxquant/commands.h"
#include "veloxquant/error.h"

namespace vq::cli {
namespace {

// log-softmax of one row, in double.
void log_softmax(const float* x, int64_t n, std::vector<double>* out) {
  double mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, double(x[i]));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double(x[i]) - mx);
  const double lse = mx + std::log(sum);
  out->resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) (*out)[size_t(i)] = double(x[i]) - lse;
}

}  // namespace

Runner add_perplexity_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("perplexity", "Perplexity over a text file, chunked as llama-perplexity");
  struct Opts {
    std::string model, file, kv = "fp16", part = "all";
    std::vector<std::string> calib;
    std::string kv_budget;
    int64_t ctx = 512;
    int chunks = -1, threads = 2, ubatch = 512;
    bool json = false, progress = true;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("-m,--model", o->model, "GGUF model file")->required();
  cmd->add_option("-f,--file", o->file, "Text file")->required();
  cmd->add_option("--kv", o->kv, "KV-cache method spec");
  cmd->add_option("--kv-budget", o->kv_budget, "Largest KV cache allowed, e.g. 2G (0: no limit; default: 80% of available memory)");
  cmd->add_option("-c,--ctx", o->ctx, "Chunk size (tokens)")->check(CLI::Range(int64_t(8), int64_t(1) << 20));
  cmd->add_option("--chunks", o->chunks, "Chunks to evaluate (default: all)");
  cmd->add_option("-t,--threads", o->threads, "Threads")->check(CLI::Range(1, 1024));
  cmd->add_option("--ubatch", o->ubatch, "Micro-batch size")->check(CLI::Range(1, 1 << 16));
  cmd->add_flag("--json", o->json, "Print one JSON object");
  add_calib_option(cmd, &o->calib);
  add_part_option(cmd, &o->part);
  cmd->callback([o]() { kv::parse_method(o->kv); });
  return [o]() {
    set_num_threads(o->threads);
    const auto model = engine::Model::load(o->model);
    const kv::Method method = method_for_model(o->kv, o->calib, *model);
    const kv::Method ref_method = kv::parse_method("fp16");
    const bool compare = method.spec() != "fp16";
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
    engine::Session session(*model, method, n_ctx, o->ubatch, budget);
    std::unique_ptr<engine::Session> ref;
    if (compare) ref = std::make_unique<engine::Session>(*model, ref_method, n_ctx, o->ubatch, budget);
    std::vector<uint8_t> want(size_t(n_ctx), 0);
    for (int64_t j = first; j < n_ctx - 1; ++j) want[size_t(j)] = 1;
    double nll = 0, nll2 = 0, ref_nll = 0;
    int64_t count = 0, agree = 0;
    std::vector<double> kls;
    std::vector<double> lp, lq;
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t c = 0; c < n_chunks; ++c) {
      std::vector<int32_t> chunk(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx);
      if (tok.add_bos() && tok.bos() >= 0) chunk[0] = tok.bos();
      std::vector<float> logits, ref_logits;
      session.clear();
      session.feed_select(chunk, want, &logits);
      if (ref) {
        ref->clear();
        ref->feed_select(chunk, want, &ref_logits);
      }
      for (int64_t j = first; j < n_ctx - 1; ++j) {
        const int64_t k = j - first;
        log_softmax(logits.data() + k * V, V, &lq);
        const double l = -lq[size_t(chunk[size_t(j + 1)])];
        nll += l;
        nll2 += l * l;
        ++count;
        if (ref) {
          log_softmax(ref_logits.data() + k * V, V, &lp);
          ref_nll -= lp[size_t(chunk[size_t(j + 1)])];
          double kl = 0;
          for (int64_t i = 0; i < V; ++i) kl += std::exp(lp[size_t(i)]) * (lp[size_t(i)] - lq[size_t(i)]);
          kls.push_back(std::max(0.0, kl));
          agree += engine::argmax(logits.data() + k * V, V) == engine::argmax(ref_logits.data() + k * V, V);
        }
      }
      if (!o->json) {
        const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        fmt::print(stderr, "\r[{}/{}] ppl {:.4f}  ({:.0f} s, ~{:.0f} s left)   ", c + 1, n_chunks, std::exp(nll / double(count)),
                   el, el / double(c + 1) * double(n_chunks - c - 1));
      }
    }
    if (!o->json) fmt::print(stderr, "\n");
    const double mean = nll / double(count);
    const double ppl = std::exp(mean);
    const double var = nll2 / double(count) - mean * mean;
    const double stderr_ppl = var > 0 && count > 1 ? ppl * std::sqrt(var / double(count - 1)) : 0.0;
    const int head_dim = model->config().head_dim;
    nlohmann::json j;
    j["model"] = o->model;
    j["file"] = o->file;
    j["part"] = o->part;
    if (const kv::Calibration* c = method.calibration()) j["calibration"] = c->source;
    j["kv"] = method.spec();
    j["ctx"] = n_ctx;
    j["chunks"] = n_chunks;
    j["ppl"] = ppl;
    j["ppl_stderr"] = stderr_ppl;
    j["tokens_scored"] = count;
    j["kv_bits_per_element"] = method.bits_per_element(head_dim);
    if (compare) {
      std::vector<double> sorted = kls;
      std::sort(sorted.begin(), sorted.end());
      double sum = 0;
      for (double k : kls) sum += k;
      j["kl_mean"] = sum / double(kls.size());
      j["kl_p99"] = sorted[std::min(sorted.size() - 1, size_t(0.99 * double(sorted.size())))];
      j["top1_agreement"] = double(agree) / double(count);
      j["ppl_fp16"] = std::exp(ref_nll / double(count));
    }
    if (o->json) {
      fmt::print("{}\n", j.dump(2));
    } else {
      fmt::print("kv {} ({:.3f} bits/element): PPL = {:.4f} +/- {:.5f} over {} tokens ({} chunks of {})\n", method.spec(),
                 method.bits_per_element(head_dim), ppl, stderr_ppl, count, n_chunks, n_ctx);
      if (compare) {
        fmt::print("against fp16 (PPL {:.4f} on the same tokens): mean KL {:.6f}, p99 KL {:.6f}, top-1 agreement {:.4f}\n",
                   double(j["ppl_fp16"]), double(j["kl_mean"]), double(j["kl_p99"]), double(j["top1_agreement"]));
      }
    }
    return 0;
  };
}

}  // namespace vq::cli
