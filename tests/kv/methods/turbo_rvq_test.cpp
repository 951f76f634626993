// TurboQuant-RVQ: fused paths equal the plain reference; the solver's Gaussian and Laplace
// codebooks are the published Lloyd–Max quantizers; the two stages' distortion lies where theory
// puts it (below one stage of B bits, not below the optimal scalar quantizer of 2B bits); bits per
// element count both stages and the norm.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "src/core/rng.h"
#include "src/kv/calib/lloyd_max.h"
#include "tests/kv/codec_harness.h"
#include "veloxquant/error.h"

namespace vq::kv::testing {
namespace {

TEST(Method_turbo_rvq, FusedEqualsReference) {
  for (const char* spec :
       {"turbo-rvq", "turbo-rvq:bits=1", "turbo-rvq:bits=3,seed=5", "turbo-rvq:bits=4", "k=turbo-rvq:bits=1,v=turbo:bits=2"}) {
    check_all(spec, {64, 128, 256}, 64, fixed_lane_tol(256));
  }
  check_all("turbo-rvq", {96}, 64, fixed_lane_tol(96));  // the dense random rotation
}

TEST(Method_turbo_rvq, BitsPerElementCountBothStagesAndTheNorm) {
  EXPECT_DOUBLE_EQ(parse_method("turbo-rvq").bits_per_element(128), 4.125);
  EXPECT_DOUBLE_EQ(parse_method("turbo-rvq:bits=1").bits_per_element(256), 2.0625);
  EXPECT_THROW(parse_method("turbo-rvq:bits=5"), Error);
  check_rotation_dims("turbo-rvq");
}

// Max (1960) and Paez & Glisson (1972): the unit-variance Gaussian's 1-bit quantizer is
// +-sqrt(2/pi) with distortion 1 - 2/pi, its 2-bit one +-0.4528, +-1.5104 (distortion 0.1175);
// the unit-variance Laplace density's 1-bit quantizer is +-1/sqrt(2) (distortion 1/2), its 2-bit
// one +-0.4196, +-1.8340 (distortion 0.1765).
TEST(LloydMax, GaussianAndLaplaceCodebooksAreThePublishedOnes) {
  const LloydMax& g1 = lloyd_max_gaussian(1);
  EXPECT_NEAR(g1.levels[1], std::sqrt(2.0 / M_PI), 1e-5);
  EXPECT_NEAR(g1.coordinate_mse, 1.0 - 2.0 / M_PI, 1e-5);
  const LloydMax& g2 = lloyd_max_gaussian(2);
  EXPECT_NEAR(g2.levels[2], 0.4528, 5e-4);
  EXPECT_NEAR(g2.levels[3], 1.5104, 5e-4);
  EXPECT_NEAR(g2.coordinate_mse, 0.1175, 5e-4);
  const LloydMax& l1 = lloyd_max_laplace(1);
  EXPECT_NEAR(l1.levels[1], 1.0 / std::sqrt(2.0), 1e-5);
  EXPECT_NEAR(l1.coordinate_mse, 0.5, 1e-5);
  const LloydMax& l2 = lloyd_max_laplace(2);
  EXPECT_NEAR(l2.levels[2], 0.4196, 5e-4);
  EXPECT_NEAR(l2.levels[3], 1.8340, 5e-4);
  EXPECT_NEAR(l2.coordinate_mse, 0.1765, 5e-4);
  EXPECT_THROW(lloyd_max_laplace(9), Error);
}

double measured_distortion(const std::string& spec, int d, int n, uint64_t seed) {
  const Method m = parse_method(spec);
  const auto kc = m.keys().key_codec(CodecContext{d, 0});
  const int B = kc->block_tokens();
  Rng rng(seed);
  std::vector<float> x(size_t(B) * d), y(x.size());
  std::vector<uint8_t> block(kc->block_bytes());
  double sum = 0;
  int vectors = 0;
  for (; vectors < n; vectors += B) {
    for (int t = 0; t < B; ++t) {
      double ss = 0;
      for (int j = 0; j < d; ++j) ss += std::pow(x[size_t(t) * d + j] = float(rng.normal()), 2);
      for (int j = 0; j < d; ++j) x[size_t(t) * d + j] = float(x[size_t(t) * d + j] / std::sqrt(ss));
    }
    kc->encode(x.data(), 0, block.data());
    kc->decode(block.data(), 0, y.data());
    for (size_t i = 0; i < x.size(); ++i) sum += std::pow(double(x[i]) - y[i], 2);
  }
  return sum / vectors;
}

// Two greedy stages of B bits are a constrained quantizer with 2^(2B) levels: better than one
// stage of B bits, never better than the optimal scalar quantizer of 2B bits.
TEST(Method_turbo_rvq, DistortionLiesBetweenOneStageAndTheOptimalQuantizerOfTheSameBits) {
  const int d = 128, n = 2000;
  for (int b = 1; b <= 4; ++b) {
    const double rvq = measured_distortion("turbo-rvq:bits=" + std::to_string(b), d, n, uint64_t(300 + b));
    const double one_stage = lloyd_max_sphere(d, b).vector_mse(d);
    const double optimal = lloyd_max_sphere(d, 2 * b).vector_mse(d);
    SCOPED_TRACE("bits " + std::to_string(b) + ": rvq " + std::to_string(rvq) + ", one stage " +
                 std::to_string(one_stage) + ", optimal at 2B " + std::to_string(optimal));
    ::testing::Test::RecordProperty("rvq_distortion_bits_" + std::to_string(b), std::to_string(rvq));
    EXPECT_LT(rvq, one_stage);
    EXPECT_GT(rvq, optimal);
  }
}

}  // namespace
}  // namespace vq::kv::testing
