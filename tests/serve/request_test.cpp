// The server's request parsing (every field typed and ranged, OpenAI-style errors) and the text it
// streams (whole UTF-8 characters, cut before the first stop sequence).
#include <gtest/gtest.h>

#include <string>

#include "src/serve/request.h"
#include "src/serve/text_stream.h"

namespace vq::serve {
namespace {

int status_of(const std::string& body, bool chat = false) {
  try {
    parse_request(body, chat);
  } catch (const ApiError& e) {
    return e.status;
  }
  return 200;
}

TEST(Request, ParsesCompletionFields) {
  const Request r = parse_request(
      R"({"prompt": "hi", "max_tokens": 5, "temperature": 0, "top_p": 0.5, "top_k": 3, "min_p": 0.1,
          "seed": 9, "stop": ["a", "bc"], "stream": true, "logprobs": 2, "echo": true,
          "stream_options": {"include_usage": true}})",
      false);
  EXPECT_EQ(r.prompt, "hi");
  EXPECT_EQ(*r.max_tokens, 5);
  EXPECT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_EQ(r.sampling.top_p, 0.5f);
  EXPECT_EQ(r.sampling.top_k, 3);
  EXPECT_EQ(r.sampling.min_p, 0.1f);
  EXPECT_EQ(r.sampling.seed, 9u);
  EXPECT_TRUE(r.seeded && r.stream && r.include_usage && r.echo);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(r.logprobs, 2);
  // Defaults: 16 tokens for completions (OpenAI's), llama-server's temperature.
  const Request d = parse_request(R"({"prompt": "x"})", false);
  EXPECT_EQ(*d.max_tokens, 16);
  EXPECT_EQ(d.sampling.temperature, 0.8f);
  EXPECT_EQ(parse_request(R"({"prompt": "x", "stop": "z"})", false).stop, std::vector<std::string>{"z"});
}

TEST(Request, ParsesChatMessages) {
  const Request r = parse_request(
      R"({"messages": [{"role": "system", "content": "be brief"},
                       {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]})",
      true);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_FALSE(r.max_tokens.has_value());  // chat: until the reply ends or the context is full
}

TEST(Request, RefusesBadInputWith400) {
  for (const char* body : {"", "{", "[]", "5", R"({"prompt": 5})", R"({"prompt": ["a", "b"]})", R"({})",
                           R"({"prompt": "x", "max_tokens": -1})", R"({"prompt": "x", "max_tokens": 1.5})",
                           R"({"prompt": "x", "max_tokens": "3"})", R"({"prompt": "x", "temperature": 3})",
                           R"({"prompt": "x", "top_p": -0.1})", R"({"prompt": "x", "n": 2})",
                           R"({"prompt": "x", "stop": ["", "a"]})", R"({"prompt": "x", "stop": [1]})",
                           R"({"prompt": "x", "stop": ["a","b","c","d","e"]})", R"({"prompt": "x", "logprobs": 6})",
                           R"({"prompt": "x", "stream": "yes"})", R"({"prompt": "x", "tools": [{"a": 1}]})",
                           R"({"prompt": "x", "max_tokens": 99999999999999999999})"}) {
    EXPECT_EQ(status_of(body), 400) << body;
  }
  for (const char* body : {R"({"messages": []})", R"({"messages": "hi"})", R"({"messages": [{"content": "x"}]})",
                           R"({"messages": [{"role": "robot", "content": "x"}]})",
                           R"({"messages": [{"role": "user", "content": 5}]})",
                           R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})"}) {
    EXPECT_EQ(status_of(body, true), 400) << body;
  }
}

TEST(Request, ErrorBodyIsAnOpenAiErrorObject) {
  EXPECT_EQ(error_body("bad \"x\"", "invalid_request_error", "invalid_value"),
            R"({"error":{"code":"invalid_value","message":"bad \"x\"","param":null,"type":"invalid_request_error"}})");
}

TEST(TextStream, HoldsBackPartialStopsAndCharacters) {
  TextStream t({"END"});
  EXPECT_EQ(t.push("hello E"), "hello ");
  EXPECT_EQ(t.push("N"), "");
  EXPECT_EQ(t.push("x"), "ENx");  // not the stop after all
  EXPECT_EQ(t.push("\xc3"), "");  // the first byte of "é"
  EXPECT_EQ(t.push("\xa9 done EN"), "\xc3\xa9 done ");
  EXPECT_EQ(t.push("D more"), "");
  EXPECT_TRUE(t.stopped());
  EXPECT_EQ(t.push("after"), "");
  EXPECT_EQ(t.finish(), "");
  TextStream u({"zz"});
  EXPECT_EQ(u.push("abz"), "ab");
  EXPECT_EQ(u.finish(), "z");  // generation ended: what was held back goes out
  EXPECT_EQ(incomplete_utf8_tail("a\xe2\x82"), 2u);
  EXPECT_EQ(incomplete_utf8_tail("a\xe2\x82\xac"), 0u);
}

}  // namespace
}  // namespace vq::serve
