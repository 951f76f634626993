// `veloxquant generate`: stream a continuation of a prompt with any KV-cache method.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>

#include "src/core/threads.h"
#include "src/engine/sampler.h"
#include "src/engine/session.h"
#include "src/eval/generation.h"
#include "tools/veloxquant/calibration_args.h"
#include "tools/veloxquant/cli_util.h"
#include "tools/veloxquant/commands.h"
#include "tools/veloxquant/saved_session.h"
#include "tools/veloxquant/utf8_stream.h"
#include "veloxquant/error.h"

namespace vq::cli {

Runner add_generate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Generate text from a prompt");
  struct Opts {
    std::string model, prompt, kv = "fp16";
    bool mmap = false;
    std::string kv_budget;
    int n_predict = 64, threads = 2, ubatch = 512;
    int64_t ctx = 4096;
    engine::SamplerParams sp;
    bool show_ids = false, ignore_eos = false;
    std::string dump_logits, save_cache, load_cache;
    std::vector<std::string> calib;
  };
  auto o = std::make_shared<Opts>();
  add_model_options(cmd, &o->model, &o->mmap);
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text (with --load-cache: text fed after the saved context)");
  cmd->add_option("-n,--n-predict", o->n_predict, "Tokens to generate")->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--kv", o->kv, "KV-cache method spec (see `veloxquant methods`)");
  cmd->add_option("--kv-budget", o->kv_budget, "Largest KV cache allowed, e.g. 2G (0: no limit; default: 80% of available memory)");
  cmd->add_option("-c,--ctx", o->ctx, "Context size (tokens)")->check(CLI::Range(int64_t(1), int64_t(1) << 24));
  cmd->add_option("-t,--threads", o->threads, "Threads")->check(CLI::Range(1, 1024));
  cmd->add_option("--ubatch", o->ubatch, "Prompt micro-batch size")->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--seed", o->sp.seed, "Sampling seed");
  cmd->add_option("--temp", o->sp.temperature, "Temperature (0: greedy)")->check(CLI::Range(0.0f, 100.0f));
  cmd->add_option("--top-k", o->sp.top_k, "Top-k (0: off)")->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--top-p", o->sp.top_p, "Top-p (1: off)")->check(CLI::Range(0.0f, 1.0f));
  cmd->add_option("--min-p", o->sp.min_p, "Min-p (0: off)")->check(CLI::Range(0.0f, 1.0f));
  cmd->add_flag("--ids", o->show_ids, "Print the generated token ids on stderr at the end");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Never sample an end-of-generation token (as llama.cpp's --ignore-eos)");
  cmd->add_option("--dump-logits", o->dump_logits, "Write the prompt's last-token logits (float32) to this file");
  cmd->add_option("--save-cache", o->save_cache,
                  "Save the session (compressed cache, position, last logits, sampler) to this file at the end");
  cmd->add_option("--load-cache", o->load_cache,
                  "Continue a session saved with --save-cache (same model; its --kv unless given)");
  add_calib_option(cmd, &o->calib);
  cmd->callback([o, cmd]() {
    kv::parse_method(o->kv);
    VQ_CHECK(cmd->count("--prompt") > 0 || !o->load_cache.empty(), "--prompt is required (unless --load-cache)");
  });
  const auto kv_given = [cmd]() { return cmd->count("--kv") > 0; };
  return [o, kv_given]() {
    set_num_threads(o->threads);
    const auto model = load_model(o->model, o->mmap);
    const SavedSession saved_session = open_saved_session(o->load_cache, o->kv, kv_given());
    const auto& saved = saved_session.file;
    const kv::Method method = method_for_model(saved_session.spec, o->calib, *model);
    VQ_CHECK(o->ctx <= model->config().n_ctx_train,
             fmt::format("-c {} exceeds the model's context length {}", o->ctx, model->config().n_ctx_train));
    engine::Session session(*model, method, o->ctx, o->ubatch, kv_budget_bytes(o->kv_budget));
    engine::Sampler sampler(o->sp);
    const auto& tok = model->tokenizer();
    std::vector<float> logits;
    if (saved) restore_saved_session(*saved, session, sampler, &logits);
    // After a saved context the prompt continues it: no BOS.
    const std::vector<int32_t> prompt =
        o->prompt.empty() && saved ? std::vector<int32_t>{} : tok.encode(o->prompt, !saved);
    VQ_CHECK(session.n_past() + int64_t(prompt.size()) + o->n_predict <= o->ctx,
             fmt::format("{} saved tokens, the prompt ({} tokens) and -n {} exceed the context size {} (raise -c)",
                         session.n_past(), prompt.size(), o->n_predict, o->ctx));
    Utf8Stream out(stdout);
    out.write(o->prompt);
    const auto t0 = std::chrono::steady_clock::now();
    if (!prompt.empty()) session.feed(prompt, &logits);
    const auto t1 = std::chrono::steady_clock::now();
    if (!o->dump_logits.empty()) {
      std::FILE* f = std::fopen(o->dump_logits.c_str(), "wb");
      VQ_CHECK(f, fmt::format("{}: cannot write", o->dump_logits));
      const size_t written = std::fwrite(logits.data(), sizeof(float), logits.size(), f);
      const bool ok = std::fclose(f) == 0 && written == logits.size();
      VQ_CHECK_DATA(ok, fmt::format("{}: write failed", o->dump_logits));
    }
    eval::GenerationLimits limits;
    limits.n_predict = o->n_predict;
    limits.n_ctx = o->ctx;
    limits.feed_last = false;  // the last token's logits are needed only to save the session
    if (o->ignore_eos) limits.banned = eval::eog_tokens(tok);
    const eval::Generated gen = eval::generate_tokens(session, sampler, tok, model->config().n_vocab, &logits, limits,
                                                      [&](const std::string& piece) { out.write(piece); });
    const std::vector<int32_t>& generated = gen.ids;
    out.flush();
    std::printf("\n");
    const auto t2 = std::chrono::steady_clock::now();
    if (!o->save_cache.empty()) {
      // The saved state is the one an uninterrupted run would sample its next token from.
      if (!gen.last_fed && !generated.empty() && !tok.is_eog(generated.back())) session.feed({generated.back()}, &logits);
      save_current_session(o->save_cache, session, sampler, logits);
    }
    const double pf = std::chrono::duration<double>(t1 - t0).count();
    const double dc = std::chrono::duration<double>(t2 - t1).count();
    const auto mem = session.cache().memory();
    fmt::print(stderr, "\nprompt: {} tokens in {:.3f} s ({:.1f} tok/s); generated: {} tokens in {:.3f} s ({:.1f} tok/s)\n",
               prompt.size(), pf, prompt.size() / std::max(pf, 1e-9), generated.size(), dc, generated.size() / std::max(dc, 1e-9));
    fmt::print(stderr, "kv cache {}: {} bytes resident ({} in compressed blocks, {} fp16 window, {} sinks); "
               "{} tokens in the cache; peak RSS {:.1f} MiB\n",
               method.spec(), mem.total(), mem.block_bytes, mem.window_bytes, mem.sink_bytes, session.n_past(),
               peak_rss_bytes() / 1048576.0);
    if (o->show_ids) {
      std::string s;
      for (int32_t id : generated) s += (s.empty() ? "" : " ") + std::to_string(id);
      fmt::print(stderr, "ids: {}\n", s);
    }
    return 0;
  };
}

}  // namespace vq::cli
