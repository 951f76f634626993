// fp16: fused paths equal the plain reference (plain and rotated, ragged and power-of-two
// head dims, extreme inputs), block bytes match the formula, and the error band holds.
#include <gtest/gtest.h>

#include "tests/kv/codec_harness.h"

namespace vq::kv::testing {
namespace {

TEST(Method_fp16, FusedEqualsReference) { check_all("fp16", {64, 80, 128, 256}); }

TEST(Method_fp16, RotatedFusedEqualsReference) { check_all("fp16:rot=1", {64, 96, 128, 256}); }

TEST(Method_fp16, ErrorBand) {
  // fp16 keeps 11 significant bits: relative error about 1e-7.
  EXPECT_LT(relative_mse("fp16", 128, true), 1e-6);
  EXPECT_LT(relative_mse("fp16", 128, false), 1e-6);
  EXPECT_LT(relative_mse("fp16:rot=1", 128, true), 1e-6);
}

TEST(Method_fp16, RotationTakesAnyDimensionUpToTheDenseLimit) { check_rotation_dims("fp16:rot=1"); }

}  // namespace
}  // namespace vq::kv::testing
