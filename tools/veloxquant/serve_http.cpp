#include "tools/veloxquant/serve_http.h"

#include <fmt/format.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>

#include "src/serve/request.h"
#include "veloxquant/error.h"

namespace vq::cli {
namespace {

using json = nlohmann::json;
using serve::ApiError;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_error(httplib::Response& res, int status, const std::string& type, const std::string& code,
                const std::string& message) {
  res.status = status;
  res.set_content(serve::error_body(message, type, code), "application/json");
}

json usage_json(const serve::Job& job) {
  return {{"prompt_tokens", job.prompt_tokens},
          {"completion_tokens", job.completion_tokens},
          {"total_tokens", job.prompt_tokens + job.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", job.cached_tokens}}}};
}

// The legacy completions logprobs object for a run of tokens; offset: the text's length before them.
json logprobs_json(const std::vector<serve::TokenLogprob>& lps, size_t offset) {
  json tokens = json::array(), lp = json::array(), top = json::array(), off = json::array();
  for (const auto& t : lps) {
    tokens.push_back(t.token);
    lp.push_back(t.logprob);
    json alts = json::object();
    for (const auto& [s, v] : t.top) {
      if (!alts.contains(s)) alts[s] = v;
    }
    top.push_back(alts);
    off.push_back(offset);
    offset += t.token.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", lp}, {"top_logprobs", top}, {"text_offset", off}};
}

class Api {
 public:
  Api(serve::Scheduler& s, const HttpOptions& o) : sched_(s), opt_(o) {}

  bool authorized(const httplib::Request& req, httplib::Response& res) const {
    if (opt_.api_key.empty()) return true;
    if (req.get_header_value("Authorization") == "Bearer " + opt_.api_key) return true;
    send_error(res, 401, "invalid_request_error", "invalid_api_key", "a missing or wrong API key");
    return false;
  }

  void completions(const httplib::Request& req, httplib::Response& res, bool chat) {
    if (!authorized(req, res)) return;
    const serve::Request r = serve::parse_request(req.body, chat);
    const auto& tok = sched_.model().tokenizer();
    serve::Job::Params p;
    if (chat) {
      if (!engine::chat_template_formats(opt_.chat_template)) {
        throw ApiError(400, "invalid_request_error", "unsupported_value",
                       "the model has no supported chat template (start the server with --chat-template NAME)");
      }
      const std::string text = engine::format_chat(opt_.chat_template, r.messages, /*add_generation_prompt=*/true);
      p.prompt = tok.encode(text, /*add_special=*/true, /*parse_special=*/true);
    } else {
      p.prompt = tok.encode(r.prompt, /*add_special=*/true);
    }
    // A prompt that leaves no room is refused by submit.
    const int64_t room = std::max<int64_t>(0, sched_.options().n_ctx - int64_t(p.prompt.size()));
    p.max_new = std::min(r.max_tokens.value_or(room), room);
    p.sampling = r.sampling;
    p.stop = r.stop;
    p.logprobs = r.logprobs;
    auto job = std::make_shared<serve::Job>(std::move(p));
    sched_.submit(job);
    const std::string id = fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", ++serial_);
    const int64_t created = int64_t(std::time(nullptr));
    const std::string echo = r.echo ? r.prompt : std::string();
    const json base = {{"id", id}, {"created", created}, {"model", opt_.model_name}};
    if (r.stream) {
      stream(res, job, base, chat, r.include_usage, echo, r.logprobs >= 0);
    } else {
      whole(res, job, base, chat, echo, r.logprobs >= 0);
    }
  }

 private:
  // One JSON body at the end. While the job runs a space goes out every half second (JSON allows
  // leading white space), so that a client that has gone away is noticed and its job cancelled.
  void whole(httplib::Response& res, const std::shared_ptr<serve::Job>& job, const json& base, bool chat,
             const std::string& echo, bool logprobs) {
    res.set_chunked_content_provider(
        "application/json",
        [job, base, chat, echo, logprobs](size_t, httplib::DataSink& sink) {
          std::string text = echo;
          std::vector<serve::TokenLogprob> lps;
          std::vector<serve::Chunk> chunks;
          while (job->next(&chunks, std::chrono::milliseconds(500))) {
            for (auto& c : chunks) {
              text += c.text;
              lps.insert(lps.end(), c.logprobs.begin(), c.logprobs.end());
            }
            if (chunks.empty() && !sink.write(" ", 1)) {
              job->cancel();
              return false;
            }
            chunks.clear();
          }
          json out = base;
          if (!job->error.empty()) {
            out = json::parse(serve::error_body(job->error, "server_error", "internal_error"));
          } else if (chat) {
            out["object"] = "chat.completion";
            out["choices"] = json::array({{{"index", 0},
                                           {"message", {{"role", "assistant"}, {"content", text}}},
                                           {"logprobs", nullptr},
                                           {"finish_reason", job->finish_reason}}});
            out["usage"] = usage_json(*job);
          } else {
            out["object"] = "text_completion";
            out["choices"] = json::array({{{"index", 0},
                                           {"text", text},
                                           {"logprobs", logprobs ? logprobs_json(lps, echo.size()) : json(nullptr)},
                                           {"finish_reason", job->finish_reason}}});
            out["usage"] = usage_json(*job);
          }
          const std::string body = dump(out);
          sink.write(body.data(), body.size());
          sink.done();
          return true;
        },
        [job](bool) { job->cancel(); });  // a no-op for a finished job
  }

  // Server-sent events: a chunk per piece of text, then the finish reason, the usage if asked
  // for, and [DONE]. A failed write means the client left: the job is cancelled.
  void stream(httplib::Response& res, const std::shared_ptr<serve::Job>& job, const json& base, bool chat,
              bool include_usage, const std::string& echo, bool logprobs) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [job, base, chat, include_usage, echo, logprobs](size_t, httplib::DataSink& sink) {
          const auto send = [&sink](const json& j) {
            const std::string s = "data: " + dump(j) + "\n\n";
            return sink.write(s.data(), s.size());
          };
          const auto chunk = [&](const std::string& text, const std::vector<serve::TokenLogprob>& lps,
                                 const json& finish, size_t offset) {
            json out = base;
            if (chat) {
              out["object"] = "chat.completion.chunk";
              json delta = json::object();
              if (!text.empty()) delta["content"] = text;
              out["choices"] = json::array({{{"index", 0}, {"delta", delta}, {"logprobs", nullptr},
                                             {"finish_reason", finish}}});
            } else {
              out["object"] = "text_completion";
              out["choices"] = json::array({{{"index", 0}, {"text", text},
                                             {"logprobs", logprobs && !lps.empty() ? logprobs_json(lps, offset) : json(nullptr)},
                                             {"finish_reason", finish}}});
            }
            return send(out);
          };
          size_t offset = echo.size();
          bool ok = true;
          if (chat) {
            json first = base;
            first["object"] = "chat.completion.chunk";
            first["choices"] = json::array({{{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}},
                                             {"logprobs", nullptr}, {"finish_reason", nullptr}}});
            ok = send(first);
          } else if (!echo.empty()) {
            ok = chunk(echo, {}, nullptr, 0);
          }
          std::vector<serve::Chunk> chunks;
          while (ok && job->next(&chunks, std::chrono::milliseconds(500))) {
            for (const auto& c : chunks) {
              ok = ok && chunk(c.text, c.logprobs, nullptr, offset);
              offset += c.text.size();
            }
            chunks.clear();
          }
          if (!ok) {
            job->cancel();
            return false;
          }
          if (!job->error.empty()) {
            send(json::parse(serve::error_body(job->error, "server_error", "internal_error")));
          } else {
            chunk("", {}, job->finish_reason, offset);
            if (include_usage) {
              json u = base;
              u["object"] = chat ? "chat.completion.chunk" : "text_completion";
              u["choices"] = json::array();
              u["usage"] = usage_json(*job);
              send(u);
            }
          }
          const std::string done = "data: [DONE]\n\n";
          sink.write(done.data(), done.size());
          sink.done();
          return true;
        },
        [job](bool) { job->cancel(); });
  }

  serve::Scheduler& sched_;
  const HttpOptions& opt_;
  std::atomic<uint64_t> serial_{0};
};

std::string metrics_text(const serve::Scheduler& s) {
  const serve::Metrics m = s.metrics();
  std::string out;
  const auto gauge = [&out](const char* name, const char* help, const std::string& type, double v,
                            const std::string& labels = "") {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{}{} {}\n", name, help, name, type, name, labels, v);
  };
  out += "# HELP veloxquant_kv_bytes KV cache bytes resident (active and kept sequences), by part\n"
         "# TYPE veloxquant_kv_bytes gauge\n";
  out += fmt::format("veloxquant_kv_bytes{{part=\"blocks\"}} {}\n", m.block_bytes);
  out += fmt::format("veloxquant_kv_bytes{{part=\"window\"}} {}\n", m.window_bytes);
  out += fmt::format("veloxquant_kv_bytes{{part=\"sinks\"}} {}\n", m.sink_bytes);
  out += fmt::format("veloxquant_kv_bytes{{part=\"params\"}} {}\n", m.param_bytes);
  gauge("veloxquant_kv_budget_bytes", "the --kv-budget (0: no limit)", "gauge", double(m.budget_bytes));
  gauge("veloxquant_kv_reserved_bytes", "bytes promised to active sequences plus kept caches", "gauge",
        double(m.reserved_bytes));
  gauge("veloxquant_sequences_active", "sequences prefilling or decoding", "gauge", double(m.active));
  gauge("veloxquant_sequences_queued", "requests waiting for room", "gauge", double(m.queued));
  gauge("veloxquant_sequences_kept", "finished conversations' caches kept for prefix reuse", "gauge", double(m.kept));
  gauge("veloxquant_requests_total", "requests admitted", "counter", double(m.requests));
  gauge("veloxquant_prompt_tokens_total", "prompt tokens of admitted requests", "counter", double(m.prompt_tokens));
  gauge("veloxquant_prompt_tokens_reused_total", "prompt tokens taken from kept caches (not prefilled)", "counter",
        double(m.prompt_tokens_reused));
  gauge("veloxquant_generated_tokens_total", "tokens generated", "counter", double(m.generated_tokens));
  gauge("veloxquant_prefill_seconds_total", "time in passes, the prompt tokens' share", "counter", m.prefill_seconds);
  gauge("veloxquant_decode_seconds_total", "time in passes, the decoded tokens' share", "counter", m.decode_seconds);
  gauge("veloxquant_decode_tokens_per_second", "generated tokens per second of decode time", "gauge",
        m.decode_seconds > 0 ? double(m.generated_tokens) / m.decode_seconds : 0.0);
  gauge("veloxquant_forward_passes_total", "batched forward passes", "counter", double(m.passes));
  return out;
}

}  // namespace

void serve_http(serve::Scheduler& scheduler, const HttpOptions& o) {
  httplib::Server svr;
  Api api(scheduler, o);
  const int threads = o.http_threads;
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  svr.set_payload_max_length(o.max_body_bytes);
  svr.set_read_timeout(o.timeout_s, 0);
  svr.set_write_timeout(o.timeout_s, 0);
  svr.set_keep_alive_timeout(5);

  const auto guarded = [](auto&& fn) {
    return [fn](const httplib::Request& req, httplib::Response& res) {
      try {
        fn(req, res);
      } catch (const ApiError& e) {
        send_error(res, e.status, e.type, e.code, e.what());
        if (e.status == 503) res.set_header("Retry-After", "1");
      } catch (const Error& e) {
        send_error(res, e.kind() == ErrorKind::kInternal ? 500 : 400, "invalid_request_error", "invalid_value", e.what());
      } catch (const std::exception& e) {
        send_error(res, 500, "server_error", "internal_error", e.what());
      }
    };
  };
  svr.Post("/v1/completions", guarded([&](const auto& req, auto& res) { api.completions(req, res, false); }));
  svr.Post("/v1/chat/completions", guarded([&](const auto& req, auto& res) { api.completions(req, res, true); }));
  svr.Get("/v1/models", guarded([&](const httplib::Request& req, httplib::Response& res) {
            if (!api.authorized(req, res)) return;
            const json j = {{"object", "list"},
                            {"data", json::array({{{"id", o.model_name}, {"object", "model"}, {"created", 0},
                                                   {"owned_by", "veloxquant"}}})}};
            res.set_content(dump(j), "application/json");
          }));
  svr.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{\"status\":\"ok\"}", "application/json");
  });
  svr.Get("/metrics", guarded([&](const httplib::Request& req, httplib::Response& res) {
            if (!api.authorized(req, res)) return;
            res.set_content(metrics_text(scheduler), "text/plain; version=0.0.4");
          }));
  svr.Post("/tokenize", guarded([&](const httplib::Request& req, httplib::Response& res) {
             if (!api.authorized(req, res)) return;
             json j;
             try {
               j = json::parse(req.body);
             } catch (const json::exception&) {
               throw ApiError(400, "invalid_request_error", "invalid_json", "the request body is not valid JSON");
             }
             if (!j.is_object() || !j.contains("content") || !j["content"].is_string()) {
               throw ApiError(400, "invalid_request_error", "invalid_type", "'content' must be a string");
             }
             const bool special = j.value("add_special", false);
             const auto ids = scheduler.model().tokenizer().encode(j["content"].get<std::string>(), special, true);
             res.set_content(dump({{"tokens", ids}}), "application/json");
           }));
  // Statuses the library sets itself (404, 413, 400 for a malformed request line) get an error
  // object too.
  svr.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    const std::string code = res.status == 404 ? "not_found" : res.status == 413 ? "payload_too_large" : "bad_request";
    res.set_content(serve::error_body(fmt::format("HTTP {}", res.status), "invalid_request_error", code),
                    "application/json");
  });
  VQ_CHECK(svr.bind_to_port(o.host, o.port), fmt::format("cannot listen on {}:{}", o.host, o.port));
  fmt::print(stderr, "veloxquant serve: listening on http://{}:{}\n", o.host, o.port);
  svr.listen_after_bind();
}

}  // namespace vq::cli
