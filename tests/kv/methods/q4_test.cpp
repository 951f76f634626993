// q4: fused paths equal the plain reference (plain and rotated, ragged and power-of-two
// head dims, extreme inputs), block bytes match the formula, and the error band holds.
#include <gtest/gtest.h>

#include "tests/kv/codec_harness.h"

namespace vq::kv::testing {
namespace {

TEST(Method_q4, FusedEqualsReference) { check_all("q4", {36, 64, 80, 100, 128, 256}); }

TEST(Method_q4, RotatedFusedEqualsReference) { check_all("q4:rot=1", {64, 128, 256}); }

TEST(Method_q4, ErrorBand) {
  // 4-bit groups of 32: relative MSE about 1e-2 on Gaussians.
  EXPECT_LT(relative_mse("q4", 128, true), 1.5e-2);
  EXPECT_LT(relative_mse("q4", 128, false), 1.5e-2);
  EXPECT_LT(relative_mse("q4:rot=1", 128, true), 1.5e-2);
}

TEST(Method_q4, RotationRejectsNonPowerOfTwo) {
  const Method m = parse_method("q4:rot=1");
  EXPECT_THROW(m.keys().key_codec({96, 0, 1}), Error);
}

}  // namespace
}  // namespace vq::kv::testing

namespace vq::kv::testing {
namespace {

// Rotation spreads outlier channels: on outlier-heavy keys, q4 with rot=1 reconstructs better.
TEST(Method_q4, RotationHelpsOutlierKeys) {
  EXPECT_LT(relative_mse("q4:rot=1", 128, true, Data::kOutliers),
            relative_mse("q4", 128, true, Data::kOutliers));
}

}  // namespace
}  // namespace vq::kv::testing
