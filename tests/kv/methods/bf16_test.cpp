// bf16: fused paths equal the plain reference (plain and rotated, ragged and power-of-two
// head dims, extreme inputs), block bytes match the formula, and the error band holds.
#include <gtest/gtest.h>

#include "tests/kv/codec_harness.h"

namespace vq::kv::testing {
namespace {

TEST(Method_bf16, FusedEqualsReference) { check_all("bf16", {64, 80, 128, 256}); }

TEST(Method_bf16, RotatedFusedEqualsReference) { check_all("bf16:rot=1", {64, 96, 128, 256}); }

TEST(Method_bf16, ErrorBand) {
  // bf16 keeps 8 significant bits: relative error about 5e-6.
  EXPECT_LT(relative_mse("bf16", 128, true), 2e-5);
  EXPECT_LT(relative_mse("bf16", 128, false), 2e-5);
  EXPECT_LT(relative_mse("bf16:rot=1", 128, true), 2e-5);
}

TEST(Method_bf16, RotationTakesAnyDimensionUpToTheDenseLimit) { check_rotation_dims("bf16:rot=1"); }

}  // namespace
}  // namespace vq::kv::testing
