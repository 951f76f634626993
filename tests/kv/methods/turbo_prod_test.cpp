// TurboQuant-Prod: fused paths equal the plain reference (the estimator's linear form); its MSE
// stage is TurboQuant-MSE at B-1 bits; the score is an unbiased estimate of q.x over many
// independently seeded rotations and sketches, with the variance the theory gives, while the MSE
// stage alone is visibly biased; bits per element count both norms; bad specs are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "src/core/rng.h"
#include "src/kv/methods/turbo/turbo_lanes.h"
#include "tests/kv/codec_harness.h"
#include "veloxquant/error.h"

namespace vq::kv::testing {
namespace {

TEST(Method_turbo_prod, FusedEqualsReference) {
  for (const char* spec : {"turbo-prod", "turbo-prod:bits=2", "turbo-prod:bits=4,m=64,seed=9",
                           "turbo-prod:bits=3,m=256", "k=turbo-prod:bits=3,v=turbo:bits=3"}) {
    check_all(spec, {64, 128, 256}, 64, fixed_lane_tol(256));
  }
  check_all("turbo-prod:bits=2,m=8", {8}, 64);
  check_all("turbo-prod", {96}, 64, fixed_lane_tol(96));  // the dense random rotation
}

TEST(Method_turbo_prod, BitsPerElementCountBothNorms) {
  // (B - 1) + m/d + 32/d
  EXPECT_DOUBLE_EQ(parse_method("turbo-prod").bits_per_element(128), 2 + 1 + 0.25);
  EXPECT_DOUBLE_EQ(parse_method("turbo-prod:bits=2").keys().key_bits(64), 1 + 1 + 0.5);
  EXPECT_DOUBLE_EQ(parse_method("turbo-prod:bits=4,m=64").values().value_bits(128), 3 + 0.5 + 0.25);
  EXPECT_DOUBLE_EQ(parse_method("turbo-prod:bits=3,m=256").keys().key_bits(256), 2 + 1 + 0.125);
  EXPECT_DOUBLE_EQ(parse_method("k=turbo-prod:bits=3,v=turbo:bits=3").bits_per_element(128), (3.25 + 3.125) / 2);
}

TEST(Method_turbo_prod, BadSpecsAreRefused) {
  for (const char* spec : {"turbo-prod:bits=1", "turbo-prod:bits=5", "turbo-prod:m=12", "turbo-prod:m=-8",
                           "turbo-prod:rot=1", "turbo-prod:seed=-3"}) {
    EXPECT_THROW(parse_method(spec), Error) << spec;
  }
  check_rotation_dims("turbo-prod");
  EXPECT_THROW(parse_method("turbo-prod").values().value_codec(CodecContext{4, 0}), Error);  // m = d = 4
  EXPECT_NO_THROW(parse_method("turbo-prod:m=8").values().value_codec(CodecContext{4, 0}));
}

// The MSE stage is TurboQuant-MSE at B-1 bits: with the same seed (same rotation) a token's norm
// and codes are byte for byte those turbo writes. Where head_dim and m are multiples of 32 the
// prod block is turbo's lane block then the signs' lane part (d = 128); otherwise a row per token
// [norm, residual norm, codes, signs] against turbo's row [norm, codes] (d = 72, m = 72).
TEST(Method_turbo_prod, MseStageIsTurboAtOneBitLess) {
  for (const auto& [d, m] : {std::pair{128, ""}, std::pair{72, ",m=72"}}) {
    SCOPED_TRACE("d " + std::to_string(d));
    const auto x = make_data(Data::kGaussian, 16, d, 5);
    for (int b = 2; b <= 4; ++b) {
      const auto pc =
          parse_method("turbo-prod:bits=" + std::to_string(b) + m).keys().key_codec(CodecContext{d, 0});
      const auto tc = parse_method("turbo:bits=" + std::to_string(b - 1)).keys().key_codec(CodecContext{d, 0});
      std::vector<uint8_t> pb(pc->block_bytes()), tb(tc->block_bytes());
      pc->encode(x.data(), 0, pb.data());
      tc->encode(x.data(), 0, tb.data());
      if (d % 32 == 0) {
        ASSERT_EQ(pb.size(), tb.size() + 32 + 2 * size_t(d)) << "the signs' part: 16 scales, d/8 bytes a token";
        EXPECT_EQ(0, std::memcmp(pb.data(), tb.data(), tb.size())) << "bits " << b;
        continue;
      }
      const size_t prow = pc->block_bytes() / 16, trow = tc->block_bytes() / 16;
      for (int t = 0; t < 16; ++t) {
        EXPECT_EQ(0, std::memcmp(&pb[t * prow], &tb[t * trow], 2)) << "norm, token " << t;
        EXPECT_EQ(0, std::memcmp(&pb[t * prow + 4], &tb[t * trow + 2], trow - 2)) << "codes, token " << t;
      }
    }
  }
}

double dot(const float* a, const float* b, int d) {
  double s = 0;
  for (int j = 0; j < d; ++j) s += double(a[j]) * b[j];
  return s;
}

constexpr int kSeeds = 1000;
// The sample variance of n near-Gaussian values has a relative standard error of sqrt(2 / (n - 1)).
const double kVarBand = 4.0 * std::sqrt(2.0 / (kSeeds - 1));

struct Run {
  double mean = 0, var = 0, theory_var = 0, bound_var = 0, mse_mean = 0, mse_se = 0;
  size_t distinct = 0;
};

// Scores of x against q for seeds 1..n; for each seed also TurboQuant-MSE's at B-1 bits (same
// rotation), whose error gives the residual r = (x - x_mse) / ||x|| and so the conditional variance
// ||x||^2 ((pi/2) ||q||^2 ||r||^2 - <q, r>^2) / m the theory gives.
Run run_seeds(int d, int bits, int m, bool values, const std::vector<float>& x16, const std::vector<float>& q) {
  const double exact = dot(q.data(), x16.data(), d);
  const double nq = norm(q.data(), d), nx = norm(x16.data(), d);
  std::vector<double> err, mse_err;
  std::set<std::string> seen;  // the encoded blocks: each seed must give its own
  Run run;
  for (int s = 1; s <= kSeeds; ++s) {
    const std::string seed = ",seed=" + std::to_string(s);
    const Method prod = parse_method("turbo-prod:bits=" + std::to_string(bits) + ",m=" + std::to_string(m) + seed);
    const Method mse = parse_method("turbo:bits=" + std::to_string(bits - 1) + seed);
    const CodecContext ctx{d, 2};
    double score = 0;
    std::vector<float> x_mse(size_t(16) * d);
    if (!values) {
      const auto kc = prod.keys().key_codec(ctx);
      std::vector<uint8_t> block(kc->block_bytes());
      kc->encode(x16.data(), 0, block.data());
      seen.insert(std::string(block.begin(), block.end()));
      std::vector<float> state(kc->query_state_floats());
      kc->prepare_query(q.data(), state.data());
      float sc = 0;
      kc->scores(state.data(), 1, block.data(), 0, 0, 1, &sc, 1);
      score = sc;
      const auto tc = mse.keys().key_codec(ctx);
      tc->encode(x16.data(), 0, block.data());
      tc->decode(block.data(), 0, x_mse.data());
    } else {
      // The value path: token 0 with weight 1, the others with weight 0, then q . output.
      const auto vc = prod.values().value_codec(ctx);
      std::vector<uint8_t> block(vc->block_bytes());
      vc->encode(x16.data(), 0, block.data());
      seen.insert(std::string(block.begin(), block.end()));
      std::vector<float> w(16, 0.0f), acc(vc->accum_floats(), 0.0f), out(static_cast<size_t>(d));
      w[0] = 1.0f;
      vc->accumulate(w.data(), 16, 1, block.data(), 0, 0, 16, acc.data());
      vc->finalize(acc.data(), 1, out.data());
      score = dot(q.data(), out.data(), d);
      const auto tc = mse.values().value_codec(ctx);
      tc->encode(x16.data(), 0, block.data());
      tc->decode(block.data(), 0, x_mse.data());
    }
    std::vector<float> r(static_cast<size_t>(d));
    for (int j = 0; j < d; ++j) r[size_t(j)] = float((x16[size_t(j)] - x_mse[size_t(j)]) / nx);
    const double rr = dot(r.data(), r.data(), d), qr = dot(q.data(), r.data(), d);
    run.theory_var += nx * nx * (M_PI / 2 * nq * nq * rr - qr * qr) / m / kSeeds;
    run.bound_var += nx * nx * M_PI / 2 * nq * nq * rr / m / kSeeds;
    err.push_back(score - exact);
    mse_err.push_back(dot(q.data(), x_mse.data(), d) - exact);
  }
  run.mean = std::accumulate(err.begin(), err.end(), 0.0) / kSeeds;
  for (double e : err) run.var += (e - run.mean) * (e - run.mean) / (kSeeds - 1);
  run.mse_mean = std::accumulate(mse_err.begin(), mse_err.end(), 0.0) / kSeeds;
  double mv = 0;
  for (double e : mse_err) mv += (e - run.mse_mean) * (e - run.mse_mean) / (kSeeds - 1);
  run.mse_se = std::sqrt(mv / kSeeds);
  run.distinct = seen.size();
  return run;
}

void check_unbiased(int bits, int m, bool values) {
  const int d = 128;
  auto x16 = make_data(Data::kGaussian, 16, d, 31);
  Rng rng(32);
  std::vector<float> q(static_cast<size_t>(d));
  const double nx = norm(x16.data(), d);
  for (int j = 0; j < d; ++j) q[size_t(j)] = float(0.8 * x16[size_t(j)] / nx + 0.6 * rng.normal() / std::sqrt(d));
  const Run run = run_seeds(d, bits, m, values, x16, q);
  const double se = std::sqrt(run.var / kSeeds);
  std::printf("turbo-prod bits=%d m=%d %s: q.x = %.4f, mean error %.5f +- %.5f (SE), variance %.6f, theory %.6f; "
              "turbo bits=%d mean error %.5f +- %.5f\n",
              bits, m, values ? "values" : "keys", dot(q.data(), x16.data(), d), run.mean, se, run.var, run.theory_var,
              bits - 1, run.mse_mean, run.mse_se);
  EXPECT_EQ(run.distinct, size_t(kSeeds)) << "the seeds did not give different sketches";
  EXPECT_LE(std::fabs(run.mean), 3 * se);
  EXPECT_NEAR(run.var / run.theory_var, 1.0, kVarBand);
  EXPECT_LE(run.var, run.bound_var * (1 + kVarBand));
  if (bits == 2) {
    // At one bit the MSE stage shrinks inner products by about 2/pi: far outside its error bars,
    // which is what the sketch of the residual removes.
    EXPECT_GT(std::fabs(run.mse_mean), 10 * run.mse_se);
  }
}

TEST(Method_turbo_prod, KeysUnbiasedWithTheTheorysVariance) {
  check_unbiased(2, 128, false);
  check_unbiased(3, 128, false);
  check_unbiased(4, 64, false);
}

TEST(Method_turbo_prod, ValuesUnbiasedWithTheTheorysVariance) { check_unbiased(3, 128, true); }

}  // namespace
}  // namespace vq::kv::testing
