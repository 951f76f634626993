// The C API's sessions (a model with a compressed cache and a position), samplers, and the
// generation step `veloxquant generate` takes (src/eval/generation.cpp), one token per call.
#include <cmath>

#include "src/capi/handles.h"

using namespace vq::capi;

namespace {

void check_tokens(const vq_model* model, const int32_t* tokens, size_t n) {
  const int32_t n_vocab = model->model->config().n_vocab;
  for (size_t i = 0; i < n; ++i) {
    VQ_CHECK(tokens[i] >= 0 && tokens[i] < n_vocab,
             fmt::format("token {} (at {}) is outside the vocabulary [0, {})", tokens[i], i, n_vocab));
  }
}

}  // namespace

extern "C" {

VQ_API void vq_session_config_init(vq_session_config* config) {
  if (!config) return;
  *config = vq_session_config{};
  config->kv_spec = "fp16";
  config->n_ctx = 4096;
  config->ubatch = 512;
  config->kv_budget = VQ_KV_BUDGET_DEFAULT;
}

VQ_API vq_status vq_session_create(const vq_model* model, const vq_session_config* config, vq_session** out) {
  return guard([&] {
    require_ptr(out, "out");
    *out = nullptr;
    require_ptr(model, "model");
    require_ptr(config, "config");
    const vq_session_config& c = *config;
    const vq::engine::Model& m = *model->model;
    VQ_CHECK(c.n_ctx >= 1 && c.n_ctx <= m.config().n_ctx_train,
             fmt::format("n_ctx {} is outside [1, {}] (the model's context length)", c.n_ctx, m.config().n_ctx_train));
    VQ_CHECK(c.ubatch >= 1 && c.ubatch <= 65536, fmt::format("ubatch {} is outside [1, 65536]", c.ubatch));
    auto h = std::make_unique<vq_session>(model, method_with_calibration(c.kv_spec ? c.kv_spec : "fp16", c.calib_path, &m));
    const size_t budget = c.kv_budget == VQ_KV_BUDGET_DEFAULT ? vq::engine::default_kv_budget() : size_t(c.kv_budget);
    h->session = std::make_unique<vq::engine::Session>(m, h->method, c.n_ctx, c.ubatch, budget);
    *out = h.release();
  });
}

VQ_API void vq_session_free(vq_session* session) { delete session; }

VQ_API vq_status vq_session_feed(vq_session* session, const int32_t* tokens, size_t n_tokens) {
  return guard([&] {
    require_ptr(session, "session");
    if (n_tokens == 0) return;
    require_ptr(tokens, "tokens");
    check_tokens(session->model, tokens, n_tokens);
    session->session->feed(std::vector<int32_t>(tokens, tokens + n_tokens), &session->logits);
  });
}

VQ_API vq_status vq_session_logits(const vq_session* session, const float** logits, int32_t* n_vocab) {
  return guard([&] {
    require_ptr(session, "session");
    require_ptr(logits, "logits");
    VQ_CHECK(!session->logits.empty(), "no logits yet: feed tokens first");
    *logits = session->logits.data();
    if (n_vocab) *n_vocab = int32_t(session->logits.size());
  });
}

VQ_API vq_status vq_session_position(const vq_session* session, int64_t* n_past, int64_t* n_ctx) {
  return guard([&] {
    require_ptr(session, "session");
    if (n_past) *n_past = session->session->n_past();
    if (n_ctx) *n_ctx = session->session->n_ctx();
  });
}

VQ_API vq_status vq_session_memory(const vq_session* session, vq_memory* out) {
  return guard([&] {
    require_ptr(session, "session");
    require_ptr(out, "out");
    *out = to_c(session->session->cache().memory());
  });
}

VQ_API vq_status vq_session_clear(vq_session* session) {
  return guard([&] {
    require_ptr(session, "session");
    session->session->clear();
    session->logits.clear();
    session->detok.flush();
  });
}

VQ_API const char* vq_session_kv_spec(const vq_session* session) {
  return session ? session->method.spec().c_str() : "";
}

VQ_API void vq_sampler_config_init(vq_sampler_config* config) {
  if (!config) return;
  const vq::engine::SamplerParams d;
  config->temperature = d.temperature;
  config->top_k = d.top_k;
  config->top_p = d.top_p;
  config->min_p = d.min_p;
  config->seed = d.seed;
}

VQ_API vq_status vq_sampler_create(const vq_sampler_config* config, vq_sampler** out) {
  return guard([&] {
    require_ptr(out, "out");
    *out = nullptr;
    require_ptr(config, "config");
    // The CLI's ranges (`veloxquant generate --temp/--top-k/--top-p/--min-p`).
    VQ_CHECK(std::isfinite(config->temperature) && config->temperature >= 0 && config->temperature <= 100,
             fmt::format("temperature {} is outside [0, 100]", config->temperature));
    VQ_CHECK(config->top_k >= 0, fmt::format("top_k {} is negative", config->top_k));
    VQ_CHECK(config->top_p >= 0 && config->top_p <= 1, fmt::format("top_p {} is outside [0, 1]", config->top_p));
    VQ_CHECK(config->min_p >= 0 && config->min_p <= 1, fmt::format("min_p {} is outside [0, 1]", config->min_p));
    vq::engine::SamplerParams p;
    p.temperature = config->temperature;
    p.top_k = config->top_k;
    p.top_p = config->top_p;
    p.min_p = config->min_p;
    p.seed = config->seed;
    *out = new vq_sampler{vq::engine::Sampler(p)};
  });
}

VQ_API void vq_sampler_free(vq_sampler* sampler) { delete sampler; }

VQ_API vq_status vq_sampler_sample(vq_sampler* sampler, const float* logits, int32_t n_vocab, int32_t* token) {
  return guard([&] {
    require_ptr(sampler, "sampler");
    require_ptr(logits, "logits");
    require_ptr(token, "token");
    VQ_CHECK(n_vocab >= 1, fmt::format("n_vocab {} must be positive", n_vocab));
    *token = sampler->sampler.sample(logits, n_vocab);
  });
}

VQ_API vq_status vq_session_generate_step(vq_session* session, vq_sampler* sampler, int32_t* token, const char** text,
                                          size_t* text_len, int* done) {
  return guard([&] {
    require_ptr(session, "session");
    require_ptr(sampler, "sampler");
    require_ptr(token, "token");
    require_ptr(done, "done");
    *token = -1;
    *done = 0;
    if (text) *text = "";
    if (text_len) *text_len = 0;
    VQ_CHECK(!session->logits.empty(), "no logits to sample from: feed the prompt first");
    vq::engine::Session& s = *session->session;
    session->text.clear();
    if (s.n_past() >= s.n_ctx()) {
      *done = 1;
      session->text = session->detok.flush();
    } else {
      const int32_t id = sampler->sampler.sample(session->logits.data(), int64_t(session->logits.size()));
      *token = id;
      if (session->model->model->tokenizer().is_eog(id)) {
        *done = 1;
        session->text = session->detok.flush();
      } else {
        session->text = session->detok.push(id);
        s.feed({id}, &session->logits);
      }
    }
    if (text) *text = session->text.c_str();
    if (text_len) *text_len = session->text.size();
  });
}

VQ_API vq_status vq_session_flush_text(vq_session* session, const char** text, size_t* text_len) {
  return guard([&] {
    require_ptr(session, "session");
    require_ptr(text, "text");
    session->text = session->detok.flush();
    *text = session->text.c_str();
    if (text_len) *text_len = session->text.size();
  });
}

}  // extern "C"
