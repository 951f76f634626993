// The C API's perplexity: `veloxquant perplexity` for one method over text in memory, with the
// fields of its --json output (tools/veloxquant/cmd_perplexity.cpp).
#include <algorithm>

#include "src/capi/handles.h"
#include "src/eval/perplexity.h"
#include "src/kv/registry.h"

using namespace vq::capi;

extern "C" {

VQ_API void vq_perplexity_config_init(vq_perplexity_config* config) {
  if (!config) return;
  *config = vq_perplexity_config{};
  config->kv_spec = "fp16";
  config->n_ctx = 512;
  config->n_chunks = -1;
  config->ubatch = 512;
  config->kv_budget = VQ_KV_BUDGET_DEFAULT;
}

VQ_API vq_status vq_perplexity(const vq_model* model, const char* text, size_t text_len,
                               const vq_perplexity_config* config, vq_perplexity_result* out) {
  return guard([&] {
    require_ptr(model, "model");
    require_ptr(config, "config");
    require_ptr(out, "out");
    if (text_len > 0) require_ptr(text, "text");
    const vq_perplexity_config& c = *config;
    const vq::engine::Model& m = *model->model;
    const vq::kv::Method method = method_with_calibration(c.kv_spec ? c.kv_spec : "fp16", c.calib_path, &m);
    VQ_CHECK(c.n_ctx >= 8 && c.n_ctx <= m.config().n_ctx_train,
             fmt::format("n_ctx {} is outside [8, {}] (the model's context length)", c.n_ctx, m.config().n_ctx_train));
    VQ_CHECK(c.ubatch >= 1 && c.ubatch <= 65536, fmt::format("ubatch {} is outside [1, 65536]", c.ubatch));
    const std::vector<int32_t> tokens = m.tokenizer().encode(std::string(text ? text : "", text_len));
    VQ_CHECK(vq::eval::count_chunks(int64_t(tokens.size()), c.n_ctx, -1) > 0,
             fmt::format("the text has {} tokens, fewer than one chunk of {}", tokens.size(), c.n_ctx));
    vq::eval::PerplexityRun run;
    run.n_ctx = c.n_ctx;
    run.n_chunks = vq::eval::count_chunks(int64_t(tokens.size()), c.n_ctx, c.n_chunks < 0 ? -1 : c.n_chunks);
    VQ_CHECK(run.n_chunks > 0, "n_chunks is 0: nothing to score");
    run.ubatch = c.ubatch;
    run.kv_budget = c.kv_budget == VQ_KV_BUDGET_DEFAULT ? vq::engine::default_kv_budget() : size_t(c.kv_budget);
    const auto progress = [&](int64_t done, const std::vector<vq::eval::PerplexityTally>& tallies) {
      if (c.progress) c.progress(done, run.n_chunks, tallies[0].ppl(), c.progress_user);
    };
    const std::vector<vq::eval::PerplexityTally> tallies = vq::eval::run_perplexity(m, {method}, tokens, run, progress);
    const vq::eval::PerplexityScore s = vq::eval::score(tallies[0]);
    const int head_dim = m.config().head_dim;
    vq_perplexity_result r{};
    r.ctx = c.n_ctx;
    r.chunks = run.n_chunks;
    r.tokens_scored = s.tokens_scored;
    r.ppl = s.ppl;
    r.ppl_stderr = s.ppl_stderr;
    r.kv_bits_per_element = method.bits_per_element(head_dim);
    r.kv_key_bits = method.keys().key_bits(head_dim);
    r.kv_value_bits = method.values().value_bits(head_dim);
    r.kv_window_tokens = method.window_tokens();
    r.kv_sink_tokens = method.sink_tokens();
    r.compared = s.compared ? 1 : 0;
    if (s.compared) {
      r.kl_mean = s.kl_mean;
      r.kl_p99 = s.kl_p99;
      r.top1_agreement = s.top1_agreement;
      r.ppl_fp16 = s.ppl_fp16;
    }
    *out = r;
  });
}

VQ_API vq_status vq_perplexity_bits_counted(const vq_perplexity_result* result, double* bits) {
  return guard([&] {
    require_ptr(result, "result");
    require_ptr(bits, "bits");
    VQ_CHECK(result->ctx >= 1 && result->kv_window_tokens >= 0 && result->kv_sink_tokens >= 0,
             "result: not one of vq_perplexity's (ctx below one token, or negative fp16 tokens)");
    *bits = vq::kv::bits_with_fp16_tokens(result->kv_bits_per_element,
                                          int64_t(result->kv_window_tokens) + result->kv_sink_tokens, result->ctx);
  });
}

}  // extern "C"
