// The OpenAI-style requests the server takes (POST /v1/completions and /v1/chat/completions),
// parsed and checked: every field is typed and ranged, and anything wrong becomes an ApiError that
// the server turns into a 400 (or other) response with an OpenAI error object.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/engine/chat_template.h"
#include "src/engine/sampler.h"

namespace vq::serve {

// An error a client gets back: HTTP status, OpenAI's error type and code, and a one-line message.
struct ApiError : std::runtime_error {
  ApiError(int http_status, std::string error_type, std::string error_code, const std::string& message)
      : std::runtime_error(message), status(http_status), type(std::move(error_type)), code(std::move(error_code)) {}
  int status;
  std::string type, code;
};

// {"error": {"message", "type", "code", "param": null}} as text.
std::string error_body(const std::string& message, const std::string& type, const std::string& code);

struct Request {
  bool chat = false;
  std::string prompt;                          // completions
  std::vector<engine::ChatMessage> messages;   // chat
  // Unset: completions 16 tokens (OpenAI's default), chat until the end of the reply or the context.
  std::optional<int64_t> max_tokens;
  engine::SamplerParams sampling;              // llama-server's defaults where the client is silent
  bool seeded = false;                         // whether the client gave a seed
  std::vector<std::string> stop;               // at most 4, none empty
  bool stream = false;
  bool include_usage = false;                  // stream_options.include_usage
  int logprobs = -1;                           // completions: top alternatives per token (0-5); -1: none
  bool echo = false;                           // completions: the prompt before the text
  std::string model;                           // echoed back
};

// Parses a request body. chat picks the endpoint's schema. Throws ApiError (400) for bad JSON, a
// missing or mistyped field, a value out of range, or an unsupported option (n > 1, tools, ...).
Request parse_request(const std::string& body, bool chat);

}  // namespace vq::serve
