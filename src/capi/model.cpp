// The C API's models: loading a GGUF file, its shape, and its tokenizer both ways.
#include <cstring>

#include "src/capi/handles.h"

using namespace vq::capi;

namespace {

// Copies `n` items into a caller's buffer of `capacity`, or says how many are needed.
template <class T>
void copy_out(const T* src, size_t n, T* dst, size_t capacity, size_t* n_out, const char* what) {
  *n_out = n;
  if (n > capacity) {
    throw_buffer_too_small(fmt::format("{} needs room for {}, the buffer holds {}", what, n, capacity));
  }
  if (n > 0) {
    require_ptr(dst, what);
    std::memcpy(dst, src, n * sizeof(T));
  }
}

}  // namespace

extern "C" {

VQ_API vq_status vq_model_load(const char* path, vq_model** out) {
  return guard([&] {
    require_ptr(out, "out");
    *out = nullptr;
    require_readable(path, "path");
    auto h = std::make_unique<vq_model>();
    h->path = path;
    h->model = vq::engine::Model::load(path);
    h->name = h->model->file().get_string("general.name", "");
    *out = h.release();
  });
}

VQ_API void vq_model_free(vq_model* model) { delete model; }

VQ_API vq_status vq_model_get_info(const vq_model* model, vq_model_info* out) {
  return guard([&] {
    require_ptr(model, "model");
    require_ptr(out, "out");
    const vq::engine::ModelConfig& c = model->model->config();
    const vq::engine::Tokenizer& tok = model->model->tokenizer();
    *out = vq_model_info{};
    out->arch = c.arch.c_str();
    out->name = model->name.c_str();
    out->n_vocab = c.n_vocab;
    out->n_layer = c.n_layer;
    out->n_embd = c.n_embd;
    out->n_head = c.n_head;
    out->n_kv_head = c.n_head_kv;
    out->head_dim = c.head_dim;
    out->n_ctx_train = c.n_ctx_train;
    out->bos = tok.bos();
    out->eos = tok.eos();
    out->eot = tok.eot();
  });
}

VQ_API vq_status vq_tokenize(const vq_model* model, const char* text, size_t text_len, int add_special,
                             int parse_special, int32_t* tokens, size_t capacity, size_t* n_tokens) {
  return guard([&] {
    require_ptr(model, "model");
    require_ptr(n_tokens, "n_tokens");
    *n_tokens = 0;
    if (text_len > 0) require_ptr(text, "text");
    const std::vector<int32_t> ids =
        model->model->tokenizer().encode(std::string(text ? text : "", text_len), add_special != 0, parse_special != 0);
    copy_out(ids.data(), ids.size(), tokens, capacity, n_tokens, "tokens");
  });
}

VQ_API vq_status vq_detokenize(const vq_model* model, const int32_t* tokens, size_t n_tokens, int special, char* text,
                               size_t capacity, size_t* text_len) {
  return guard([&] {
    require_ptr(model, "model");
    require_ptr(text_len, "text_len");
    *text_len = 0;
    if (n_tokens > 0) require_ptr(tokens, "tokens");
    const vq::engine::Tokenizer& tok = model->model->tokenizer();
    for (size_t i = 0; i < n_tokens; ++i) {
      VQ_CHECK(tokens[i] >= 0 && tokens[i] < tok.n_vocab(),
               fmt::format("token {} (at {}) is outside the vocabulary [0, {})", tokens[i], i, tok.n_vocab()));
    }
    const std::string s = tok.decode(std::vector<int32_t>(tokens, tokens + n_tokens), special != 0);
    copy_out(s.data(), s.size(), text, capacity, text_len, "text");
    if (capacity > s.size()) text[s.size()] = '\0';
  });
}

VQ_API int vq_token_is_eog(const vq_model* model, int32_t token) {
  if (!model || token < 0 || token >= model->model->tokenizer().n_vocab()) return 0;
  return model->model->tokenizer().is_eog(token) ? 1 : 0;
}

}  // extern "C"
