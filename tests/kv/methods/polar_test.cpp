// PolarQuant: fused paths equal the plain reference; the angle codebooks are those of the paper's
// densities; with many bits per angle the transform round-trips (every quadrant of the level-1
// circle included); the default spends the paper's 3.875 bits per element.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "src/core/rng.h"
#include "src/kv/calib/lloyd_max.h"
#include "src/kv/calib/nuq.h"
#include "src/kv/methods/polar/polar_angles.h"
#include "tests/kv/codec_harness.h"
#include "veloxquant/error.h"

namespace vq::kv::testing {
namespace {

TEST(Method_polar, FusedEqualsReference) {
  for (const char* spec : {"polar", "polar:levels=1", "polar:levels=3,bits1=3,bits=3", "polar:levels=6,seed=3"}) {
    check_all(spec, {64, 128, 256}, 64);
  }
  check_all("k=polar,v=turbo:bits=3", {64, 128, 256}, 64, fixed_lane_tol(256));  // fixed-point values
}

TEST(Method_polar, BitsPerElementAreThePapers) {
  // d/2 level-1 angles at 4 bits, d/4 + d/8 + d/16 angles at 2 bits, d/16 fp16 radii.
  EXPECT_DOUBLE_EQ(parse_method("polar").bits_per_element(128), 3.875);
  EXPECT_DOUBLE_EQ(parse_method("polar").bits_per_element(256), 3.875);
  EXPECT_DOUBLE_EQ(parse_method("polar:levels=1,bits1=3").bits_per_element(64), 9.5);
  EXPECT_THROW(parse_method("polar:levels=7").keys().key_codec(CodecContext{64, 0}), Error);
  EXPECT_THROW(parse_method("polar").keys().key_codec(CodecContext{96, 0}), Error);
  EXPECT_THROW(parse_method("polar:bits=0"), Error);
}

// Level 2: density proportional to sin(2 psi) on [0, pi/2]; its 1-bit Lloyd–Max levels are
// pi/4 -+ E|psi - pi/4| = pi/4 -+ (pi/4 - 1/2). Higher levels concentrate around pi/4.
TEST(Method_polar, AngleCodebooksFollowTheDensities) {
  const LloydMax& l2 = lloyd_max_polar_angle(2, 1);
  ASSERT_EQ(l2.levels.size(), 2u);
  EXPECT_NEAR(l2.levels[1], M_PI / 4 + (M_PI / 4 - 0.5), 1e-5);
  EXPECT_NEAR(l2.levels[0], M_PI / 4 - (M_PI / 4 - 0.5), 1e-5);
  double prev = 1e9;
  for (int level = 2; level <= 6; ++level) {
    const LloydMax& q = lloyd_max_polar_angle(level, 2);
    EXPECT_NEAR(q.levels[0] + q.levels[3], M_PI / 2, 1e-5);  // symmetric about pi/4
    const double spread = q.levels[3] - q.levels[0];
    EXPECT_LT(spread, prev);
    prev = spread;
  }
}

double relative_error(const std::string& spec, int d, uint64_t seed) {
  const Method m = parse_method(spec);
  const auto kc = m.keys().key_codec(CodecContext{d, 0});
  const int B = kc->block_tokens();
  const std::vector<float> x = make_data(Data::kOutliers, size_t(B), d, seed);
  std::vector<float> y(x.size());
  std::vector<uint8_t> block(kc->block_bytes());
  kc->encode(x.data(), 0, block.data());
  kc->decode(block.data(), 0, y.data());
  double err = 0, ref = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err += std::pow(double(x[i]) - y[i], 2);
    ref += double(x[i]) * x[i];
  }
  return std::sqrt(err / ref);
}

// With 8 bits per angle every angle is within a few thousandths of a radian, so a transform that
// put any quadrant of the level-1 circle in the wrong place would show as an O(1) error.
// The angle codes from comparisons are the codes of the angle itself: atan2 wrapped onto the
// circle and floored into k cells at level 1, the nearest-level rule on [0, pi/2] above. Points
// on the axes and signed zeros included; a point within 1e-9 of an edge may go either way.
TEST(Method_polar, AngleCodesWithoutArcTangent) {
  Rng rng(5);
  std::vector<std::pair<double, double>> pts;
  for (double a : {0.0, -0.0, 1.5, -1.5}) {
    for (double b : {0.0, -0.0, 2.0, -2.0}) pts.push_back({a, b});
  }
  for (int i = 0; i < 20000; ++i) pts.push_back({rng.normal(), rng.normal()});
  for (int k : {2, 4, 8, 16}) {
    const std::vector<polar::Edge> e = polar::circle_edges(k);
    for (auto [a, b] : pts) {
      double psi = std::atan2(b, a);
      if (psi < 0) psi += 2 * M_PI;
      const double cells = psi * k / (2 * M_PI);
      if (std::fabs(cells - std::round(cells)) < 1e-9 && std::fabs(a) > 0 && std::fabs(b) > 0) continue;
      EXPECT_EQ(polar::circle_cell(a, b, k, e), std::min(k - 1, int(cells))) << "k " << k << " a " << a << " b " << b;
    }
  }
  for (int level = 2; level <= 4; ++level) {
    const std::vector<float> levels = lloyd_max_polar_angle(level, 2).levels;
    const std::vector<float> mids = level_midpoints(levels);
    std::vector<polar::Edge> e;
    for (float m : mids) e.push_back(polar::edge(double(m)));
    for (auto [a, b] : pts) {
      const double u = std::fabs(a), v = std::fabs(b), psi = std::atan2(v, u);
      bool near = false;
      for (float m : mids) near = near || std::fabs(psi - double(m)) < 1e-9;
      if (near) continue;
      EXPECT_EQ(polar::edges_below(u, v, e), nearest_level(mids.data(), int(mids.size()), float(psi)))
          << "level " << level << " u " << u << " v " << v;
    }
  }
}

TEST(Method_polar, RoundTripsWithFineAngles) {
  for (int levels : {1, 4, 7}) {
    const double e = relative_error("polar:bits1=8,bits=8,levels=" + std::to_string(levels), 128, 5);
    EXPECT_LT(e, 0.01) << "levels " << levels;
  }
  // The default is lossy but far from random (a random direction has relative error ~1.4).
  const double e = relative_error("polar", 128, 6);
  ::testing::Test::RecordProperty("default_relative_error", std::to_string(e));
  EXPECT_LT(e, 0.35);
}

}  // namespace
}  // namespace vq::kv::testing

namespace vq::kv::testing {
namespace {

// Angles of up to 4 bits decode through register tables a vector of angles at a time
// (polar_kernels.h); each output is the scalar walk's one product, so every target (the scalar
// one walks) gives the same bits, for levels shorter than a vector too (d = 16, levels up to 4).
TEST(Method_polar, TableDecodeIsTheSameOnEveryTarget) {
  for (const char* spec : {"polar", "polar:levels=2,bits1=3,bits=1", "polar:levels=6,bits1=2,bits=4",
                           "polar:levels=3,bits1=5,bits=2"}) {
    for (int d : {16, 128, 256}) {
      SCOPED_TRACE(std::string(spec) + " d=" + std::to_string(d));
      const std::string s = spec;
      if (d == 16 && s.find("levels=6") != std::string::npos) continue;  // d >> levels must be >= 1
      const auto kc = parse_method(spec).keys().key_codec(CodecContext{d, 1});
      const Encoded e = encode_run(*kc, make_data(Data::kOutliers, 32, d, 41), 0);
      std::vector<float> first;
      EXPECT_GE(for_each_supported_target([&] {
                  const std::vector<float> x = decode_run(*kc, e, 0);
                  if (first.empty()) {
                    first = x;
                  } else {
                    EXPECT_EQ(std::memcmp(first.data(), x.data(), x.size() * 4), 0) << "bits differ from the first target";
                  }
                }),
                2);
    }
  }
}

}  // namespace
}  // namespace vq::kv::testing
