// The method registry: every method is registered (src/kv/methods/*/CMakeLists.txt), once, in
// the order `veloxquant methods` prints, and each parses under its own name.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "veloxquant/kv/method.h"

namespace vq::kv {
namespace {

TEST(Registry, ListsEveryMethodInOrder) {
  const std::vector<std::string> expected = {
      "fp16",  "bf16",     "q8",       "q4",     "kivi", "kvquant",    "turbo",  "turbo-rvq",
      "polar", "vecinfer", "spectral", "commvq", "qjl",  "turbo-prod", "rabitq", "ratequant"};
  std::vector<std::string> names;
  for (const MethodDef* def : registered_methods()) names.push_back(def->info.name);
  EXPECT_EQ(names, expected);
}

TEST(Registry, EachMethodParsesUnderItsName) {
  for (const MethodDef* def : registered_methods()) {
    ASSERT_NE(def, nullptr);
    EXPECT_EQ(parse_method(def->info.name).spec(), def->info.name);
  }
}

}  // namespace
}  // namespace vq::kv
