// `veloxquant chat`: a multi-turn conversation on stdin/stdout in the model's chat template (as
// llama.cpp's built-in ones: detected from tokenizer.chat_template, or --chat-template NAME). The
// KV cache is kept across turns: each turn feeds only its new text, and each reply is closed with
// the template's end of turn, so the cache holds the formatted conversation.
#include <fmt/format.h>
#include <unistd.h>

#include <iostream>
#include <string>

#include "src/core/threads.h"
#include "src/engine/chat_template.h"
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
namespace {

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r\n");
  return s.substr(a, b - a + 1);
}


}  // namespace

Runner add_chat_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("chat", "Chat with a model on stdin/stdout (one user message per line)");
  struct Opts {
    std::string model, kv = "fp16", system, chat_template;
    bool mmap = false;
    std::string kv_budget, save_cache, load_cache;
    std::vector<std::string> calib;
    int n_predict = 512, threads = 2, ubatch = 512;
    int64_t ctx = 4096;
    engine::SamplerParams sp;
  };
  auto o = std::make_shared<Opts>();
  o->sp.temperature = 0.0f;
  add_model_options(cmd, &o->model, &o->mmap);
  cmd->add_option("--kv", o->kv, "KV-cache method spec");
  cmd->add_option("--kv-budget", o->kv_budget, "Largest KV cache allowed, e.g. 2G (0: no limit; default: 80% of available memory)");
  cmd->add_option("--system", o->system, "System message before the first user message (Gemma's template puts it in that message)");
  cmd->add_option("--chat-template", o->chat_template,
                  "Chat template, by llama.cpp's name (default: the model's tokenizer.chat_template)");
  cmd->add_option("-n,--n-predict", o->n_predict, "Most tokens per reply")->check(CLI::Range(1, 1 << 24));
  cmd->add_option("-c,--ctx", o->ctx, "Context size (tokens)")->check(CLI::Range(int64_t(16), int64_t(1) << 24));
  cmd->add_option("-t,--threads", o->threads, "Threads")->check(CLI::Range(1, 1024));
  cmd->add_option("--seed", o->sp.seed, "Sampling seed");
  cmd->add_option("--temp", o->sp.temperature, "Temperature (0: greedy)")->check(CLI::Range(0.0f, 100.0f));
  cmd->add_option("--top-k", o->sp.top_k, "Top-k (0: off)")->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--top-p", o->sp.top_p, "Top-p (1: off)")->check(CLI::Range(0.0f, 1.0f));
  cmd->add_option("--min-p", o->sp.min_p, "Min-p (0: off)")->check(CLI::Range(0.0f, 1.0f));
  cmd->add_option("--save-cache", o->save_cache, "Save the conversation (compressed cache, sampler) after every turn");
  cmd->add_option("--load-cache", o->load_cache, "Continue a conversation saved with --save-cache");
  add_calib_option(cmd, &o->calib);
  cmd->callback([o]() {
    kv::parse_method(o->kv);
    if (!o->chat_template.empty()) engine::chat_template_from_name(o->chat_template);
  });
  const auto kv_given = [cmd]() { return cmd->count("--kv") > 0; };
  return [o, kv_given]() {
    set_num_threads(o->threads);
    const auto model = load_model(o->model, o->mmap);
    const engine::ChatTemplate tmpl = chat_template_for(*model, o->chat_template);
    VQ_CHECK(o->ctx <= model->config().n_ctx_train,
             fmt::format("-c {} exceeds the model's context length {}", o->ctx, model->config().n_ctx_train));
    const SavedSession saved_session = open_saved_session(o->load_cache, o->kv, kv_given());
    const auto& saved = saved_session.file;
    const kv::Method method = method_for_model(saved_session.spec, o->calib, *model);
    engine::Session session(*model, method, o->ctx, o->ubatch, kv_budget_bytes(o->kv_budget));
    engine::Sampler sampler(o->sp);
    std::vector<float> logits;
    if (saved) restore_saved_session(*saved, session, sampler, &logits);
    const auto& tok = model->tokenizer();
    const bool interactive = isatty(STDIN_FILENO);
    Utf8Stream out(stdout);
    std::string line;
    bool first = !saved;  // a loaded conversation already has its BOS and system message
    // The conversation in the cache. A loaded one's text is not saved, only that it ends with a
    // closed reply, which is all a new turn's text depends on (chat_template_test holds that).
    std::vector<engine::ChatMessage> history;
    if (saved) history = {{"user", ""}, {"assistant", ""}};
    const std::vector<int32_t> turn_end = tok.encode(engine::chat_turn_end(tmpl), false, true);
    while (true) {
      if (interactive) fmt::print("> "), std::fflush(stdout);
      if (!std::getline(std::cin, line)) break;
      const std::string msg = trim(line);
      if (msg.empty()) continue;
      std::vector<engine::ChatMessage> added;
      if (first && !trim(o->system).empty()) added.push_back({"system", trim(o->system)});
      added.push_back({"user", msg});
      const std::string turn = engine::format_chat_turn(tmpl, history, added, /*add_generation_prompt=*/true);
      std::vector<int32_t> ids = tok.encode(turn, /*add_special=*/first, /*parse_special=*/true);
      first = false;
      if (session.n_past() + int64_t(ids.size()) + 2 > o->ctx) {
        fmt::print(stderr, "context full ({} of {} tokens): start a new chat or raise -c\n", session.n_past(), o->ctx);
        break;
      }
      session.feed(ids, &logits);
      history.insert(history.end(), added.begin(), added.end());
      std::string reply;
      eval::GenerationLimits limits;
      limits.n_predict = o->n_predict;
      limits.n_ctx = o->ctx;
      eval::generate_tokens(session, sampler, tok, model->config().n_vocab, &logits, limits,
                            [&](const std::string& piece) {
                              reply += piece;
                              out.write(piece);
                            });
      out.flush();
      fmt::print("\n");
      std::fflush(stdout);
      history.push_back({"assistant", reply});
      // Close the reply in the cache so the next turn follows the template.
      if (!turn_end.empty() && session.n_past() + int64_t(turn_end.size()) <= o->ctx) session.feed(turn_end, &logits);
      if (!o->save_cache.empty()) {
        save_current_session(o->save_cache, session, sampler, logits);
      }
    }
    return 0;
  };
}

}  // namespace vq::cli
