// CommVQ: scores with RoPE applied by turning the query equal scores on decoded, rotated keys (at
// small and large positions); the split search finds the codeword a brute-force search over all
// 4096 finds; codewords commute with rotations; EM lowers the distortion and more stages lower it
// further; bits per element and block bytes agree; calibrations survive the file.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "src/core/rng.h"
#include "src/kv/calib/commvq_codebook.h"
#include "tests/kv/calibrated_fixture.h"
#include "tests/kv/codec_harness.h"
#include "veloxquant/error.h"
#include "veloxquant/kv/calibration.h"

namespace vq::kv::testing {
namespace {

TEST(Method_commvq, FusedEqualsReference) {
  for (const char* spec : {"commvq:rounds=3", "commvq:kbits=1,vbits=3,residual=16,rounds=2", "k=q8,v=commvq:rounds=2"}) {
    check_calibrated_codec(spec, {64, 128}, 4000);
  }
}

// Far positions: the query turned back to each key's position against keys decoded and rotated
// forward, through the codec's own scores and decode.
TEST(Method_commvq, QueryRotationEqualsRotatedKeysAtFarPositions) {
  const Calibrated c = calibrated_on_synthetic("commvq", 64, 1024);
  const auto kc = c.method.keys().key_codec(c.ctx());
  const int d = 64, B = kc->block_tokens();
  for (int64_t pos0 : {int64_t(0), int64_t(7777), int64_t(123456)}) {
    const auto x = make_data(Data::kOutliers, size_t(B) * 2, d, 21);
    const Encoded e = encode_run(*kc, x, pos0);
    const auto dec = decode_run(*kc, e, pos0);
    std::vector<float> q(static_cast<size_t>(d)), st(kc->query_state_floats()), s(size_t(2 * B));
    Rng rng(5);
    for (auto& v : q) v = float(rng.normal());
    kc->prepare_query(q.data(), st.data());
    kc->scores(st.data(), 1, e.bytes.data(), pos0, 0, 2 * B, s.data(), size_t(2 * B));
    for (int t = 0; t < 2 * B; ++t) {
      double ref = 0;
      for (int j = 0; j < d; ++j) ref += double(q[size_t(j)]) * dec[size_t(t) * d + j];
      EXPECT_NEAR(s[size_t(t)], ref, 1e-5 * (1.0 + norm(q.data(), d) * norm(dec.data() + size_t(t) * d, d)))
          << "pos " << pos0 + t;
    }
  }
}

std::vector<float> random_book(int d, int stages, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> b(size_t(stages) * 2 * 64 * (d / 2));
  for (auto& x : b) x = float(rng.normal() * 0.1);
  return b;
}

TEST(Method_commvq, SplitSearchEqualsBruteForce) {
  const int d = 32, P = d / 2;
  const CommCodebook cb(d, random_book(d, 1, 3));
  const std::vector<float>& th = cb.book();
  Rng rng(9);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<float> e(static_cast<size_t>(d));
    for (auto& x : e) x = float(rng.normal() * 0.3);
    double best = std::numeric_limits<double>::infinity();
    for (int a = 0; a < 64; ++a) {
      for (int b = 0; b < 64; ++b) {
        double dd = 0;
        for (int f = 0; f < P; ++f) {
          const double cx = th[size_t(a) * P + f] - th[size_t(64 + b) * P + f];
          const double cy = th[size_t(64 + a) * P + f] + th[size_t(b) * P + f];
          dd += std::pow(e[2 * size_t(f)] - cx, 2) + std::pow(e[2 * size_t(f) + 1] - cy, 2);
        }
        best = std::min(best, dd);
      }
    }
    int a = 0, b = 0;
    cb.nearest(0, e.data(), &a, &b);
    double got = 0;
    for (int f = 0; f < P; ++f) {
      const double cx = th[size_t(a) * P + f] - th[size_t(64 + b) * P + f];
      const double cy = th[size_t(64 + a) * P + f] + th[size_t(b) * P + f];
      got += std::pow(e[2 * size_t(f)] - cx, 2) + std::pow(e[2 * size_t(f) + 1] - cy, 2);
    }
    EXPECT_LE(got, best + 1e-5) << "trial " << trial;
  }
}

// A codeword turned pair by pair (angle t_f at pair f) is the codeword of the codebook whose
// half-codes z_j are turned the same way: rotation and decoding commute.
TEST(Method_commvq, CodewordsCommuteWithRotation) {
  const int d = 16, P = d / 2;
  const std::vector<float> book = random_book(d, 1, 4);
  std::vector<float> turned = book;
  std::vector<double> t(static_cast<size_t>(P));
  for (int f = 0; f < P; ++f) t[size_t(f)] = 0.37 * (f + 1);
  for (int j = 0; j < 64; ++j) {
    for (int f = 0; f < P; ++f) {
      const double x = book[size_t(j) * P + f], y = book[size_t(64 + j) * P + f];
      turned[size_t(j) * P + f] = float(std::cos(t[size_t(f)]) * x - std::sin(t[size_t(f)]) * y);
      turned[size_t(64 + j) * P + f] = float(std::sin(t[size_t(f)]) * x + std::cos(t[size_t(f)]) * y);
    }
  }
  const CommCodebook a(d, book), b(d, turned);
  for (int code = 0; code < 4096; code += 37) {
    const uint8_t codes[2] = {uint8_t(code / 64), uint8_t(code % 64)};
    std::vector<float> u(static_cast<size_t>(d)), v(static_cast<size_t>(d));
    a.decode(codes, u.data());
    b.decode(codes, v.data());
    for (int f = 0; f < P; ++f) {
      const double c = std::cos(t[size_t(f)]), s = std::sin(t[size_t(f)]);
      EXPECT_NEAR(c * u[2 * size_t(f)] - s * u[2 * size_t(f) + 1], v[2 * size_t(f)], 1e-5);
      EXPECT_NEAR(s * u[2 * size_t(f)] + c * u[2 * size_t(f) + 1], v[2 * size_t(f) + 1], 1e-5);
    }
  }
}

// Relative reconstruction error of a trained codebook on its own training vectors.
double train_error(int stages, int rounds) {
  const int d = 32, n = 2048;
  Rng rng(13);
  std::vector<float> x(size_t(n) * d);
  for (int i = 0; i < n; ++i) {
    double ss = 0;
    for (int j = 0; j < d; ++j) ss += std::pow(x[size_t(i) * d + j] = float(rng.normal() * (j < 4 ? 4.0 : 1.0)), 2);
    for (int j = 0; j < d; ++j) x[size_t(i) * d + j] = float(x[size_t(i) * d + j] / std::sqrt(ss));
  }
  const CommCodebook cb(d, train_comm_codebook(x, n, d, stages, rounds, 7));
  double err = 0;
  std::vector<float> e(static_cast<size_t>(d));
  std::vector<uint8_t> codes(size_t(2) * stages);
  for (int i = 0; i < n; ++i) {
    std::copy_n(x.data() + size_t(i) * d, d, e.data());
    cb.encode(e.data(), codes.data());
    for (float r : e) err += double(r) * r;
  }
  return err / n;  // unit vectors: the relative error
}

TEST(Method_commvq, EmAndStagesLowerTheDistortion) {
  const double one_round = train_error(2, 1), em = train_error(2, 12), more = train_error(6, 12);
  EXPECT_LT(em, one_round);
  EXPECT_LT(more, 0.8 * em);
  EXPECT_LT(em, 1.0);
}

TEST(Method_commvq, BitsAndRefusals) {
  // d = 128, 2 bits: 21 stages of 12 bits and the fp16 norm.
  EXPECT_DOUBLE_EQ(parse_method("commvq").bits_per_element(128), (16.0 + 256) / 128);  // 42 six-bit codes: 32 bytes
  EXPECT_DOUBLE_EQ(parse_method("commvq:kbits=1,vbits=1").bits_per_element(256), (16.0 + 256) / 256);
  EXPECT_THROW(parse_method("commvq:kbits=5"), Error);
  EXPECT_THROW(parse_method("commvq").keys().key_codec(CodecContext{128, 0}), Error);  // uncalibrated
}

TEST(Method_commvq, CalibrationSurvivesTheFile) {
  const Calibrated c = calibrated_on_synthetic("commvq:rounds=2", 32, 512);
  const Calibration back = parse_calibration(serialize_calibration(*c.calib), "test");
  EXPECT_EQ(back.layers[0].key_commvq, c.calib->layers[0].key_commvq);
  EXPECT_EQ(back.layers[0].value_commvq, c.calib->layers[0].value_commvq);
  ASSERT_EQ(c.calib->layers[0].key_commvq.size(), 1u);
  EXPECT_EQ(c.calib->layers[0].key_commvq[0].size(), size_t(32 * 2 / 12) * 2 * 64 * 16);
  Calibration bad = *c.calib;
  bad.layers[0].value_commvq[0].pop_back();  // not whole stages
  EXPECT_THROW(parse_calibration(serialize_calibration(bad), "bad"), Error);
}

}  // namespace
}  // namespace vq::kv::testing
