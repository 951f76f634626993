// veloxquant serve: an OpenAI-compatible HTTP server over one model, many conversations at once in
// one compressed KV budget (src/serve/scheduler.h: continuous batching and prefix reuse).
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <string>

#include "src/core/threads.h"
#include "src/engine/model.h"
#include "src/serve/scheduler.h"
#include "tools/veloxquant/calibration_args.h"
#include "tools/veloxquant/cli_util.h"
#include "tools/veloxquant/commands.h"
#include "tools/veloxquant/serve_http.h"
#include "veloxquant/error.h"
#include "veloxquant/kv/method.h"

namespace vq::cli {

Runner add_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (completions, chat, streaming, /metrics)");
  struct Opts {
    std::string model, kv = "fp16", kv_budget, chat_template, max_body = "8M";
    bool mmap = false;
    int64_t ctx = 4096;
    int threads = 2, parallel = 16, ubatch = 512, queue = 64, timeout = 30;
    bool no_prefix_cache = false;
    HttpOptions http;
    std::vector<std::string> calib;
  };
  auto o = std::make_shared<Opts>();
  add_model_options(cmd, &o->model, &o->mmap);
  cmd->add_option("--kv", o->kv, "KV-cache method spec (see `veloxquant methods`)");
  cmd->add_option("--kv-budget", o->kv_budget,
                  "Bytes for all sequences' KV caches, e.g. 4G (0: no limit; default: 80% of available memory)");
  cmd->add_option("--host", o->http.host, "Address to listen on");
  cmd->add_option("--port", o->http.port, "Port")->check(CLI::Range(1, 65535));
  cmd->add_option("--parallel", o->parallel, "Sequences decoding at once")->check(CLI::Range(1, 1024));
  cmd->add_option("-c,--ctx", o->ctx, "Context size per sequence (tokens)")->check(CLI::Range(int64_t(16), int64_t(1) << 24));
  cmd->add_option("-t,--threads", o->threads, "Threads")->check(CLI::Range(1, 1024));
  cmd->add_option("--ubatch", o->ubatch, "Prompt micro-batch size (the most prompt tokens per pass)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--api-key", o->http.api_key, "Require 'Authorization: Bearer KEY' on every /v1 request");
  cmd->add_option("--queue", o->queue, "Requests that may wait for room before 503")->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--max-body", o->max_body, "Largest request body (413 above), e.g. 8M");
  cmd->add_option("--timeout", o->timeout, "Seconds to read a request or to write to a client")->check(CLI::Range(1, 3600));
  cmd->add_option("--chat-template", o->chat_template,
                  "Chat template, by llama.cpp's name (default: the model's tokenizer.chat_template)");
  cmd->add_flag("--no-prefix-cache", o->no_prefix_cache, "Do not keep finished conversations' caches for reuse");
  add_calib_option(cmd, &o->calib);
  cmd->callback([o]() {
    kv::parse_method(o->kv);
    if (!o->chat_template.empty()) engine::chat_template_from_name(o->chat_template);
  });
  return [o]() {
    set_num_threads(o->threads);
    const auto model = load_model(o->model, o->mmap);
    VQ_CHECK(o->ctx <= model->config().n_ctx_train,
             fmt::format("-c {} exceeds the model's context length {}", o->ctx, model->config().n_ctx_train));
    const kv::Method method = method_for_model(o->kv, o->calib, *model);
    serve::SchedulerOptions so;
    so.n_ctx = o->ctx;
    so.ubatch = o->ubatch;
    so.parallel = o->parallel;
    so.queue_limit = size_t(o->queue);
    so.kv_budget = kv_budget_bytes(o->kv_budget);
    so.prefix_cache = !o->no_prefix_cache;
    try {
      o->http.chat_template = chat_template_for(*model, o->chat_template);
    } catch (const Error& e) {
      fmt::print(stderr, "veloxquant serve: {} (chat completions will be refused)\n", e.what());
    }
    o->http.max_body_bytes = parse_bytes(o->max_body, "--max-body");
    o->http.timeout_s = o->timeout;
    o->http.http_threads = std::max(64, 4 * o->parallel);
    const std::string name = std::filesystem::path(o->model).filename().string();
    o->http.model_name = name;
    serve::Scheduler scheduler(*model, method, so);
    fmt::print(stderr, "veloxquant serve: {} with --kv {}, {} sequences at once, context {} each, KV budget {}\n",
               name, method.spec(), so.parallel, so.n_ctx,
               so.kv_budget ? fmt::format("{:.1f} MiB", so.kv_budget / 1048576.0) : std::string("unlimited"));
    serve_http(scheduler, o->http);
    return 0;
  };
}

}  // namespace vq::cli
