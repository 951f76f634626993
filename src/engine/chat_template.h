// Chat templates as llama.cpp's built-in ones: recognising a model's tokenizer.chat_template (Jinja
// text) by llama.cpp's substring heuristics, and turning a conversation into prompt text byte for
// byte as llama.cpp's llm_chat_apply_template does. No Jinja is evaluated.
// ref:
// https://github.com/TheTom/llama-cpp-turboquant/blob/69d8e4be47243e83b3d0d71e932bc7aa61c644dc/src/llama-chat.cpp
#pragma once

#include <string>
#include <vector>

namespace vq::engine {

class GgufFile;

// Every template llama.cpp recognises (its llm_chat_template), in llama.cpp's order. Those
// chat_template_formats() says no to are recognised but not formatted here.
// clang-format off
enum class ChatTemplate {
  kChatml, kLlama2, kLlama2Sys, kLlama2SysBos, kLlama2SysStrip, kMistralV1, kMistralV3,
  kMistralV3Tekken, kMistralV7, kMistralV7Tekken, kPhi3, kPhi4, kFalcon3, kZephyr, kMonarch,
  kGemma, kOrion, kOpenchat, kVicuna, kVicunaOrca, kDeepseek, kDeepseek2, kDeepseek3,
  kDeepseekOcr, kCommandR, kLlama3, kChatglm3, kChatglm4, kGlmedge, kMinicpm, kExaone3,
  kExaone4, kExaoneMoe, kRwkvWorld, kGranite, kGranite4, kGigachat, kMegrez, kYandex, kBailing,
  kBailingThink, kBailing2, kLlama4, kSmolvlm, kDots1, kHunyuanMoe, kGptOss, kHunyuanDense,
  kHunyuanOcr, kKimiK2, kSeedOss, kGrok2, kPanguEmbedded, kSolarOpen,
  kUnknown,
};
// clang-format on

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" (others pass through where llama.cpp's do)
  std::string content;
};

// llama.cpp's name ("chatml", "llama3", "mistral-v7", ...); "unknown" for kUnknown.
const char* chat_template_name(ChatTemplate t);
// Whether format_chat formats t.
bool chat_template_formats(ChatTemplate t);
// The names format_chat formats, sorted, ", "-separated (for messages).
std::string chat_template_names();

// The template of a name. An unknown name, or one of a template not formatted here, throws a
// one-line vq::Error (usage) listing the names.
ChatTemplate chat_template_from_name(const std::string& name);

// The template a tokenizer.chat_template text is, by llama.cpp's rules in llama.cpp's order (the
// text may also be a bare name, e.g. "chatml"); kUnknown when no rule matches.
ChatTemplate detect_chat_template(const std::string& jinja);
// The template whose llama.cpp name is exactly `text` (kUnknown: none), for detection.
ChatTemplate chat_template_bare_name(const std::string& text);

// A model file's template: its tokenizer.chat_template detected. A file without one is taken as
// Gemma's template when its architecture is a Gemma (gemma, gemma2, gemma3, ...), else as chatml
// (llama.cpp's fallback; llama.cpp uses chatml for Gemma files too). `how` (optional) says which.
ChatTemplate model_chat_template(const GgufFile& f, std::string* how = nullptr);

// The conversation as prompt text, as llama.cpp's llm_chat_apply_template(t, msgs, add_ass).
// Templates without a generation prompt (llama2, mistral, minicpm) ignore the flag, as there.
// Throws vq::Error (usage) for a template not formatted here.
std::string format_chat(ChatTemplate t, const std::vector<ChatMessage>& msgs,
                        bool add_generation_prompt);

// The text to feed for `added` when `history` is already in the cache (each assistant reply
// closed by chat_turn_end): format_chat(history + added) less format_chat(history, false). With
// an empty history, all of format_chat(added): text that a template puts before any message
// (llama2's "[INST] ", chatglm's "[gMASK]sop") then belongs to the first turn. Every template
// here formats a closed history as a prefix of any longer conversation (tested); a violation
// is an internal error.
std::string format_chat_turn(ChatTemplate t, const std::vector<ChatMessage>& history,
                             const std::vector<ChatMessage>& added, bool add_generation_prompt);

// What follows an assistant reply's content in format_chat (Gemma "<end_of_turn>\n", chatml
// "<|im_end|>\n", llama3 "<|eot_id|>", mistral "</s>"; "" for chatglm): what to feed after a
// generated reply so that the cache holds the formatted conversation. (Not quite for yandex: its
// generation prompt ends in "[SEP]", which its formatted replies lack, so the cache keeps one.)
std::string chat_turn_end(ChatTemplate t);

}  // namespace vq::engine
