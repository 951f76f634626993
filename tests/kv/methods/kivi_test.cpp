// KIVI: fused scores/accumulation equal the plain reference for every bit width, both key axes
// and ragged groups; bits per element follow the formula; the residual policy (keys leave in
// whole blocks, values one by one); and the paper's qualitative finding on outlier-channel keys.
#include <gtest/gtest.h>

#include <vector>

#include "tests/kv/codec_harness.h"
#include "veloxquant/kv/cache.h"

namespace vq::kv::testing {
namespace {

TEST(Method_kivi, FusedEqualsReference) {
  for (const char* spec : {"kivi:residual=32", "kivi:kbits=3,vbits=3,residual=32", "kivi:kbits=4,vbits=4,residual=32",
                           "kivi:kaxis=token,residual=32", "kivi:group=24,residual=40"}) {
    check_all(spec, {64, 80, 128}, 80);
  }
  check_all("kivi", {128, 256}, 256);  // the default block of 128 tokens
}

// The lane kernels change their register blocking with the vector width (four channels and two
// accumulator sets per pass at 16 lanes, two and one below) and their code lookups with the
// instruction set (vpermps on AVX-512, a mask and a conversion elsewhere): every target this CPU
// runs takes its own path (on an AVX-512 machine also AVX2's and the scalar one).
TEST(Method_kivi, EveryTargetMatchesReference) {
  const int tried = for_each_supported_target([] {
    check_all("kivi:residual=32", {64, 128}, 80);
    check_all("kivi:kbits=4,vbits=4,residual=32", {64}, 80);
  });
  EXPECT_GE(tried, 2);  // the best target and the scalar one
}

TEST(Method_kivi, BitsPerElement) {
  const Method m = parse_method("kivi");
  EXPECT_DOUBLE_EQ(m.keys().key_bits(128), 3.0);    // 2 bits + fp16 scale and zero per 32 tokens
  EXPECT_DOUBLE_EQ(m.values().value_bits(128), 3.0);  // 2 bits + fp16 scale and zero per 32 channels
  EXPECT_DOUBLE_EQ(parse_method("kivi:kbits=4,vbits=3").bits_per_element(128), 4.5);
  EXPECT_DOUBLE_EQ(parse_method("kivi:group=24,residual=40").keys().key_bits(64), 2 + 32.0 * 2 / 40);
  EXPECT_EQ(parse_method("kivi:kaxis=token").spec(), "kivi:kaxis=token");
}

TEST(Method_kivi, ErrorShrinksWithBits) {
  const double e2 = relative_mse("kivi", 128, false), e3 = relative_mse("kivi:vbits=3", 128, false),
               e4 = relative_mse("kivi:vbits=4", 128, false);
  EXPECT_LT(e4, e3);
  EXPECT_LT(e3, e2);
  // 4 levels over a Gaussian group's range (about 4.1 sigma for 32 samples): step 1.37 sigma,
  // uniform error step^2/12 = 0.156 of the variance.
  EXPECT_LT(e2, 0.2);
  EXPECT_GT(e2, 0.1);
}

// KIVI's observation: keys have outlier channels, so grouping keys per channel (each channel its
// own scale) reconstructs them far better than per token at 2 bits.
TEST(Method_kivi, PerChannelKeysBeatPerTokenOnOutlierChannels) {
  EXPECT_LT(relative_mse("kivi", 128, true, Data::kOutliers),
            relative_mse("kivi:kaxis=token", 128, true, Data::kOutliers));
}

TEST(Method_kivi, KeysLeaveInWholeBlocksValuesOneByOne) {
  LayerCache cache(parse_method("kivi"), {1, 64, 0, 0});
  std::vector<float> x(64 * 300, 0.5f);
  cache.append(x.data(), x.data(), 300);
  const MemoryUsage m = cache.memory();
  EXPECT_EQ(m.key_elements_compressed, 256 * 64);          // two whole blocks of 128
  EXPECT_EQ(m.value_elements_compressed, (300 - 128) * 64);  // all but the newest 128
}

}  // namespace
}  // namespace vq::kv::testing
