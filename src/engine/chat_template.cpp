// Chat templates: the formats as data (a prefix and suffix per role) except for the three that carry state from one
// message to the next (Gemma's system text, the llama2 and mistral v1/v3 [INST] blocks). The
// recognition rules are in chat_template_detect.cpp.
#include "src/engine/chat_template.h"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>

#include "src/engine/gguf.h"
#include "veloxquant/error.h"

namespace vq::engine {
namespace {

// llama.cpp trims with isspace in the C locale.
bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && is_space(s[a])) ++a;
  while (b > a && is_space(s[b - 1])) --b;
  return s.substr(a, b - a);
}

// ---- Formats that treat each message on its own ----

struct Turn {
  const char* role;    // the role this applies to; "*": any role no earlier Turn took
  const char* prefix;  // "{role}" stands for the message's role
  const char* suffix;
  bool trim = false;  // content trimmed of leading and trailing whitespace
};

struct PerMessage {
  const char* preamble;           // before the first message (even with none)
  std::vector<Turn> turns;        // the first Turn naming the role wins; no Turn: left out
  const char* generation_prompt;  // after the last message when asked ("": the template has none)
};

std::string format_per_message(const PerMessage& f, const std::vector<ChatMessage>& msgs,
                               bool add_gen) {
  std::string out = f.preamble;
  for (const ChatMessage& m : msgs) {
    const auto turn = std::find_if(f.turns.begin(), f.turns.end(), [&](const Turn& t) {
      return std::string_view(t.role) == "*" || m.role == t.role;
    });
    if (turn == f.turns.end()) continue;
    std::string prefix = turn->prefix;
    if (const size_t at = prefix.find("{role}"); at != std::string::npos)
      prefix.replace(at, 6, m.role);
    out += prefix;
    out += turn->trim ? trim(m.content) : m.content;
    out += turn->suffix;
  }
  if (add_gen) out += f.generation_prompt;
  return out;
}

const PerMessage kChatml = {
    "", {{"*", "<|im_start|>{role}\n", "<|im_end|>\n"}}, "<|im_start|>assistant\n"};
const PerMessage kMistralV7 = {"",
                               {{"system", "[SYSTEM_PROMPT] ", "[/SYSTEM_PROMPT]"},
                                {"user", "[INST] ", "[/INST]"},
                                {"*", " ", "</s>"}},
                               ""};
const PerMessage kMistralV7Tekken = {"",
                                     {{"system", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]"},
                                      {"user", "[INST]", "[/INST]"},
                                      {"*", "", "</s>"}},
                                     ""};
const PerMessage kPhi3 = {"", {{"*", "<|{role}|>\n", "<|end|>\n"}}, "<|assistant|>\n"};
const PerMessage kPhi4 = {
    "", {{"*", "<|im_start|>{role}<|im_sep|>", "<|im_end|>"}}, "<|im_start|>assistant<|im_sep|>"};
const PerMessage kFalcon3 = {"", {{"*", "<|{role}|>\n", "\n"}}, "<|assistant|>\n"};
const PerMessage kZephyr = {"", {{"*", "<|{role}|>\n", "<|endoftext|>\n"}}, "<|assistant|>\n"};
const PerMessage kVicuna = {
    "",
    {{"system", "", "\n\n"}, {"user", "USER: ", "\n"}, {"assistant", "ASSISTANT: ", "</s>\n"}},
    "ASSISTANT:"};
const PerMessage kVicunaOrca = {"",
                                {{"system", "SYSTEM: ", "\n"},
                                 {"user", "USER: ", "\n"},
                                 {"assistant", "ASSISTANT: ", "</s>\n"}},
                                "ASSISTANT:"};
const PerMessage kDeepseek = {"",
                              {{"system", "", ""},
                               {"user", "### Instruction:\n", "\n"},
                               {"assistant", "### Response:\n", "\n<|EOT|>\n"}},
                              "### Response:\n"};
const PerMessage kDeepseek2 = {"",
                               {{"system", "", "\n\n"},
                                {"user", "User: ", "\n\n"},
                                {"assistant", "Assistant: ", "<｜end▁of▁sentence｜>"}},
                               "Assistant:"};
const PerMessage kDeepseek3 = {"",
                               {{"system", "", "\n\n"},
                                {"user", "<｜User｜>", ""},
                                {"assistant", "<｜Assistant｜>", "<｜end▁of▁sentence｜>"}},
                               "<｜Assistant｜>"};
const PerMessage kCommandR = {
    "",
    {{"system", "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>", "<|END_OF_TURN_TOKEN|>", true},
     {"user", "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>", "<|END_OF_TURN_TOKEN|>", true},
     {"assistant", "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>", "<|END_OF_TURN_TOKEN|>", true}},
    "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"};
const PerMessage kLlama3 = {
    "",
    {{"*", "<|start_header_id|>{role}<|end_header_id|>\n\n", "<|eot_id|>", true}},
    "<|start_header_id|>assistant<|end_header_id|>\n\n"};
const PerMessage kChatglm3 = {"[gMASK]sop", {{"*", "<|{role}|>\n ", ""}}, "<|assistant|>"};
const PerMessage kChatglm4 = {"[gMASK]<sop>", {{"*", "<|{role}|>\n", ""}}, "<|assistant|>\n"};
const PerMessage kGlmedge = {"", {{"*", "<|{role}|>\n", ""}}, "<|assistant|>"};
const PerMessage kMinicpm = {"", {{"user", "<用户>", "<AI>", true}, {"*", "", "", true}}, ""};
const PerMessage kGranite = {
    "",
    {{"assistant_tool_call", "<|start_of_role|>assistant_tool_call<|end_of_role|><|tool_call|>",
      "<|end_of_text|>\n"},
     {"*", "<|start_of_role|>{role}<|end_of_role|>", "<|end_of_text|>\n"}},
    "<|start_of_role|>assistant<|end_of_role|>"};
const PerMessage kGranite4 = {
    "",
    {{"assistant_tool_call", "<|start_of_role|>assistant<|end_of_role|><|tool_call|>",
      "<|end_of_text|>\n"},
     {"*", "<|start_of_role|>{role}<|end_of_role|>", "<|end_of_text|>\n"}},
    "<|start_of_role|>assistant<|end_of_role|>"};
const PerMessage kMegrez = {"",
                            {{"*", "<|role_start|>{role}<|role_end|>", "<|turn_end|>"}},
                            "<|role_start|>assistant<|role_end|>"};
const PerMessage kYandex = {
    "",
    {{"user", " Пользователь: ", "\n\n"}, {"assistant", " Ассистент: ", "\n\n"}},
    " Ассистент:[SEP]"};
const PerMessage kLlama4 = {"",
                            {{"*", "<|header_start|>{role}<|header_end|>\n\n", "<|eot|>", true}},
                            "<|header_start|>assistant<|header_end|>\n\n"};
const PerMessage kSeedOss = {"",
                             {{"assistant", "<seed:bos>assistant\n", "<seed:eos>", true},
                              {"*", "<seed:bos>{role}\n", "<seed:eos>"}},
                             "<seed:bos>assistant\n"};

// ---- Formats with state across messages ----

// Gemma has no system turn: system text (trimmed, concatenated) opens the next non-model turn,
// followed by a blank line. "assistant" is "model".
std::string format_gemma(ChatTemplate, const std::vector<ChatMessage>& msgs, bool add_gen) {
  std::string out, system;
  for (const ChatMessage& m : msgs) {
    if (m.role == "system") {
      system += trim(m.content);
      continue;
    }
    const std::string role = m.role == "assistant" ? "model" : m.role;
    out += "<start_of_turn>" + role + "\n";
    if (role != "model" && !system.empty()) {
      out += system + "\n\n";
      system.clear();
    }
    out += trim(m.content) + "<end_of_turn>\n";
  }
  if (add_gen) out += "<start_of_turn>model\n";
  return out;
}

// Llama 2: "[INST] " opens a block (the first one even before any message); the system text goes
// inside it (in <<SYS>> tags, or plain with a newline for kLlama2), the user text ends it with
// " [/INST]", and any other role is the reply, closed by "</s>". Variants: a "<s>" before each
// later block (kLlama2SysBos); contents trimmed (kLlama2SysStrip). No generation prompt.
std::string format_llama2(ChatTemplate t, const std::vector<ChatMessage>& msgs, bool) {
  const bool sys_tags = t != ChatTemplate::kLlama2;
  const char* reopen = t == ChatTemplate::kLlama2SysBos ? "<s>[INST] " : "[INST] ";
  std::string out = "[INST] ";
  bool open = true;
  for (const ChatMessage& m : msgs) {
    const std::string content = t == ChatTemplate::kLlama2SysStrip ? trim(m.content) : m.content;
    if (!open) {
      out += reopen;
      open = true;
    }
    if (m.role == "system") {
      out += sys_tags ? "<<SYS>>\n" + content + "\n<</SYS>>\n\n" : content + "\n";
    } else if (m.role == "user") {
      out += content + " [/INST]";
    } else {
      out += content + "</s>";
      open = false;
    }
  }
  return out;
}

// Mistral's v1, v3 and v3-tekken: "[INST]" opens a block at the first message after a reply;
// system text sits in it followed by a blank line, user text closes it with "[/INST]", any other
// role is the reply, closed by "</s>". v1 puts a space before "[INST]" and "[/INST]"; v1 and v3 a
// space after "[INST]" and before the reply; v3 trims the reply. No generation prompt.
std::string format_mistral(ChatTemplate t, const std::vector<ChatMessage>& msgs, bool) {
  const std::string before = t == ChatTemplate::kMistralV1 ? " " : "";
  const std::string after = t == ChatTemplate::kMistralV3Tekken ? "" : " ";
  std::string out;
  bool open = false;
  for (const ChatMessage& m : msgs) {
    if (!open) {
      out += before + "[INST]" + after;
      open = true;
    }
    if (m.role == "system") {
      out += m.content + "\n\n";
    } else if (m.role == "user") {
      out += m.content + before + "[/INST]";
    } else {
      out += after + (t == ChatTemplate::kMistralV3 ? trim(m.content) : m.content) + "</s>";
      open = false;
    }
  }
  return out;
}

// ---- The registry ----

using CustomFormat = std::string (*)(ChatTemplate, const std::vector<ChatMessage>&, bool);

struct Entry {
  ChatTemplate t;
  const char* name;  // llama.cpp's (its LLM_CHAT_TEMPLATES key)
  const PerMessage* per_message = nullptr;
  CustomFormat custom = nullptr;  // neither: recognised, not formatted
};

using T = ChatTemplate;
const Entry kEntries[] = {
    {T::kChatml, "chatml", &kChatml},
    {T::kLlama2, "llama2", nullptr, format_llama2},
    {T::kLlama2Sys, "llama2-sys", nullptr, format_llama2},
    {T::kLlama2SysBos, "llama2-sys-bos", nullptr, format_llama2},
    {T::kLlama2SysStrip, "llama2-sys-strip", nullptr, format_llama2},
    {T::kMistralV1, "mistral-v1", nullptr, format_mistral},
    {T::kMistralV3, "mistral-v3", nullptr, format_mistral},
    {T::kMistralV3Tekken, "mistral-v3-tekken", nullptr, format_mistral},
    {T::kMistralV7, "mistral-v7", &kMistralV7},
    {T::kMistralV7Tekken, "mistral-v7-tekken", &kMistralV7Tekken},
    {T::kPhi3, "phi3", &kPhi3},
    {T::kPhi4, "phi4", &kPhi4},
    {T::kFalcon3, "falcon3", &kFalcon3},
    {T::kZephyr, "zephyr", &kZephyr},
    {T::kMonarch, "monarch"},
    {T::kGemma, "gemma", nullptr, format_gemma},
    {T::kOrion, "orion"},
    {T::kOpenchat, "openchat"},
    {T::kVicuna, "vicuna", &kVicuna},
    {T::kVicunaOrca, "vicuna-orca", &kVicunaOrca},
    {T::kDeepseek, "deepseek", &kDeepseek},
    {T::kDeepseek2, "deepseek2", &kDeepseek2},
    {T::kDeepseek3, "deepseek3", &kDeepseek3},
    {T::kDeepseekOcr, "deepseek-ocr"},
    {T::kCommandR, "command-r", &kCommandR},
    {T::kLlama3, "llama3", &kLlama3},
    {T::kChatglm3, "chatglm3", &kChatglm3},
    {T::kChatglm4, "chatglm4", &kChatglm4},
    {T::kGlmedge, "glmedge", &kGlmedge},
    {T::kMinicpm, "minicpm", &kMinicpm},
    {T::kExaone3, "exaone3"},
    {T::kExaone4, "exaone4"},
    {T::kExaoneMoe, "exaone-moe"},
    {T::kRwkvWorld, "rwkv-world"},
    {T::kGranite, "granite", &kGranite},
    {T::kGranite4, "granite-4.0", &kGranite4},
    {T::kGigachat, "gigachat"},
    {T::kMegrez, "megrez", &kMegrez},
    {T::kYandex, "yandex", &kYandex},
    {T::kBailing, "bailing"},
    {T::kBailingThink, "bailing-think"},
    {T::kBailing2, "bailing2"},
    {T::kLlama4, "llama4", &kLlama4},
    {T::kSmolvlm, "smolvlm"},
    {T::kDots1, "dots1"},  // llama.cpp has no name for it (not in LLM_CHAT_TEMPLATES)
    {T::kHunyuanMoe, "hunyuan-moe"},
    {T::kGptOss, "gpt-oss"},
    {T::kHunyuanDense, "hunyuan-dense"},
    {T::kHunyuanOcr, "hunyuan-ocr"},
    {T::kKimiK2, "kimi-k2"},
    {T::kSeedOss, "seed_oss", &kSeedOss},
    {T::kGrok2, "grok-2"},
    {T::kPanguEmbedded, "pangu-embedded"},
    {T::kSolarOpen, "solar-open"},
};
constexpr size_t kCount = sizeof(kEntries) / sizeof(kEntries[0]);
static_assert(kCount == size_t(ChatTemplate::kUnknown), "one entry per template");

const Entry& entry(ChatTemplate t) {
  VQ_ASSERT(size_t(t) < kCount && kEntries[size_t(t)].t == t);
  return kEntries[size_t(t)];
}

}  // namespace

const char* chat_template_name(ChatTemplate t) {
  return t == T::kUnknown ? "unknown" : entry(t).name;
}

bool chat_template_formats(ChatTemplate t) {
  return t != T::kUnknown && (entry(t).per_message != nullptr || entry(t).custom != nullptr);
}

std::string chat_template_names() {
  std::vector<std::string> names;
  for (const Entry& e : kEntries) {
    if (chat_template_formats(e.t)) names.push_back(e.name);
  }
  std::sort(names.begin(), names.end());
  return fmt::format("{}", fmt::join(names, ", "));
}

ChatTemplate chat_template_from_name(const std::string& name) {
  for (const Entry& e : kEntries) {
    if (name != e.name) continue;
    VQ_CHECK(
        chat_template_formats(e.t),
        fmt::format("chat template '{}' (one of llama.cpp's) is not supported here; supported: {}",
                    name, chat_template_names()));
    return e.t;
  }
  throw_error(ErrorKind::kUsage, fmt::format("unknown chat template '{}'; supported: {}", name,
                                             chat_template_names()));
}

ChatTemplate chat_template_bare_name(const std::string& text) {
  for (const Entry& e : kEntries) {
    if (text == e.name && e.t != T::kDots1) return e.t;
  }
  return T::kUnknown;
}

std::string format_chat(ChatTemplate t, const std::vector<ChatMessage>& msgs,
                        bool add_generation_prompt) {
  VQ_CHECK(chat_template_formats(t),
           fmt::format("chat template '{}' is not supported here; supported: {}",
                       chat_template_name(t), chat_template_names()));
  const Entry& e = entry(t);
  return e.per_message ? format_per_message(*e.per_message, msgs, add_generation_prompt)
                       : e.custom(t, msgs, add_generation_prompt);
}

std::string format_chat_turn(ChatTemplate t, const std::vector<ChatMessage>& history,
                             const std::vector<ChatMessage>& added, bool add_generation_prompt) {
  if (history.empty()) return format_chat(t, added, add_generation_prompt);
  std::vector<ChatMessage> all = history;
  all.insert(all.end(), added.begin(), added.end());
  const std::string before = format_chat(t, history, false);
  std::string full = format_chat(t, all, add_generation_prompt);
  VQ_ASSERT(full.compare(0, before.size(), before) == 0);
  return full.substr(before.size());
}

std::string chat_turn_end(ChatTemplate t) {
  // A reply no template trims or contains, formatted: what comes after it closes the turn.
  const std::string reply = "\x01";
  const std::string text = format_chat(t, {{"user", "u"}, {"assistant", reply}}, false);
  const size_t at = text.rfind(reply);
  VQ_ASSERT(at != std::string::npos);
  return text.substr(at + reply.size());
}

}  // namespace vq::engine
