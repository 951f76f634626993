// QJL: fused scores equal the plain reference (the estimator's linear form); the score is an
// unbiased estimate of q.k whose variance is the theory's, with and without outlier channels, over
// many independently seeded sketches; bits per element count every byte; bad specs are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "src/core/rng.h"
#include "tests/kv/codec_harness.h"
#include "veloxquant/error.h"

namespace vq::kv::testing {
namespace {

// Values are KIVI's per-token codec: at 2 and 4 bits with whole 16-channel groups its lane kernel,
// which holds the weights in 16-bit fixed point (fixed_point_tol); scores to float rounding.
void check_qjl(const std::string& spec, const std::vector<int>& dims, int tokens) {
  for (int d : dims) check_all(spec, {d}, tokens, 1e-5, fixed_point_tol(d));
}

TEST(Method_qjl, FusedEqualsReference) {
  for (const char* spec : {"qjl", "qjl:outliers=0", "qjl:m=128,outliers=4,om=64,group=16,vbits=4",
                           "qjl:m=64,outliers=0,group=8,vbits=3,seed=5", "k=qjl:m=128,v=turbo:bits=3"}) {
    check_qjl(spec, {64, 128}, 96);
  }
  check_qjl("qjl:m=64,outliers=3", {96}, 96);
  check_qjl("qjl:m=64,outliers=2,group=16", {320}, 32);  // u16 channel indices
  // Outlier channels in the row layout: m not a multiple of 32, a group not a multiple of 16.
  check_qjl("qjl:m=40,outliers=4,group=8", {64}, 96);
  check_qjl("qjl:outliers=4,group=24", {128}, 96);
}

// Without outlier channels (m a multiple of 32) keys keep tokens in the vector lanes and score
// through TurboQuant's nibble-table kernel: equal to the reference and the same bits on every
// target the CPU runs, for several queries over a range that starts and ends inside a block.
TEST(Method_qjl, LaneKeysOnEveryTarget) {
  EXPECT_GE(for_each_supported_target([] { check_qjl("qjl:m=64,outliers=0", {64, 128}, 64); }), 2);
  for (const char* spec : {"qjl:outliers=0", "qjl:m=128,outliers=0,seed=4"}) {
    SCOPED_TRACE(spec);
    const int d = 128, n_q = 6, n = 80;
    const auto kc = parse_method(spec).keys().key_codec(CodecContext{d, 2});
    const auto q = make_data(Data::kGaussian, n_q, d, 31);
    const Encoded e = encode_run(*kc, make_data(Data::kOutliers, n, d, 32), 0);
    EXPECT_GE(scores_on_every_target(*kc, prepare_queries(*kc, q, n_q), n_q, e, 7, 75, [](const auto&) {}), 2);
  }
}

// With outlier channels (m, om multiples of 32, groups of a multiple of 16) keys are two lane parts
// whose nibble tables are rebuilt per group: equal to the reference and the same bits on every
// target, for several queries over a range that starts and ends inside a group.
TEST(Method_qjl, LaneKeysWithOutliersOnEveryTarget) {
  EXPECT_GE(for_each_supported_target([] { check_qjl("qjl:m=64,outliers=4,group=16", {64, 128}, 64); }), 2);
  for (const char* spec : {"qjl", "qjl:m=128,om=64,outliers=6,group=48,seed=4"}) {
    SCOPED_TRACE(spec);
    const int d = 128, n_q = 6, n = 144;  // 4 groups of 32 or 3 of 48
    const auto kc = parse_method(spec).keys().key_codec(CodecContext{d, 2});
    const auto q = make_data(Data::kGaussian, n_q, d, 31);
    const Encoded e = encode_run(*kc, make_data(Data::kOutliers, n, d, 32), 0);
    EXPECT_GE(scores_on_every_target(*kc, prepare_queries(*kc, q, n_q), n_q, e, 7, e.tokens - 5, [](const auto&) {}), 2);
  }
}

// With many query rows (prefill) the outlier channels' share comes from the keys' side: equal to
// the reference, and the same bits on every target, over a range that starts and ends inside a
// group; few rows take the tables (above), many rows the keys' side, both held to the reference.
TEST(Method_qjl, ManyRowsTakeTheOutlierShareFromTheKeys) {
  for (const char* spec : {"qjl", "qjl:m=128,om=64,outliers=6,group=48,seed=4", "qjl:m=64,outliers=11,group=16"}) {
    SCOPED_TRACE(spec);
    for (int d : {64, 128}) {
      for (Data kind : {Data::kGaussian, Data::kOutliers}) {
        check_fused_equals_reference(parse_method(spec), CodecContext{d, 3}, kind, 77 + uint64_t(d), 96, 40, 1e-5,
                                     fixed_point_tol(d));
      }
    }
    const int d = 128, n_q = 40, n = 144;
    const auto kc = parse_method(spec).keys().key_codec(CodecContext{d, 2});
    const auto q = make_data(Data::kGaussian, n_q, d, 31);
    const Encoded e = encode_run(*kc, make_data(Data::kOutliers, n, d, 32), 0);
    EXPECT_GE(scores_on_every_target(*kc, prepare_queries(*kc, q, n_q), n_q, e, 7, e.tokens - 5, [](const auto&) {}), 2);
  }
}

// Outlier indices outside the head or repeated (a crafted saved cache) are read safely, in the row
// layout (group 8) and the lane layout (group 16). The values are KIVI's lane codecs, whose
// weights are held in 16-bit fixed point: over one block of 16 tokens that is within 1e-3 of the
// sum of |w v| (the check's float tolerance is 1e-4).
TEST(Method_qjl, DamagedOutlierIndicesAreSkipped) {
  for (const char* spec : {"qjl:m=64,outliers=4,group=8", "qjl:m=64,outliers=4,group=16,vbits=3"}) {
    SCOPED_TRACE(spec);
    check_damaged_blocks(
        spec, 64,
        [](uint8_t* block, bool is_key) {
          if (!is_key) return;  // the value side is KIVI's, with no indices
          block[0] = 200;       // outside d = 64
          block[1] = 255;
          block[2] = block[3];  // a repeat
        },
        1e-3);
    check_damaged_blocks(
        spec, 512,
        [](uint8_t* block, bool is_key) {
          if (is_key) block[0] = block[1] = 0xFF;  // u16 index 65535, outside d = 512
        },
        1e-3);
  }
}

TEST(Method_qjl, BitsPerElementCountEveryByte) {
  // keys (m + 16 + om + 16) / d + 8 K / (G d); values (KIVI, vbits = 2, G = 32) 2 + 32 * 4 / 128
  EXPECT_DOUBLE_EQ(parse_method("qjl").keys().key_bits(128), (256.0 + 16 + 256 + 16) / 128 + 8.0 * 8 / (32 * 128));
  EXPECT_DOUBLE_EQ(parse_method("qjl").keys().key_bits(128), 4.265625);
  EXPECT_DOUBLE_EQ(parse_method("qjl").values().value_bits(128), 3.0);
  EXPECT_DOUBLE_EQ(parse_method("qjl").bits_per_element(128), (4.265625 + 3.0) / 2);
  EXPECT_DOUBLE_EQ(parse_method("qjl:outliers=0").keys().key_bits(128), 2.125);
  EXPECT_DOUBLE_EQ(parse_method("qjl:m=128,om=64,outliers=4,group=16").keys().key_bits(64),
                   (128.0 + 16 + 64 + 16) / 64 + 8.0 * 4 / (16 * 64));
  // d > 256: two bytes per channel index
  EXPECT_DOUBLE_EQ(parse_method("qjl:m=64,outliers=2").keys().key_bits(320), 160.0 / 320 + 8.0 * 2 * 2 / (32 * 320));
  EXPECT_DOUBLE_EQ(parse_method("qjl:vbits=4,group=64").values().value_bits(128), 4.5);
}

TEST(Method_qjl, BadSpecsAreRefused) {
  for (const char* spec : {"qjl:m=0", "qjl:m=12", "qjl:m=-8", "qjl:m=64,om=72", "qjl:om=12", "qjl:outliers=0,om=64",
                           "qjl:outliers=65", "qjl:vbits=1", "qjl:group=0", "qjl:seed=-1", "qjl:bits=3"}) {
    EXPECT_THROW(parse_method(spec), Error) << spec;
  }
  EXPECT_THROW(parse_method("qjl:outliers=8").keys().key_codec(CodecContext{8, 0}), Error);
  EXPECT_NO_THROW(parse_method("qjl:outliers=8").keys().key_codec(CodecContext{9, 0}));
}

double dot(const float* a, const float* b, int d, const std::vector<uint8_t>* mask = nullptr, bool in = false) {
  double s = 0;
  for (int j = 0; j < d; ++j) {
    if (mask && ((*mask)[size_t(j)] != 0) != in) continue;
    s += double(a[j]) * b[j];
  }
  return s;
}

struct Moments {
  double mean = 0, var = 0;
  size_t distinct = 0;
};

// The score of token 0 of a block of `keys` against q, for sketches seeded 1..n.
Moments scores_over_seeds(const std::string& spec_prefix, int d, const std::vector<float>& keys,
                          const std::vector<float>& q, double exact, int n) {
  std::vector<double> err;
  std::set<float> seen;
  for (int s = 1; s <= n; ++s) {
    const auto kc = parse_method(spec_prefix + ",seed=" + std::to_string(s)).keys().key_codec(CodecContext{d, 0});
    std::vector<uint8_t> block(kc->block_bytes());
    kc->encode(keys.data(), 0, block.data());
    std::vector<float> state(kc->query_state_floats());
    kc->prepare_query(q.data(), state.data());
    float score = 0;
    kc->scores(state.data(), 1, block.data(), 0, 0, 1, &score, 1);
    err.push_back(double(score) - exact);
    seen.insert(score);
  }
  Moments m;
  m.mean = std::accumulate(err.begin(), err.end(), 0.0) / n;
  for (double e : err) m.var += (e - m.mean) * (e - m.mean);
  m.var /= n - 1;
  m.distinct = seen.size();
  return m;
}

// A query correlated with key 0 (so a wrong scale shows as a bias), and keys with outlier channels.
void make_pair(int d, int G, std::vector<float>* keys, std::vector<float>* q) {
  *keys = make_data(Data::kOutliers, size_t(G), d, 77);
  Rng rng(78);
  q->resize(size_t(d));
  const double nk = norm(keys->data(), d);
  for (int j = 0; j < d; ++j) (*q)[size_t(j)] = float(0.8 * (*keys)[size_t(j)] / nk + 0.6 * rng.normal() / std::sqrt(d));
}

constexpr int kSketches = 1000;
// The sample variance of n near-Gaussian values has a relative standard error of sqrt(2 / (n - 1)):
// four of those is the band the measured variance must fall in.
const double kVarBand = 4.0 * std::sqrt(2.0 / (kSketches - 1));

TEST(Method_qjl, UnbiasedWithTheTheorysVariance) {
  const int d = 128, m = 256, G = 32;
  std::vector<float> keys, q;
  make_pair(d, G, &keys, &q);
  const double exact = dot(q.data(), keys.data(), d);
  const double nq = norm(q.data(), d), nk = norm(keys.data(), d);
  const Moments mo = scores_over_seeds("qjl:m=256,outliers=0", d, keys, q, exact, kSketches);
  const double se = std::sqrt(mo.var / kSketches);
  const double theory = (M_PI / 2 * nq * nq * nk * nk - exact * exact) / m;
  std::printf("qjl m=256: q.k = %.4f, mean error %.5f +- %.5f (SE), variance %.5f, theory %.5f, bound %.5f\n", exact,
              mo.mean, se, mo.var, theory, M_PI / 2 * nq * nq * nk * nk / m);
  EXPECT_EQ(mo.distinct, size_t(kSketches)) << "the seeds did not give different sketches";
  EXPECT_LE(std::fabs(mo.mean), 3 * se);
  EXPECT_LE(mo.var, M_PI / 2 * nq * nq * nk * nk / m * (1 + kVarBand));
  EXPECT_NEAR(mo.var / theory, 1.0, kVarBand);
}

TEST(Method_qjl, OutlierChannelsKeepItUnbiased) {
  const int d = 128, m = 256, om = 128, K = 8, G = 32;
  std::vector<float> keys, q;
  make_pair(d, G, &keys, &q);
  // The outlier channels, chosen here independently of the codec: largest norm over the group.
  std::vector<double> ss(size_t(d), 0.0);
  for (int t = 0; t < G; ++t) {
    for (int c = 0; c < d; ++c) ss[size_t(c)] += std::pow(double(keys[size_t(t) * d + c]), 2);
  }
  std::vector<int> order(static_cast<size_t>(d));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return ss[size_t(a)] > ss[size_t(b)]; });
  std::vector<uint8_t> mask(size_t(d), 0);
  for (int k = 0; k < K; ++k) mask[size_t(order[size_t(k)])] = 1;

  const double exact = dot(q.data(), keys.data(), d);
  const Moments mo = scores_over_seeds("qjl:m=256,outliers=8,om=128", d, keys, q, exact, kSketches);
  const double se = std::sqrt(mo.var / kSketches);
  // Two independent estimates (disjoint columns of S): inlier part with m rows, outlier part with om.
  const auto part = [&](bool out, int rows) {
    const double qq = dot(q.data(), q.data(), d, &mask, out), kk = dot(keys.data(), keys.data(), d, &mask, out);
    const double qk = dot(q.data(), keys.data(), d, &mask, out);
    return (M_PI / 2 * qq * kk - qk * qk) / rows;
  };
  const double theory = part(false, m) + part(true, om);
  std::printf("qjl m=256 om=128 K=8: q.k = %.4f, mean error %.5f +- %.5f (SE), variance %.5f, theory %.5f\n", exact,
              mo.mean, se, mo.var, theory);
  EXPECT_EQ(mo.distinct, size_t(kSketches));
  EXPECT_LE(std::fabs(mo.mean), 3 * se);
  EXPECT_NEAR(mo.var / theory, 1.0, kVarBand);
}

}  // namespace
}  // namespace vq::kv::testing
