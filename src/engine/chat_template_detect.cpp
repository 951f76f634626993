// Chat templates recognized from a model's Jinja text: llama.cpp's rules as an ordered table of
// substrings (the formats themselves are in chat_template.cpp).
#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "src/engine/chat_template.h"
#include "src/engine/gguf.h"

namespace vq::engine {
namespace {

using T = ChatTemplate;

// ---- Recognition ----

// One rule: the text contains every string. Rules are tried in order; the first match wins.
// This is llama.cpp's llm_chat_detect_template with its nested branches flattened (a branch
// "A: B ? x : y" becomes the rules {A, B} -> x, {A} -> y; "A or B" two rules).
struct Rule {
  std::vector<const char*> all;
  ChatTemplate t;
};

const Rule kBeforeInst[] = {
    {{"<|im_start|>", "<|im_sep|>"}, T::kPhi4},
    {{"<|im_start|>", "<end_of_utterance>"}, T::kSmolvlm},  // SmolVLM's BOS is <|im_start|>
    {{"<|im_start|>"}, T::kChatml},
};

const Rule kAfterInst[] = {
    {{"<|assistant|>", "<|end|>"}, T::kPhi3},
    {{"[gMASK]<sop>"}, T::kChatglm4},
    {{"<|assistant|>", "<|user|>", "<|tool_declare|>"}, T::kExaoneMoe},
    {{"<|assistant|>", "<|user|>", "</s>"}, T::kFalcon3},
    {{"<|assistant|>", "<|user|>"}, T::kGlmedge},
    {{"<|{{ item['role'] }}|>", "<|begin_of_image|>"}, T::kGlmedge},
    {{"<|user|>", "<|endoftext|>"}, T::kZephyr},
    {{"bos_token + message['role']"}, T::kMonarch},
    {{"<start_of_turn>"}, T::kGemma},
    {{"'\\n\\nAssistant: ' + eos_token"}, T::kOrion},
    {{"GPT4 Correct "}, T::kOpenchat},
    {{"USER: ", "ASSISTANT: ", "SYSTEM: "}, T::kVicunaOrca},
    {{"USER: ", "ASSISTANT: "}, T::kVicuna},
    {{"### Instruction:", "<|EOT|>"}, T::kDeepseek},
    {{"<|START_OF_TURN_TOKEN|>", "<|USER_TOKEN|>"}, T::kCommandR},
    {{"<|start_header_id|>", "<|end_header_id|>"}, T::kLlama3},
    {{"[gMASK]sop"}, T::kChatglm3},
    {{"<用户>"}, T::kMinicpm},
    {{"'Assistant: ' + message['content'] + eos_token"}, T::kDeepseek2},
    {{"<｜Assistant｜>", "<｜User｜>", "<｜end▁of▁sentence｜>"}, T::kDeepseek3},
    {{"[|system|]", "[|assistant|]", "[|endofturn|]", "[|tool|]"}, T::kExaone4},
    {{"[|system|]", "[|assistant|]", "[|endofturn|]"}, T::kExaone3},
    {{"rwkv-world"}, T::kRwkvWorld},
    {{"{{- 'User: ' + message['content']|trim + '\\n\\n' -}}"}, T::kRwkvWorld},
    {{"<|start_of_role|>", "<tool_call>"}, T::kGranite4},
    {{"<|start_of_role|>", "<tools>"}, T::kGranite4},
    {{"<|start_of_role|>"}, T::kGranite},
    {{"message['role'] + additional_special_tokens[0] + message['content'] + "
      "additional_special_tokens[1]"},
     T::kGigachat},
    {{"<|role_start|>"}, T::kMegrez},
    {{" Ассистент:"}, T::kYandex},
    {{"<role>ASSISTANT</role>", "'HUMAN'"}, T::kBailing},
    {{"<role>ASSISTANT</role>", "\"HUMAN\"", "<think>"}, T::kBailingThink},
    {{"<role>ASSISTANT</role>", "<role>HUMAN</role>", "<|role_end|>"}, T::kBailing2},
    {{"<|header_start|>", "<|header_end|>"}, T::kLlama4},
    {{"<|endofuserprompt|>"}, T::kDots1},
    {{"<|extra_0|>", "<|extra_4|>"}, T::kHunyuanMoe},
    {{"<|start|>", "<|channel|>"}, T::kGptOss},
    {{"<｜hy_Assistant｜>", "<｜hy_begin▁of▁sentence｜>"}, T::kHunyuanOcr},
    {{"<｜hy_Assistant｜>", "<｜hy_place▁holder▁no▁3｜>"}, T::kHunyuanDense},
    {{"<|im_assistant|>assistant<|im_middle|>"}, T::kKimiK2},
    {{"<seed:bos>"}, T::kSeedOss},
    {{"'Assistant: '  + message['content'] + '<|separator|>"}, T::kGrok2},
    {{"[unused9]系统：[unused10]"}, T::kPanguEmbedded},
    {{"<|begin|>", "<|end|>", "<|content|>"}, T::kSolarOpen},
};

template <size_t N>
ChatTemplate first_match(const Rule (&rules)[N], const std::string& text) {
  for (const Rule& r : rules) {
    if (std::all_of(r.all.begin(), r.all.end(),
                    [&](const char* s) { return text.find(s) != std::string::npos; })) {
      return r.t;
    }
  }
  return T::kUnknown;
}

// Text that starts with "mistral" or has "[INST]": a mistral or llama2 template.
ChatTemplate mistral_or_llama2(const std::string& text) {
  const auto has = [&](const char* s) { return text.find(s) != std::string::npos; };
  if (has("[SYSTEM_PROMPT]")) return T::kMistralV7;
  // Mistral's official v1 (system message spliced after " [INST] ") and v3/v3-tekken (tools).
  // ref:
  // https://github.com/mistralai/cookbook/blob/main/concept-deep-dive/tokenization/chat_templates.md
  if (has("' [INST] ' + system_message") || has("[AVAILABLE_TOOLS]")) {
    if (has(" [INST]")) return T::kMistralV1;
    if (has("\"[INST]\"")) return T::kMistralV3Tekken;
    return T::kMistralV3;
  }
  if (has("content.strip()")) return T::kLlama2SysStrip;
  if (has("bos_token + '[INST]")) return T::kLlama2SysBos;
  if (has("<<SYS>>")) return T::kLlama2Sys;
  return T::kLlama2;
}

}  // namespace

ChatTemplate detect_chat_template(const std::string& jinja) {
  if (const ChatTemplate t = chat_template_bare_name(jinja); t != T::kUnknown) return t;  // as llama.cpp accepts
  if (const ChatTemplate t = first_match(kBeforeInst, jinja); t != T::kUnknown) return t;
  if (jinja.rfind("mistral", 0) == 0 || jinja.find("[INST]") != std::string::npos)
    return mistral_or_llama2(jinja);
  return first_match(kAfterInst, jinja);
}

ChatTemplate model_chat_template(const GgufFile& f, std::string* how) {
  const std::string jinja = f.get_string("tokenizer.chat_template", "");
  if (!jinja.empty()) {
    if (how) *how = "detected from tokenizer.chat_template";
    return detect_chat_template(jinja);
  }
  const std::string arch = f.get_string("general.architecture", "");
  if (arch.rfind("gemma", 0) == 0) {
    if (how) *how = fmt::format("no tokenizer.chat_template; Gemma's for architecture {}", arch);
    return T::kGemma;
  }
  if (how) *how = "no tokenizer.chat_template; chatml, llama.cpp's fallback";
  return T::kChatml;
}

}  // namespace vq::engine
