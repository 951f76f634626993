#include "src/serve/request.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

namespace vq::serve {
namespace {

using json = nlohmann::json;

[[noreturn]] void bad(const std::string& message, const std::string& code = "invalid_value") {
  throw ApiError(400, "invalid_request_error", code, message);
}

// The field if present and not null; its type is the caller's to check.
const json* field(const json& j, const char* name) {
  const auto it = j.find(name);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

double number(const json& j, const char* name, double lo, double hi) {
  const json* f = field(j, name);
  if (!f) return NAN;
  if (!f->is_number()) bad(fmt::format("'{}' must be a number", name), "invalid_type");
  const double v = f->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) bad(fmt::format("'{}' must be in [{}, {}]", name, lo, hi));
  return v;
}

std::optional<int64_t> integer(const json& j, const char* name, int64_t lo, int64_t hi) {
  const json* f = field(j, name);
  if (!f) return std::nullopt;
  if (!f->is_number_integer()) bad(fmt::format("'{}' must be an integer", name), "invalid_type");
  const int64_t v = f->is_number_unsigned() && f->get<uint64_t>() > uint64_t(INT64_MAX) ? INT64_MAX : f->get<int64_t>();
  if (v < lo || v > hi) bad(fmt::format("'{}' must be in [{}, {}]", name, lo, hi));
  return v;
}

bool boolean(const json& j, const char* name, bool fallback) {
  const json* f = field(j, name);
  if (!f) return fallback;
  if (!f->is_boolean()) bad(fmt::format("'{}' must be true or false", name), "invalid_type");
  return f->get<bool>();
}

// A message's content: a string, or a list of {"type": "text", "text": ...} parts joined.
std::string content_text(const json& c) {
  if (c.is_string()) return c.get<std::string>();
  if (c.is_array()) {
    std::string s;
    for (const json& part : c) {
      if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string()) {
        bad("message content parts must be {\"type\": \"text\", \"text\": ...}", "invalid_type");
      }
      s += part["text"].get<std::string>();
    }
    return s;
  }
  bad("message 'content' must be a string or a list of text parts", "invalid_type");
}

}  // namespace

std::string error_body(const std::string& message, const std::string& type, const std::string& code) {
  return json{{"error", {{"message", message}, {"type", type}, {"code", code}, {"param", nullptr}}}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

Request parse_request(const std::string& body, bool chat) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception&) {
    bad("the request body is not valid JSON", "invalid_json");
  }
  if (!j.is_object()) bad("the request body must be a JSON object", "invalid_type");
  Request r;
  r.chat = chat;
  if (const json* m = field(j, "model")) {
    if (!m->is_string()) bad("'model' must be a string", "invalid_type");
    r.model = m->get<std::string>();
  }
  if (chat) {
    const json* msgs = field(j, "messages");
    if (!msgs) bad("'messages' is required", "missing_field");
    if (!msgs->is_array() || msgs->empty()) bad("'messages' must be a non-empty list", "invalid_type");
    for (const json& m : *msgs) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
        bad("each message needs a string 'role'", "invalid_type");
      }
      const std::string role = m["role"].get<std::string>();
      if (role != "system" && role != "user" && role != "assistant" && role != "developer") {
        bad(fmt::format("unsupported message role '{}'", role));
      }
      const json* c = field(m, "content");
      r.messages.push_back({role == "developer" ? "system" : role, c ? content_text(*c) : std::string()});
    }
  } else {
    const json* p = field(j, "prompt");
    if (!p) bad("'prompt' is required", "missing_field");
    if (p->is_string()) {
      r.prompt = p->get<std::string>();
    } else if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
      r.prompt = (*p)[0].get<std::string>();
    } else {
      bad("'prompt' must be a string (or a list of one string)", "invalid_type");
    }
    r.logprobs = int(integer(j, "logprobs", 0, 5).value_or(-1));
    r.echo = boolean(j, "echo", false);
  }
  // max_completion_tokens is the chat API's newer name for max_tokens.
  r.max_tokens = integer(j, "max_tokens", 0, int64_t(1) << 30);
  if (!r.max_tokens) r.max_tokens = integer(j, "max_completion_tokens", 0, int64_t(1) << 30);
  if (!r.max_tokens && !chat) r.max_tokens = 16;
  if (const auto n = integer(j, "n", 1, 128); n && *n != 1) bad("only n = 1 is supported", "unsupported_value");
  if (chat && boolean(j, "logprobs", false)) bad("logprobs on chat completions is not supported", "unsupported_value");
  for (const char* unsupported : {"tools", "functions", "response_format", "logit_bias", "suffix", "best_of"}) {
    if (const json* f = field(j, unsupported); f && !(f->is_array() && f->empty()) && !(f->is_object() && f->empty())) {
      bad(fmt::format("'{}' is not supported", unsupported), "unsupported_value");
    }
  }
  // llama-server's sampling defaults where the request is silent.
  engine::SamplerParams& s = r.sampling;
  s.temperature = 0.8f;
  if (const double t = number(j, "temperature", 0, 2); !std::isnan(t)) s.temperature = float(t);
  if (const double p = number(j, "top_p", 0, 1); !std::isnan(p)) s.top_p = float(p);
  if (const double p = number(j, "min_p", 0, 1); !std::isnan(p)) s.min_p = float(p);
  if (const auto k = integer(j, "top_k", 0, 1 << 24)) s.top_k = int(*k);
  if (const auto seed = integer(j, "seed", INT64_MIN, INT64_MAX)) {
    s.seed = uint64_t(*seed);
    r.seeded = true;
  } else {
    s.seed = std::random_device{}();
  }
  if (const json* st = field(j, "stop")) {
    if (st->is_string()) {
      r.stop.push_back(st->get<std::string>());
    } else if (st->is_array()) {
      for (const json& x : *st) {
        if (!x.is_string()) bad("'stop' must be a string or a list of strings", "invalid_type");
        r.stop.push_back(x.get<std::string>());
      }
    } else {
      bad("'stop' must be a string or a list of strings", "invalid_type");
    }
    if (r.stop.size() > 4) bad("'stop' takes at most 4 sequences");
    for (const auto& x : r.stop) {
      if (x.empty() || x.size() > 256) bad("each stop sequence must have 1 to 256 bytes");
    }
  }
  r.stream = boolean(j, "stream", false);
  if (const json* so = field(j, "stream_options")) {
    if (!so->is_object()) bad("'stream_options' must be an object", "invalid_type");
    r.include_usage = boolean(*so, "include_usage", false);
  }
  return r;
}

}  // namespace vq::serve
