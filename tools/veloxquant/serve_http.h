// The HTTP side of `veloxquant serve`: OpenAI's endpoints on cpp-httplib over a Scheduler.
#pragma once

#include <string>

#include "src/engine/chat_template.h"
#include "src/serve/scheduler.h"

namespace vq::cli {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;           // empty: no key asked
  std::string model_name;        // what /v1/models lists and responses name
  engine::ChatTemplate chat_template = engine::ChatTemplate::kUnknown;
  size_t max_body_bytes = 8 << 20;
  int timeout_s = 30;            // reading a request, or writing to a client that does not read
  int http_threads = 64;
};

// Serves until the process is stopped (or the port cannot be bound: a vq::Error).
void serve_http(serve::Scheduler& scheduler, const HttpOptions& options);

}  // namespace vq::cli
