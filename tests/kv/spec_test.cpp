// Spec strings: canonical forms, key/value splits, and errors that name the bad part.
#include <gtest/gtest.h>

#include "veloxquant/error.h"
#include "veloxquant/kv/method.h"

namespace vq::kv {
namespace {

TEST(Spec, CanonicalFormOmitsDefaults) {
  EXPECT_EQ(parse_method("q4").spec(), "q4");
  EXPECT_EQ(parse_method("q4:rot=0").spec(), "q4");
  EXPECT_EQ(parse_method("q4:rot=1").spec(), "q4:rot=1");
  EXPECT_EQ(parse_method("q4:sink=4,rot=true").spec(), "q4:rot=1,sink=4");
  EXPECT_EQ(parse_method("k=q8,v=q4:rot=1").spec(), "k=q8,v=q4:rot=1");
}

TEST(Spec, RoundTripsForEveryMethod) {
  for (const MethodDef* def : registered_methods()) {
    const std::string s = parse_method(def->info.name).spec();
    EXPECT_EQ(parse_method(s).spec(), s);
  }
}

TEST(Spec, SplitKeysAndValues) {
  const Method m = parse_method("k=q8,v=q4");
  EXPECT_DOUBLE_EQ(m.keys().key_bits(128), 8.5);
  EXPECT_DOUBLE_EQ(m.values().value_bits(128), 4.5);
  EXPECT_DOUBLE_EQ(m.bits_per_element(128), 6.5);
}

// Bits everything counted: the fp16 sinks and window (the larger side's) as their share of the
// tokens a sequence holds, at 16 bits an element.
TEST(Spec, BitsCountedIncludeTheFp16Tokens) {
  const Method q4 = parse_method("q4");
  EXPECT_EQ(q4.fp16_tokens(), 0);
  EXPECT_DOUBLE_EQ(q4.bits_counted(128, 2048), 4.5);
  const Method kept = parse_method("q4:sink=4,residual=60");
  EXPECT_EQ(kept.fp16_tokens(), 64);
  EXPECT_DOUBLE_EQ(kept.bits_counted(128, 2048), (1984 * 4.5 + 64 * 16.0) / 2048);
  EXPECT_DOUBLE_EQ(kept.bits_counted(128, 32), 16.0);  // every token still in fp16
  // KIVI's per-channel keys keep no window of their own; its values' window counts for both.
  const Method kivi = parse_method("kivi");
  EXPECT_EQ(kivi.fp16_tokens(), 128);
  EXPECT_DOUBLE_EQ(kivi.bits_counted(128, 2048), (1920 * kivi.bits_per_element(128) + 128 * 16.0) / 2048);
  EXPECT_DOUBLE_EQ(parse_method("fp16:sink=1").bits_counted(128, 100), 16.0);
}

void expect_usage_error(const std::string& spec, const std::string& fragment) {
  try {
    parse_method(spec);
    FAIL() << spec << " was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line";
  }
}

TEST(Spec, ErrorsNameTheBadPart) {
  expect_usage_error("q4:bits=x", "'bits'");
  expect_usage_error("nosuch", "'nosuch'");
  expect_usage_error("q4:rot=2", "rot=2");
  expect_usage_error("q4:rot=x", "rot=x");
  expect_usage_error("q4:residual=-1", "residual=-1");
  expect_usage_error("q4:rot", "'rot'");
  expect_usage_error("q4:", "''");
  expect_usage_error("q4:rot=1,rot=0", "twice");
  expect_usage_error("k=q4", "',v=SPEC'");
  expect_usage_error("k=q4,v=nosuch", "'nosuch'");
  expect_usage_error("", "unknown method ''");
}

}  // namespace
}  // namespace vq::kv
