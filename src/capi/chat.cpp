// The C API's chat templates: a conversation as prompt text in the model's template (as llama.cpp's
// built-in ones, src/engine/chat_template.h) or a named one, as `veloxquant chat` formats it.
#include <cstring>

#include "src/capi/handles.h"
#include "src/engine/chat_template.h"

using namespace vq::capi;

namespace {

// The template `name` names, or the model file's (as tools/veloxquant's --chat-template).
vq::engine::ChatTemplate template_for(const vq_model* model, const char* name) {
  if (name != nullptr && name[0] != '\0') return vq::engine::chat_template_from_name(name);
  const vq::engine::ChatTemplate t = vq::engine::model_chat_template(model->model->file());
  VQ_CHECK(t != vq::engine::ChatTemplate::kUnknown && vq::engine::chat_template_formats(t),
           fmt::format("{}: tokenizer.chat_template is not one of the templates formatted here; name one of: {}",
                       model->path, vq::engine::chat_template_names()));
  return t;
}

void copy_text(const std::string& s, char* text, size_t capacity, size_t* text_len) {
  *text_len = s.size();
  if (s.size() > capacity) {
    throw_buffer_too_small(fmt::format("text needs room for {} bytes, the buffer holds {}", s.size(), capacity));
  }
  if (!s.empty()) {
    require_ptr(text, "text");
    std::memcpy(text, s.data(), s.size());
  }
  if (capacity > s.size()) text[s.size()] = '\0';
}

}  // namespace

extern "C" {

VQ_API vq_status vq_chat_format(const vq_model* model, const char* template_name, const char* const* roles,
                                const char* const* contents, size_t n_messages, int add_generation_prompt, char* text,
                                size_t capacity, size_t* text_len) {
  return guard([&] {
    require_ptr(model, "model");
    require_ptr(text_len, "text_len");
    *text_len = 0;
    if (n_messages > 0) {
      require_ptr(roles, "roles");
      require_ptr(contents, "contents");
    }
    std::vector<vq::engine::ChatMessage> msgs;
    for (size_t i = 0; i < n_messages; ++i) {
      VQ_CHECK(roles[i] && contents[i], fmt::format("message {} has a NULL role or content", i));
      msgs.push_back({roles[i], contents[i]});
    }
    const vq::engine::ChatTemplate t = template_for(model, template_name);
    copy_text(vq::engine::format_chat(t, msgs, add_generation_prompt != 0), text, capacity, text_len);
  });
}

VQ_API vq_status vq_chat_turn_end(const vq_model* model, const char* template_name, char* text, size_t capacity,
                                  size_t* text_len) {
  return guard([&] {
    require_ptr(model, "model");
    require_ptr(text_len, "text_len");
    *text_len = 0;
    copy_text(vq::engine::chat_turn_end(template_for(model, template_name)), text, capacity, text_len);
  });
}

}  // extern "C"
