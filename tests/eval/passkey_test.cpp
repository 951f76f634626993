// The passkey prompt (llama.cpp's examples/passkey wording) and the depth bands.
#include "src/eval/passkey.h"

#include <gtest/gtest.h>

#include <string>

namespace vq::eval {
namespace {

const std::string kIntro =
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
    "I will quiz you about the important information there.\n";
const std::string kKey = "The pass key is 31415. Remember it. 31415 is the pass key. ";
const std::string kAsk = "\nWhat is the pass key? The pass key is";

TEST(Passkey, PromptHidesTheKeyBeforeTheChosenFiller) {
  const std::string f = kPasskeyFiller;
  EXPECT_EQ(passkey_prompt(3, 1, "31415"), kIntro + f + kKey + f + f + kAsk);
  EXPECT_EQ(passkey_prompt(3, 0, "31415"), kIntro + kKey + f + f + f + kAsk);
}

TEST(Passkey, KeyPastTheLastFillerGoesAtTheEnd) {
  const std::string f = kPasskeyFiller;
  EXPECT_EQ(passkey_prompt(2, 2, "31415"), kIntro + f + f + kKey + kAsk);
  EXPECT_EQ(passkey_prompt(0, 0, "31415"), kIntro + kKey + kAsk);
}

TEST(Passkey, DepthBands) {
  EXPECT_EQ(depth_band(0.0, 3), 0);
  EXPECT_EQ(depth_band(0.33, 3), 0);
  EXPECT_EQ(depth_band(0.34, 3), 1);
  EXPECT_EQ(depth_band(0.99, 3), 2);
  EXPECT_EQ(depth_band(1.0, 3), 2);  // the top edge belongs to the last band
  EXPECT_EQ(depth_band(0.7, 1), 0);
}

}  // namespace
}  // namespace vq::eval
