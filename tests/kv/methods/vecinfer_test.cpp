// VecInfer: fused lookup-table scores and centroid-weight accumulation equal the plain reference
// under RoPE; the encoder's register-resident search picks the centroid a brute-force search
// picks (ties to the first); bits per element and block bytes agree; calibration survives the
// file; the codec refuses to run uncalibrated.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "src/core/rng.h"
#include "src/kv/calib/calibrate.h"
#include "src/kv/rope_table.h"
#include "src/kv/vq_kernels.h"
#include "tests/kv/calibrated_fixture.h"
#include "tests/kv/codec_harness.h"
#include "veloxquant/error.h"
#include "veloxquant/kv/cache.h"
#include "veloxquant/kv/calibration.h"

namespace vq::kv::testing {
namespace {

Calibrated calibrated(const std::string& spec, int d) { return calibrated_on_synthetic(spec, d, 1024); }

TEST(Method_vecinfer, FusedEqualsReference) {
  for (const char* spec : {"vecinfer", "vecinfer:ksub=2,vsub=4", "vecinfer:ksub=8,vsub=16,residual=16"}) {
    check_calibrated_codec(spec, {64, 128, 256}, 2000);
  }
}

TEST(Method_vecinfer, BitsPerElementAndRefusals) {
  EXPECT_DOUBLE_EQ(parse_method("vecinfer").bits_per_element(128), 0.5 * (2.0 + 1.0));
  EXPECT_DOUBLE_EQ(parse_method("vecinfer:ksub=2,vsub=4").bits_per_element(256), 3.0);
  EXPECT_THROW(parse_method("vecinfer:kbits=4"), Error);
  EXPECT_THROW(parse_method("vecinfer").keys().key_codec(CodecContext{128, 0, 1}), Error);  // uncalibrated
  EXPECT_THROW(parse_method("vecinfer:ksub=3").keys().key_codec(CodecContext{128, 0, 1}), Error);
}

// Against a brute-force search in double precision: the chosen centroid is at the minimum
// distance (up to float rounding of |c|^2 - 2 x.c), and of equal centroids the first is chosen.
TEST(Method_vecinfer, EncoderPicksTheNearestCentroid) {
  Rng rng(5);
  for (int sub : {1, 2, 4, 8, 16}) {
    const int k = 256;
    std::vector<float> c(size_t(k) * sub), ct(c.size()), norms(static_cast<size_t>(k));
    for (float& x : c) x = float(rng.normal());
    for (int i = 0; i < 8; ++i) std::copy_n(c.data() + size_t(200 + i) * sub, sub, c.data() + size_t(40 + i) * sub);
    for (int i = 0; i < k; ++i) {
      double nn = 0;
      for (int j = 0; j < sub; ++j) {
        ct[size_t(j) * k + i] = c[size_t(i) * sub + j];
        nn += double(c[size_t(i) * sub + j]) * c[size_t(i) * sub + j];
      }
      norms[size_t(i)] = float(nn);
    }
    int exact = 0;
    for (int trial = 0; trial < 2000; ++trial) {
      std::vector<float> x(static_cast<size_t>(sub));
      // Every tenth query sits on a duplicated centroid: the first copy must win.
      const int on = trial % 10 == 0 ? 200 + (trial / 10) % 8 : -1;
      for (int j = 0; j < sub; ++j) x[size_t(j)] = on >= 0 ? c[size_t(on) * sub + j] : float(1.5 * rng.normal());
      double best = std::numeric_limits<double>::infinity();
      int best_i = -1;
      std::vector<double> dist(static_cast<size_t>(k));
      for (int i = 0; i < k; ++i) {
        double dd = 0;
        for (int j = 0; j < sub; ++j) dd += std::pow(double(x[size_t(j)]) - c[size_t(i) * sub + j], 2);
        dist[size_t(i)] = dd;
        if (dd < best) best = dd, best_i = i;
      }
      const int got = nearest_centroid(ct.data(), norms.data(), k, sub, x.data());
      ASSERT_GE(got, 0);
      ASSERT_LT(got, k);
      EXPECT_LE(dist[size_t(got)], best + 1e-5 * (1.0 + norms[size_t(best_i)])) << "sub " << sub << " trial " << trial;
      if (on >= 0) {
        EXPECT_EQ(got, on - 160) << "sub " << sub << ": of two equal centroids the first is chosen";
      }
      exact += got == best_i;
    }
    EXPECT_GE(exact, 1990) << "sub " << sub;  // ties aside, the same index
  }
}

TEST(Method_vecinfer, CalibrationSurvivesTheFile) {
  const Calibrated c = calibrated("vecinfer", 64);
  const Calibration back = parse_calibration(serialize_calibration(*c.calib), "test");
  EXPECT_EQ(back.layers[0].key_codebook, c.calib->layers[0].key_codebook);
  EXPECT_EQ(back.layers[0].value_codebook, c.calib->layers[0].value_codebook);
  EXPECT_EQ(back.layers[0].key_smooth, c.calib->layers[0].key_smooth);
  EXPECT_EQ(c.calib->layers[0].key_codebook.size(), size_t(64) * 256);
  // RoPE pairs (NEOX: i, i + d/2) share a smoothing divisor.
  for (int i = 0; i < 32; ++i) EXPECT_EQ(c.calib->layers[0].key_smooth[size_t(i)], c.calib->layers[0].key_smooth[size_t(i) + 32]);
}

}  // namespace
}  // namespace vq::kv::testing
