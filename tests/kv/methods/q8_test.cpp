// q8: fused paths equal the plain reference (plain and rotated, ragged and power-of-two
// head dims, extreme inputs), block bytes match the formula, and the error band holds.
#include <gtest/gtest.h>

#include "tests/kv/codec_harness.h"

namespace vq::kv::testing {
namespace {

TEST(Method_q8, FusedEqualsReference) { check_all("q8", {64, 80, 128, 256}); }

TEST(Method_q8, RotatedFusedEqualsReference) { check_all("q8:rot=1", {64, 96, 128, 256}); }

TEST(Method_q8, ErrorBand) {
  // 8-bit symmetric groups of 32: relative MSE about 4e-5 on Gaussians.
  EXPECT_LT(relative_mse("q8", 128, true), 1e-4);
  EXPECT_LT(relative_mse("q8", 128, false), 1e-4);
  EXPECT_LT(relative_mse("q8:rot=1", 128, true), 1e-4);
}

TEST(Method_q8, RotationTakesAnyDimensionUpToTheDenseLimit) { check_rotation_dims("q8:rot=1"); }

}  // namespace
}  // namespace vq::kv::testing
