// SpectralQuant: fused scores and accumulation equal the plain reference; the learned basis finds
// the directions and deviations a known covariance has; the effective dimension is the
// participation ratio; per-head bases reach the right heads through the cache (fused attention
// equals the reference with two KV heads of different spectra); bits per element and block bytes
// agree; calibrations survive the file and damaged ones are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "src/core/rng.h"
#include "src/kv/calib/calibrate.h"
#include "src/kv/calib/spectral_basis.h"
#include "tests/kv/calibrated_fixture.h"
#include "tests/kv/codec_harness.h"
#include "veloxquant/error.h"
#include "veloxquant/kv/cache.h"
#include "veloxquant/kv/calibration.h"

namespace vq::kv::testing {
namespace {

TEST(Method_spectral, FusedEqualsReference) {
  for (const char* spec : {"spectral", "spectral:hi=3,lo=1", "spectral:lo=0", "spectral:rank=8,hi=8,lo=4,residual=16",
                           "k=spectral,v=q8", "k=q4,v=spectral:hi=5"}) {
    check_calibrated_codec(spec, {64, 96, 128}, 3000);
  }
}

// Parts that are not whole groups of 32 coordinates keep a tail of bytes in the lane layout
// (lane_words.h): every tail length class (up to 8, 16, 24, 32 channels) at 2 to 4 bits, one-bit
// noise parts over whole groups, and a one-bit part with a tail (the row path), on every target.
TEST(Method_spectral, LanesWithTailsMatchTheReferenceOnEveryTarget) {
  const int tried = for_each_supported_target([] {
    for (const char* spec : {"spectral:rank=13", "spectral:rank=37,hi=3,lo=2", "spectral:rank=5,hi=2,lo=2",
                             "spectral:rank=23,hi=4,lo=3", "spectral:rank=32,hi=4,lo=1", "spectral:rank=7,hi=4,lo=1",
                             "spectral:rank=30,lo=0"}) {
      check_calibrated_codec(spec, {64, 96, 128}, 3100, 1024, nullptr, fixed_lane_tol(128));
    }
  });
  EXPECT_GE(tried, 2);
}

// Vectors mu + sum_i s_i g_i e_i + noise along the first three axes of a random orthonormal
// frame e: the basis recovers those axes and deviations.
TEST(Method_spectral, BasisRecoversAKnownCovariance) {
  const int d = 48;
  const int64_t n = 20000;
  Rng rng(11);
  // A random orthonormal frame by Gram-Schmidt.
  std::vector<double> e(size_t(d) * d);
  for (auto& x : e) x = rng.normal();
  for (int i = 0; i < d; ++i) {
    for (int k = 0; k < i; ++k) {
      double p = 0;
      for (int j = 0; j < d; ++j) p += e[size_t(i) * d + j] * e[size_t(k) * d + j];
      for (int j = 0; j < d; ++j) e[size_t(i) * d + j] -= p * e[size_t(k) * d + j];
    }
    double nn = 0;
    for (int j = 0; j < d; ++j) nn += e[size_t(i) * d + j] * e[size_t(i) * d + j];
    for (int j = 0; j < d; ++j) e[size_t(i) * d + j] /= std::sqrt(nn);
  }
  const double s[3] = {10.0, 5.0, 3.0}, noise = 0.1;
  std::vector<float> rows(size_t(n) * d);
  for (int64_t t = 0; t < n; ++t) {
    for (int i = 0; i < d; ++i) {
      const double g = rng.normal() * (i < 3 ? s[i] : noise);
      for (int j = 0; j < d; ++j) rows[size_t(t) * d + j] += float(g * e[size_t(i) * d + j]);
    }
    rows[size_t(t) * d + 7] += 2.0f;  // a mean
  }
  const SpectralBasis b = spectral_basis(rows, n, d);
  EXPECT_NEAR(b.mean[7], 2.0, 0.15);
  for (int i = 0; i < 3; ++i) {
    double p = 0;
    for (int j = 0; j < d; ++j) p += double(b.basis[size_t(i) * d + j]) * e[size_t(i) * d + j];
    EXPECT_GT(std::fabs(p), 0.999) << "direction " << i;
    EXPECT_NEAR(b.sigma[size_t(i)], s[i], 0.03 * s[i]) << "deviation " << i;
  }
  for (int i = 3; i < d; ++i) EXPECT_NEAR(b.sigma[size_t(i)], noise, 0.2 * noise);
  // Participation ratio of lambda = (100, 25, 9, 45 x 0.01).
  const double l = 100 + 25 + 9 + 45 * 0.01, l2 = 100 * 100 + 25 * 25 + 81 + 45 * 1e-4;
  EXPECT_NEAR(participation_ratio(b), l * l / l2, 0.05 * l * l / l2);
}

TEST(Method_spectral, ParticipationRatioOfExactSpectra) {
  SpectralBasis flat, one;
  flat.sigma.assign(16, 2.0f);
  one.sigma.assign(16, 1e-6f);
  one.sigma[0] = 1.0f;
  EXPECT_NEAR(participation_ratio(flat), 16.0, 1e-9);
  EXPECT_NEAR(participation_ratio(one), 1.0, 1e-6);
}

// Two KV heads with different spectra: each must be coded in its own basis. A cache whose heads
// were calibrated on each other's data would still match its reference, so the check is on
// reconstruction: each head's decoded keys are close to what went in.
TEST(Method_spectral, PerHeadBasesThroughTheCache) {
  const int d = 64, H = 2, n = 1024;
  const Method m = parse_method("spectral:hi=4,lo=2");
  Rng rng(4);
  // Head 0 lives in the first 8 channels, head 1 in the last 8 (plus small noise elsewhere).
  const auto make = [&](int count) {
    std::vector<float> x(size_t(count) * H * d);
    for (int t = 0; t < count; ++t) {
      for (int h = 0; h < H; ++h) {
        for (int j = 0; j < d; ++j) {
          const bool strong = h == 0 ? j < 8 : j >= d - 8;
          x[(size_t(t) * H + h) * d + j] = float(rng.normal() * (strong ? 4.0 : 0.05));
        }
      }
    }
    return x;
  };
  const auto ck = make(n), cv = make(n);
  const LayerConfig cfg(H, d, 0, 0, neox());
  auto calib = calibrate_on_synthetic(m, cfg, ck.data(), cv.data(), n, 1, "test");
  ASSERT_EQ(calib->layers[0].key_spectral.size(), size_t(H));
  const Method mc = m.with_calibration(calib);
  LayerCache cache(mc, cfg);
  // Keys are stored as the cache receives them: turn the test keys by RoPE as a model would.
  const int T = 200;
  auto k = make(T), v = make(T);
  const RopeTable rope(d, neox());
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) rope.rotate(k.data() + (size_t(t) * H + h) * d, t, false);
  }
  cache.append(k.data(), v.data(), T);
  for (int h = 0; h < H; ++h) {
    std::vector<float> dk, dv;
    std::vector<int64_t> pos;
    cache.decode_head(h, &dk, &dv, &pos);
    ASSERT_EQ(pos.size(), size_t(T));
    double num = 0, den = 0;
    for (int t = 0; t < T; ++t) {
      for (int j = 0; j < d; ++j) {
        const double x = v[(size_t(t) * H + h) * d + j];
        num += std::pow(x - dv[size_t(t) * d + j], 2);
        den += x * x;
      }
    }
    EXPECT_LT(num / den, 0.02) << "head " << h;  // in the other head's basis it would be ~1
  }
  // Fused attention with GQA (4 query heads over 2 KV heads) against the reference.
  std::vector<float> q(size_t(3) * 4 * d);
  for (auto& x : q) x = float(rng.normal());
  const int64_t qpos[3] = {T - 3, T - 2, T - 1};
  std::vector<float> fused(q.size()), ref(q.size());
  cache.attend(q.data(), 3, 4, qpos, 0.125f, fused.data());
  cache.attend_reference(q.data(), 3, 4, qpos, 0.125f, ref.data());
  for (size_t i = 0; i < q.size(); i += size_t(d)) {
    double num = 0, den = 0;
    for (int j = 0; j < d; ++j) {
      num += std::pow(double(fused[i + size_t(j)]) - ref[i + size_t(j)], 2);
      den += double(ref[i + size_t(j)]) * ref[i + size_t(j)];
    }
    EXPECT_LT(std::sqrt(num / den), 1e-4);
  }
  // Memory: per-head bases counted once per head.
  EXPECT_EQ(cache.memory().param_bytes,
            2 * (cache.key_codec(0).param_bytes() + cache.value_codec(0).param_bytes()));
}

TEST(Method_spectral, BitsAndRefusals) {
  // hi=4 over rank 8 and lo=2 over 120 coordinates of d = 128, each part with its fp16 scale.
  const Calibrated c = calibrated_on_synthetic("spectral:rank=8", 128, 512);
  EXPECT_DOUBLE_EQ(c.method.keys().key_bits(128), 8.0 * (2 + 4 * 1 + 2 + 2 * 15) / 128);
  EXPECT_DOUBLE_EQ(parse_method("spectral:lo=0,rank=16").bits_per_element(128), 8.0 * (2 + 4 * 2) / 128);
  // In the lane layout a part's codes are one bit string: rank 13 at 4 bits takes 7 bytes (bit
  // planes would take 4 x 2) and 115 noise coordinates at 2 bits take 29 (2 x 15 as planes).
  EXPECT_DOUBLE_EQ(calibrated_on_synthetic("spectral:rank=13", 128, 512).method.keys().key_bits(128),
                   8.0 * (2 + 7 + 2 + 29) / 128);
  // A one-bit part with a tail keeps the row layout's bit planes.
  EXPECT_DOUBLE_EQ(calibrated_on_synthetic("spectral:rank=7,lo=1", 128, 512).method.keys().key_bits(128),
                   8.0 * (2 + 4 * 1 + 2 + 1 * 16) / 128);
  EXPECT_THROW(parse_method("spectral:hi=2,lo=3"), Error);
  EXPECT_THROW(parse_method("spectral").keys().key_codec(CodecContext{128, 0}), Error);  // uncalibrated
  // The participation ratio decides the rank when the spec does not.
  const Calibrated a = calibrated_on_synthetic("spectral", 64, 1024);
  EXPECT_GE(a.calib->layers[0].key_rank, 1);
  EXPECT_LE(a.calib->layers[0].key_rank, 64);
}

TEST(Method_spectral, CalibrationSurvivesTheFileAndDamageIsRefused) {
  const Calibrated c = calibrated_on_synthetic("spectral", 32, 512);
  const Calibration back = parse_calibration(serialize_calibration(*c.calib), "test");
  const LayerCalibration &a = c.calib->layers[0], &b = back.layers[0];
  EXPECT_EQ(a.key_rank, b.key_rank);
  EXPECT_EQ(a.value_rank, b.value_rank);
  ASSERT_EQ(b.key_spectral.size(), 1u);
  EXPECT_EQ(a.key_spectral[0].basis, b.key_spectral[0].basis);
  EXPECT_EQ(a.value_spectral[0].sigma, b.value_spectral[0].sigma);
  EXPECT_EQ(a.value_spectral[0].mean, b.value_spectral[0].mean);
  // A basis row that is not a unit vector, and deviations that are not descending.
  Calibration bad = *c.calib;
  for (int j = 0; j < 32; ++j) bad.layers[0].key_spectral[0].basis[size_t(j)] *= 1.01f;
  EXPECT_THROW(parse_calibration(serialize_calibration(bad), "bad"), Error);
  bad = *c.calib;
  bad.layers[0].value_spectral[0].sigma[5] = bad.layers[0].value_spectral[0].sigma[0] * 2;
  EXPECT_THROW(parse_calibration(serialize_calibration(bad), "bad"), Error);
  bad = *c.calib;
  bad.layers[0].key_spectral.clear();  // a rank without its bases
  EXPECT_THROW(parse_calibration(serialize_calibration(bad), "bad"), Error);
}

}  // namespace
}  // namespace vq::kv::testing
