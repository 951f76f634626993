// Chat templates against llama.cpp: recognition of real tokenizer.chat_template texts, the outputs
// llama.cpp's own test expects of its built-in formatter (tests/data/chat_templates), hand-written
// outputs for every template formatted here, and the turn-by-turn property chat relies on (the
// text fed each turn, plus the replies and their turn ends, is the formatted conversation).
#include "src/engine/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "src/engine/gguf.h"
#include "tests/engine/gguf_writer.h"
#include "tests/engine/model_path.h"
#include "veloxquant/error.h"

namespace vq::engine {
namespace {

std::string data_file(const std::string& name) {
  const std::string path = testing::source_dir() + "/tests/data/chat_templates/" + name;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(bool(in)) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<ChatTemplate> formatted_templates() {
  std::vector<ChatTemplate> out;
  for (int i = 0; i < int(ChatTemplate::kUnknown); ++i) {
    if (chat_template_formats(ChatTemplate(i))) out.push_back(ChatTemplate(i));
  }
  return out;
}

TEST(ChatTemplate, DetectsRealTemplates) {
  const std::map<std::string, std::string> expected = {
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", "llama3"},
      {"Qwen-Qwen2.5-7B-Instruct.jinja", "chatml"},
      {"Qwen-Qwen3-0.6B.jinja", "chatml"},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral-v3-tekken"},
      {"Mistral-Small-3.2-24B-Instruct-2506.jinja", "mistral-v7"},
      {"microsoft-Phi-3.5-mini-instruct.jinja", "phi3"},
      {"google-gemma-2-2b-it.jinja", "gemma"},
      {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", "deepseek3"},
      {"CohereForAI-c4ai-command-r-plus-tool_use.jinja", "command-r"},
      {"ibm-granite-granite-3.3-2B-Instruct.jinja", "granite"},
  };
  for (const auto& [file, name] : expected) {
    EXPECT_STREQ(chat_template_name(detect_chat_template(data_file(file))), name.c_str()) << file;
  }
}

// llama.cpp's tests/test-chat-template.cpp: each template text is recognised as llama.cpp does,
// and where formatted here, the conversation comes out as llama.cpp's test expects.
TEST(ChatTemplate, MatchesLlamaCppTestCases) {
  const auto j = nlohmann::json::parse(data_file("llama_cpp_cases.json"));
  std::vector<ChatMessage> conversation;
  for (const auto& m : j["conversation"]) conversation.push_back({m["role"], m["content"]});
  int formatted = 0;
  for (const auto& c : j["cases"]) {
    const std::string name = c["name"];
    const ChatTemplate t = detect_chat_template(c["template_str"]);
    EXPECT_EQ(chat_template_name(t), c["template"].get<std::string>()) << name;
    if (!chat_template_formats(t)) continue;
    std::vector<ChatMessage> msgs = conversation;
    if (c.contains("extra_conversation")) {
      for (const auto& m : c["extra_conversation"]) msgs.push_back({m["role"], m["content"]});
    }
    EXPECT_EQ(format_chat(t, msgs, true), c["expected_output"].get<std::string>()) << name;
    ++formatted;
  }
  EXPECT_EQ(formatted, 30);  // the 35 cases less monarch, orion, openchat, gigachat, bailing
}

// system, user, assistant (with spaces around it, which some templates trim), user, and the
// generation prompt: what llama.cpp's llm_chat_apply_template gives, written from its source.
TEST(ChatTemplate, FormatsEachTemplate) {
  const std::vector<ChatMessage> msgs = {
      {"system", "Be brief."}, {"user", "Hi"}, {"assistant", " Hello. "}, {"user", "Bye"}};
  const std::map<std::string, std::string> expected = {
      {"chatml",
       "<|im_start|>system\nBe "
       "brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n Hello. "
       "<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n"},
      {"llama2", "[INST] Be brief.\nHi [/INST] Hello. </s>[INST] Bye [/INST]"},
      {"llama2-sys",
       "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello. </s>[INST] Bye [/INST]"},
      {"llama2-sys-bos",
       "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello. </s><s>[INST] Bye [/INST]"},
      {"llama2-sys-strip",
       "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST]Hello.</s>[INST] Bye [/INST]"},
      {"mistral-v1", " [INST] Be brief.\n\nHi [/INST]  Hello. </s> [INST] Bye [/INST]"},
      {"mistral-v3", "[INST] Be brief.\n\nHi[/INST] Hello.</s>[INST] Bye[/INST]"},
      {"mistral-v3-tekken", "[INST]Be brief.\n\nHi[/INST] Hello. </s>[INST]Bye[/INST]"},
      {"mistral-v7",
       "[SYSTEM_PROMPT] Be brief.[/SYSTEM_PROMPT][INST] Hi[/INST]  Hello. </s>[INST] Bye[/INST]"},
      {"mistral-v7-tekken",
       "[SYSTEM_PROMPT]Be brief.[/SYSTEM_PROMPT][INST]Hi[/INST] Hello. </s>[INST]Bye[/INST]"},
      {"phi3",
       "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\n Hello. "
       "<|end|>\n<|user|>\nBye<|end|>\n"
       "<|assistant|>\n"},
      {"phi4",
       "<|im_start|>system<|im_sep|>Be "
       "brief.<|im_end|><|im_start|>user<|im_sep|>Hi<|im_end|><|im_start|>assistant"
       "<|im_sep|> Hello. "
       "<|im_end|><|im_start|>user<|im_sep|>Bye<|im_end|><|im_start|>assistant<|im_sep|>"},
      {"falcon3",
       "<|system|>\nBe brief.\n<|user|>\nHi\n<|assistant|>\n Hello. "
       "\n<|user|>\nBye\n<|assistant|>\n"},
      {"zephyr",
       "<|system|>\nBe brief.<|endoftext|>\n<|user|>\nHi<|endoftext|>\n<|assistant|>\n Hello. "
       "<|endoftext|>\n"
       "<|user|>\nBye<|endoftext|>\n<|assistant|>\n"},
      {"gemma",
       "<start_of_turn>user\nBe "
       "brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
       "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"},
      {"vicuna", "Be brief.\n\nUSER: Hi\nASSISTANT:  Hello. </s>\nUSER: Bye\nASSISTANT:"},
      {"vicuna-orca",
       "SYSTEM: Be brief.\nUSER: Hi\nASSISTANT:  Hello. </s>\nUSER: Bye\nASSISTANT:"},
      {"deepseek",
       "Be brief.### Instruction:\nHi\n### Response:\n Hello. \n<|EOT|>\n### "
       "Instruction:\nBye\n### Response:\n"},
      {"deepseek2",
       "Be brief.\n\nUser: Hi\n\nAssistant:  Hello. <｜end▁of▁sentence｜>User: Bye\n\nAssistant:"},
      {"deepseek3",
       "Be brief.\n\n<｜User｜>Hi<｜Assistant｜> Hello. "
       "<｜end▁of▁sentence｜><｜User｜>Bye<｜Assistant｜>"},
      {"command-r",
       "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>Be "
       "brief.<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi"
       "<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>Hello.<|END_OF_TURN_TOKEN|><|"
       "START_OF_TURN_TOKEN|>"
       "<|USER_TOKEN|>Bye<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"},
      {"llama3",
       "<|start_header_id|>system<|end_header_id|>\n\nBe "
       "brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
       "Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|><|start_"
       "header_id|>user"
       "<|end_header_id|>\n\nBye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
      {"chatglm3",
       "[gMASK]sop<|system|>\n Be brief.<|user|>\n Hi<|assistant|>\n  Hello. <|user|>\n "
       "Bye<|assistant|>"},
      {"chatglm4",
       "[gMASK]<sop><|system|>\nBe brief.<|user|>\nHi<|assistant|>\n Hello. "
       "<|user|>\nBye<|assistant|>\n"},
      {"glmedge",
       "<|system|>\nBe brief.<|user|>\nHi<|assistant|>\n Hello. <|user|>\nBye<|assistant|>"},
      {"minicpm", "Be brief.<用户>Hi<AI>Hello.<用户>Bye<AI>"},
      {"granite",
       "<|start_of_role|>system<|end_of_role|>Be "
       "brief.<|end_of_text|>\n<|start_of_role|>user<|end_of_role|>Hi"
       "<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|> Hello. "
       "<|end_of_text|>\n<|start_of_role|>user"
       "<|end_of_role|>Bye<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>"},
      {"granite-4.0",
       "<|start_of_role|>system<|end_of_role|>Be "
       "brief.<|end_of_text|>\n<|start_of_role|>user<|end_of_role|>Hi"
       "<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|> Hello. "
       "<|end_of_text|>\n<|start_of_role|>user"
       "<|end_of_role|>Bye<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>"},
      {"megrez",
       "<|role_start|>system<|role_end|>Be "
       "brief.<|turn_end|><|role_start|>user<|role_end|>Hi<|turn_end|>"
       "<|role_start|>assistant<|role_end|> Hello. "
       "<|turn_end|><|role_start|>user<|role_end|>Bye<|turn_end|>"
       "<|role_start|>assistant<|role_end|>"},
      {"yandex",
       " Пользователь: Hi\n\n Ассистент:  Hello. \n\n Пользователь: Bye\n\n Ассистент:[SEP]"},
      {"llama4",
       "<|header_start|>system<|header_end|>\n\nBe "
       "brief.<|eot|><|header_start|>user<|header_end|>\n\nHi<|eot|>"
       "<|header_start|>assistant<|header_end|>\n\nHello.<|eot|><|header_start|>user<|header_end|>"
       "\n\nBye<|eot|>"
       "<|header_start|>assistant<|header_end|>\n\n"},
      {"seed_oss",
       "<seed:bos>system\nBe "
       "brief.<seed:eos><seed:bos>user\nHi<seed:eos><seed:bos>assistant\nHello.<seed:eos>"
       "<seed:bos>user\nBye<seed:eos><seed:bos>assistant\n"},
  };
  const auto all = formatted_templates();
  EXPECT_EQ(all.size(), expected.size());
  for (const ChatTemplate t : all) {
    const auto it = expected.find(chat_template_name(t));
    ASSERT_NE(it, expected.end()) << chat_template_name(t);
    EXPECT_EQ(format_chat(t, msgs, true), it->second) << it->first;
  }
}

TEST(ChatTemplate, GemmaMergesSystemIntoTheNextUserTurn) {
  const auto t = ChatTemplate::kGemma;
  // Several system messages concatenate (trimmed, no separator); a system after a reply waits
  // for the next user turn, never a model turn.
  EXPECT_EQ(format_chat(t, {{"system", " A "}, {"system", "B"}, {"user", "u"}}, false),
            "<start_of_turn>user\nAB\n\nu<end_of_turn>\n");
  EXPECT_EQ(
      format_chat(t, {{"user", "u"}, {"system", "S"}, {"assistant", "a"}, {"user", "v"}}, false),
      "<start_of_turn>user\nu<end_of_turn>\n<start_of_turn>model\na<end_of_turn>\n"
      "<start_of_turn>user\nS\n\nv<end_of_turn>\n");
  // The form chat had before templates: one user line with the system prompt.
  EXPECT_EQ(format_chat(t, {{"system", "Be kind."}, {"user", "Hello"}}, true),
            "<start_of_turn>user\nBe kind.\n\nHello<end_of_turn>\n<start_of_turn>model\n");
}

TEST(ChatTemplate, NamesRoundTripAndUnknownNamesAreRefused) {
  for (const ChatTemplate t : formatted_templates()) {
    EXPECT_EQ(chat_template_from_name(chat_template_name(t)), t);
    EXPECT_EQ(detect_chat_template(chat_template_name(t)), t);  // a bare name, as llama.cpp accepts
  }
  const auto refused = [](const std::string& name) {
    try {
      chat_template_from_name(name);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUsage);
      return std::string(e.what());
    }
    ADD_FAILURE() << name << " accepted";
    return std::string();
  };
  const std::string unknown = refused("gemma3");
  EXPECT_NE(unknown.find("unknown chat template 'gemma3'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("chatml, command-r"), std::string::npos) << unknown;
  EXPECT_EQ(unknown.find('\n'), std::string::npos);
  EXPECT_NE(refused("bailing").find("not supported here"), std::string::npos);
  EXPECT_NE(refused("").find("unknown chat template"), std::string::npos);
  EXPECT_THROW(format_chat(ChatTemplate::kOrion, {{"user", "u"}}, true), Error);
}

TEST(ChatTemplate, DetectionFollowsLlamaCppOrder) {
  EXPECT_EQ(detect_chat_template(""), ChatTemplate::kUnknown);
  EXPECT_EQ(detect_chat_template("{{ messages }}"), ChatTemplate::kUnknown);
  EXPECT_EQ(detect_chat_template("mistral"), ChatTemplate::kLlama2);  // starts with "mistral"
  EXPECT_EQ(detect_chat_template("dots1"), ChatTemplate::kUnknown);   // no name in llama.cpp
  // <|im_start|> comes first: a chatml text that also has Gemma's or Llama 3's markers is chatml.
  EXPECT_EQ(detect_chat_template("<|im_start|><start_of_turn><|start_header_id|><|end_header_id|>"),
            ChatTemplate::kChatml);
  EXPECT_EQ(detect_chat_template("<|im_start|>x<|im_sep|>"), ChatTemplate::kPhi4);
  // [INST] before everything after it.
  EXPECT_EQ(detect_chat_template("[INST]<start_of_turn>"), ChatTemplate::kLlama2);
  EXPECT_EQ(detect_chat_template("[INST]<<SYS>>bos_token + '[INST]content.strip()"),
            ChatTemplate::kLlama2SysStrip);
  EXPECT_EQ(detect_chat_template("[INST]<<SYS>>bos_token + '[INST]"), ChatTemplate::kLlama2SysBos);
  EXPECT_EQ(detect_chat_template("[INST]<<SYS>>"), ChatTemplate::kLlama2Sys);
  EXPECT_EQ(detect_chat_template("[INST][AVAILABLE_TOOLS]"), ChatTemplate::kMistralV3);
  // Gemma's marker before Llama 3's.
  EXPECT_EQ(detect_chat_template("<start_of_turn><|start_header_id|><|end_header_id|>"),
            ChatTemplate::kGemma);
  EXPECT_EQ(detect_chat_template("<|assistant|><|user|></s>"), ChatTemplate::kFalcon3);
  EXPECT_EQ(detect_chat_template("<|assistant|><|user|>"), ChatTemplate::kGlmedge);
  EXPECT_EQ(detect_chat_template("<|user|><|endoftext|>"), ChatTemplate::kZephyr);
  EXPECT_EQ(detect_chat_template("<|header_start|><|header_end|>"), ChatTemplate::kLlama4);
}

TEST(ChatTemplate, TurnEnds) {
  EXPECT_EQ(chat_turn_end(ChatTemplate::kGemma), "<end_of_turn>\n");
  EXPECT_EQ(chat_turn_end(ChatTemplate::kChatml), "<|im_end|>\n");
  EXPECT_EQ(chat_turn_end(ChatTemplate::kLlama3), "<|eot_id|>");
  EXPECT_EQ(chat_turn_end(ChatTemplate::kLlama2), "</s>");
  EXPECT_EQ(chat_turn_end(ChatTemplate::kMistralV3Tekken), "</s>");
  EXPECT_EQ(chat_turn_end(ChatTemplate::kMistralV7), "</s>");
  EXPECT_EQ(chat_turn_end(ChatTemplate::kPhi3), "<|end|>\n");
  EXPECT_EQ(chat_turn_end(ChatTemplate::kDeepseek3), "<｜end▁of▁sentence｜>");
  EXPECT_EQ(chat_turn_end(ChatTemplate::kChatglm3), "");
}

// Chat feeds format_chat_turn for each user line, then the model's reply, then chat_turn_end.
// For every template that must rebuild format_chat of the whole conversation, and the text of a
// turn must not depend on what the history says (a conversation loaded from a saved cache has
// no messages, only their shape).
TEST(ChatTemplate, TurnByTurnTextIsTheFormattedConversation) {
  const std::vector<std::vector<ChatMessage>> user_turns = {
      {{"system", "Be brief."}, {"user", "Hi"}}, {{"user", " Who are you? "}}, {{"user", "Bye"}}};
  const std::vector<std::string> replies = {"Hello.", "  An assistant  ", ""};
  for (const ChatTemplate t : formatted_templates()) {
    SCOPED_TRACE(chat_template_name(t));
    std::vector<ChatMessage> history;
    std::string cache;
    for (size_t i = 0; i < user_turns.size(); ++i) {
      const std::string turn = format_chat_turn(t, history, user_turns[i], true);
      if (!history.empty()) {
        EXPECT_EQ(turn,
                  format_chat_turn(t, {{"user", "x"}, {"assistant", "y"}}, user_turns[i], true));
      }
      cache += turn;
      history.insert(history.end(), user_turns[i].begin(), user_turns[i].end());
      EXPECT_EQ(cache, format_chat(t, history, true));
      // The reply as the model would write it: the formatted reply between the generation
      // prompt and the turn end (a template may trim it, or expect a leading space).
      std::vector<ChatMessage> replied = history;
      replied.push_back({"assistant", replies[i]});
      const std::string with_reply = format_chat(t, replied, false);
      history = replied;
      if (t == ChatTemplate::kYandex) {
        // Its generation prompt ends in "[SEP]", which its formatted replies lack: the cache
        // keeps the "[SEP]", and the conversation goes on after the turn end as formatted.
        EXPECT_EQ(cache.substr(cache.size() - 5), "[SEP]");
        cache = with_reply;
        continue;
      }
      ASSERT_EQ(with_reply.compare(0, cache.size(), cache), 0) << with_reply;
      const std::string end = chat_turn_end(t);
      ASSERT_GE(with_reply.size(), cache.size() + end.size());
      ASSERT_EQ(with_reply.compare(with_reply.size() - end.size(), end.size(), end), 0)
          << with_reply;
      cache += with_reply.substr(cache.size(), with_reply.size() - cache.size() - end.size()) + end;
      EXPECT_EQ(cache, format_chat(t, history, false));
    }
  }
}

std::unique_ptr<GgufFile> file_with(const std::string& arch, const std::string& jinja) {
  testing::GgufWriter w;
  w.kv_str("general.architecture", arch);
  if (!jinja.empty()) w.kv_str("tokenizer.chat_template", jinja);
  return GgufFile::from_memory(w.bytes(), arch + ".gguf");
}

TEST(ChatTemplate, ModelFileTemplate) {
  std::string how;
  EXPECT_EQ(model_chat_template(
                *file_with("llama", data_file("meta-llama-Llama-3.1-8B-Instruct.jinja")), &how),
            ChatTemplate::kLlama3);
  EXPECT_EQ(how, "detected from tokenizer.chat_template");
  EXPECT_EQ(model_chat_template(*file_with("gemma3", ""), &how), ChatTemplate::kGemma);
  EXPECT_NE(how.find("gemma3"), std::string::npos);
  EXPECT_EQ(model_chat_template(*file_with("llama", "")), ChatTemplate::kChatml);
  EXPECT_EQ(model_chat_template(*file_with("qwen2", "{{ messages }}")), ChatTemplate::kUnknown);
}

}  // namespace
}  // namespace vq::engine
