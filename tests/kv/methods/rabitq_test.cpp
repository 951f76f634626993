// RaBitQ / Extended RaBitQ: fused scores equal the reference up to the 4-bit query's error (and
// exactly for the held query), the grid search finds the best code, the estimator is unbiased
// over rotations and within the paper's error bound, bits per element count the scalars.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "src/core/hadamard.h"
#include "src/core/rng.h"
#include "src/kv/methods/rabitq/rabitq_codes.h"
#include "src/kv/methods/rabitq/rabitq_layout.h"
#include "src/kv/registry.h"
#include "tests/kv/codec_harness.h"
#include "veloxquant/error.h"
#include "veloxquant/kv/cache.h"

namespace vq::kv::testing {
namespace {

// At one bit, fused scores use the held query q_bar' = v_l + delta q_u of the rotated query q';
// the reference decode-then-dot uses q. Their difference is sum_i a_i e_i with a = the decoded
// key in the rotated space (|a| = |k_hat|) and e_i = q_bar'_i - q'_i: independent over i (the
// random offsets), zero-mean, each in an interval of length delta. Hoeffding: |diff| <= delta
// |k_hat| sqrt(ln(2/p)/2) but with probability p. delta = (max q' - min q')/15 <= 2 max|q'_i| / 15,
// and for the harness's Gaussian queries q'/|q| is a uniform unit vector (P is orthogonal), whose
// largest coordinate exceeds s = sqrt(2 ln(2d/p)/d) with probability at most 2d e^(-d s^2/2) = p.
// With p = 1e-9 for each: a bound relative to |q| |k_hat|, about 0.39 at d = 64 and 0.20 at 256
// (the typical error is some twenty times smaller; ScoresAreExactForTheHeldQuery is the tight
// check). Two to four bits score through TurboQuant's fixed-point lane kernels where d is a multiple
// of 32 (fixed_lane_tol), in float otherwise (d = 96's dense rotation is not: 96 is).
double query_quantization_tol(int d) {
  const double p = 1e-9;
  return 2.0 / 15.0 * std::sqrt(2.0 * std::log(2.0 * d / p) / d) *
         std::sqrt(std::log(2.0 / p) / 2.0);
}

TEST(Method_rabitq, FusedEqualsReference) {
  for (int d : {64, 96, 128, 256}) {  // 96 (Phi-3's heads) takes the dense random rotation
    for (const char* spec : {"rabitq", "rabitq:bits=1,seed=9", "k=rabitq:bits=1,v=rabitq:bits=3"}) {
      check_all(spec, {d}, 64, query_quantization_tol(d), 1e-5);
    }
    for (const char* spec :
         {"rabitq:bits=2", "rabitq:bits=3", "rabitq:bits=4,seed=9", "k=rabitq:bits=4,v=rabitq"}) {
      check_all(spec, {d}, 64, fixed_lane_tol(d));
    }
  }
}

// One bit: the held query is within one step of the rotated query, and the fused scores are the
// estimator's formula with that held query, to float rounding (d below 64 included: the planes
// are shorter than a word).
TEST(Method_rabitq, ScoresAreExactForTheHeldQuery) {
  for (int d : {8, 32, 64, 128}) {
    SCOPED_TRACE("d " + std::to_string(d));
    const Method m = parse_method("rabitq");
    const CodecContext ctx{d, 2};
    const auto kc = m.keys().key_codec(ctx);
    const RandomizedHadamard rot(size_t(d), layer_seed(1234, 2, 0));
    const auto q = make_data(Data::kOutliers, 1, d, 7);
    const auto k = make_data(Data::kGaussian, 32, d, 8);
    const Encoded e = encode_run(*kc, k, 0);
    const auto kd = decode_run(*kc, e, 0);
    std::vector<float> state(kc->query_state_floats()), again(state.size());
    kc->prepare_query(q.data(), state.data());
    kc->prepare_query(q.data(), again.data());
    EXPECT_EQ(std::memcmp(state.data(), again.data(), state.size() * 4), 0)
        << "same query, same state";
    std::vector<float> qr(q), held(static_cast<size_t>(d));
    rot.forward(qr.data());
    const float delta = rabitq::QueryState::delta(state.data());
    for (int i = 0; i < d; ++i) {
      held[i] = rabitq::QueryState::held(state.data(), d, i);
      EXPECT_LT(std::fabs(held[i] - qr[i]), delta * (1 + 1e-5)) << "i=" << i;
    }
    rot.inverse(held.data());  // back to the keys' space, where decode left them
    std::vector<float> s(32);
    kc->scores(state.data(), 1, e.bytes.data(), 0, 0, 32, s.data(), 32);
    for (int t = 0; t < 32; ++t) {
      double ref = 0;
      for (int j = 0; j < d; ++j) ref += double(held[j]) * kd[size_t(t) * d + j];
      EXPECT_NEAR(s[t], ref, 1e-5 * norm(held.data(), d) * norm(&kd[size_t(t) * d], d))
          << "t=" << t;
    }
  }
}

// One bit on every SIMD target the CPU runs (the lane kernel at d = 32..2048, the row path at 16;
// 2048 has 64 groups of 32 channels, past the 31 whose byte counts AVX2 sums before widening):
// several queries (a whole pass of four and a remainder), a range that starts and ends inside a
// block, each score the estimator's formula with the held query to float rounding, and the
// same bits on every target.
TEST(Method_rabitq, OneBitScoresIdenticalOnEveryTarget) {
  for (int d : {16, 32, 128, 256, 2048}) {
    SCOPED_TRACE("d " + std::to_string(d));
    const Method m = parse_method("rabitq:seed=5");
    const auto kc = m.keys().key_codec(CodecContext{d, 3});
    const RandomizedHadamard rot(size_t(d), layer_seed(5, 3, 0));
    const int n_q = 7, n = 100;
    const int64_t i0 = 3, i1 = 93;
    const auto q = make_data(Data::kOutliers, n_q, d, 17);
    const Encoded e = encode_run(*kc, make_data(Data::kOutliers, n, d, 18), 0);
    const auto kd = decode_run(*kc, e, 0);
    const size_t qs = kc->query_state_floats();
    const std::vector<float> states = prepare_queries(*kc, q, n_q);
    const int tried = scores_on_every_target(*kc, states, n_q, e, i0, i1, [&](const std::vector<float>& s) {
      for (int r = 0; r < n_q; ++r) {
        std::vector<float> held(static_cast<size_t>(d));
        for (int i = 0; i < d; ++i) held[i] = rabitq::QueryState::held(&states[size_t(r) * qs], d, i);
        rot.inverse(held.data());
        for (int64_t t = i0; t < i1; ++t) {
          double ref = 0;
          for (int j = 0; j < d; ++j) ref += double(held[j]) * kd[size_t(t) * d + j];
          ASSERT_NEAR(s[size_t(r) * (i1 - i0) + size_t(t - i0)], ref,
                      1e-5 * norm(held.data(), d) * norm(&kd[size_t(t) * d], d))
              << "query " << r << " token " << t;
        }
      }
    });
    EXPECT_GE(tried, 2);
  }
}

// The search over rescaling factors against brute force over the whole grid (small d).
TEST(Method_rabitq, GridSearchFindsTheBestCode) {
  struct Case {
    int d, bits;
  };
  for (const Case c : {Case{8, 1}, Case{8, 2}, Case{5, 3}, Case{4, 4}}) {
    Rng rng(uint64_t(c.d * 10 + c.bits));
    const int levels = 1 << c.bits;
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> u(size_t(c.d));
      for (auto& x : u) x = float(rng.normal());
      if (trial == 0) u[1] = 0.0f;
      std::vector<uint8_t> codes(size_t(c.d));
      const rabitq::GridCode g = rabitq::best_grid_code(u.data(), c.d, c.bits, codes.data());
      double ip = 0, yy = 0;
      for (int i = 0; i < c.d; ++i) {
        const double y = codes[i] - 0.5 * (levels - 1);
        ip += y * u[i];
        yy += y * y;
      }
      EXPECT_NEAR(ip, g.ip, 1e-9);
      EXPECT_NEAR(std::sqrt(yy), g.ynorm, 1e-9);
      double best = -1;
      std::vector<int> code(size_t(c.d), 0);
      for (;;) {
        double a = 0, b = 0;
        for (int i = 0; i < c.d; ++i) {
          const double y = code[i] - 0.5 * (levels - 1);
          a += y * u[i];
          b += y * y;
        }
        best = std::max(best, a / std::sqrt(b));
        int i = 0;
        while (i < c.d && ++code[i] == levels) code[i++] = 0;
        if (i == c.d) break;
      }
      EXPECT_NEAR(g.ip / g.ynorm, best, 1e-9)
          << "d=" << c.d << " bits=" << c.bits << " trial " << trial;
    }
  }
}

struct Stats {
  double mean = 0, se = 0;
};
Stats mean_and_se(const std::vector<double>& x) {
  double s = 0, ss = 0;
  for (double v : x) s += v;
  const double mean = s / double(x.size());
  for (double v : x) ss += (v - mean) * (v - mean);
  return {mean, std::sqrt(ss / double(x.size() - 1) / double(x.size()))};
}

// One key o (all 16 slots of a block) scored against q by the codec of `spec`: the fused estimate,
// decode-then-dot with the exact q, and the correction <o_bar, o> read off the decode.
struct Estimate {
  double fused, exact_query;
  double cosine;  // <o_bar, o>
  std::vector<uint8_t> block;
};
Estimate estimate(const std::string& spec, int d, const std::vector<float>& q,
                  const std::vector<float>& o) {
  const Method m = parse_method(spec);
  const auto kc = m.keys().key_codec(CodecContext{d, 0});
  std::vector<float> keys;
  for (int t = 0; t < rabitq::kBlockTokens; ++t) keys.insert(keys.end(), o.begin(), o.end());
  Estimate e;
  e.block.resize(kc->block_bytes());
  kc->encode(keys.data(), 0, e.block.data());
  std::vector<float> state(kc->query_state_floats()), dec(keys.size());
  kc->prepare_query(q.data(), state.data());
  float s = 0;
  kc->scores(state.data(), 1, e.block.data(), 0, 0, 1, &s, 1);
  kc->decode(e.block.data(), 0, dec.data());
  e.fused = s;
  e.exact_query = 0;
  for (int j = 0; j < d; ++j) e.exact_query += double(q[j]) * dec[j];
  // The decode is o_hat = |o| o_bar / <o_bar, o>, so <o_bar, o> = |o| / |o_hat| (only their
  // ratio is stored).
  e.cosine = norm(o.data(), d) / norm(dec.data(), d);
  return e;
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

// For one fixed pair (q, o), over 400 seeds of the rotation (and of the query's random offsets),
// the mean error of the estimate is within three standard errors of zero. The same criterion on
// the uncorrected estimate |o| <o_bar, q> (no division by <o_bar, o>) must fail at one bit, where
// its bias is about 20% of <q, o>: the test can tell.
TEST(Method_rabitq, EstimatorIsUnbiasedOverRotations) {
  const int n = 400;
  for (int d : {64, 128, 256}) {
    const auto o = make_data(Data::kGaussian, 1, d, 11);
    auto q = make_data(Data::kGaussian, 1, d, 12);
    for (int j = 0; j < d; ++j) q[j] = 0.8f * o[j] + 0.6f * q[j];  // correlated: <q, o> far from 0
    const double truth = dot(q, o);

    std::set<std::vector<float>> rotations;  // the seeds give really different rotations
    for (int s = 1; s <= n; ++s) {
      std::vector<float> r(o);
      RandomizedHadamard(size_t(d), layer_seed(uint64_t(s), 0, 0)).forward(r.data());
      rotations.insert(r);
    }
    ASSERT_EQ(rotations.size(), size_t(n));

    for (int bits = 1; bits <= 4; ++bits) {
      std::vector<double> fused, exact, uncorrected;
      std::set<std::string>
          blocks;  // the bytes (a set of byte vectors trips gcc 12's -Wstringop-overread)
      for (int s = 1; s <= n; ++s) {
        const Estimate e = estimate(fmt::format("rabitq:bits={},seed={}", bits, s), d, q, o);
        fused.push_back(e.fused - truth);
        exact.push_back(e.exact_query - truth);
        uncorrected.push_back(e.exact_query * e.cosine - truth);
        blocks.insert(std::string(e.block.begin(), e.block.end()));
      }
      EXPECT_EQ(blocks.size(), size_t(n)) << "the codes change with the seed";
      const Stats f = mean_and_se(fused), x = mean_and_se(exact), u = mean_and_se(uncorrected);
      std::printf(
          "rabitq bits=%d d=%d <q,o>=%.3f |o||q|=%.3f: fused %+.4f +- %.4f (%+.2f se), exact query "
          "%+.4f +- "
          "%.4f (%+.2f se), uncorrected %+.4f +- %.4f\n",
          bits, d, truth, std::sqrt(dot(o, o) * dot(q, q)), f.mean, f.se, f.mean / f.se, x.mean,
          x.se, x.mean / x.se, u.mean, u.se);
      EXPECT_LE(std::fabs(f.mean), 3 * f.se) << "bits=" << bits << " d=" << d;
      EXPECT_LE(std::fabs(x.mean), 3 * x.se) << "bits=" << bits << " d=" << d;
      if (bits == 1) {
        EXPECT_GT(std::fabs(u.mean), 3 * u.se) << "the criterion cannot see a 20% bias";
      }
    }
  }
}

// P(|w_1| <= s) for w uniform on the unit sphere of R^n: w_1 has density proportional to
// (1 - x^2)^((n - 3)/2) on [-1, 1] (Simpson's rule).
double sphere_coordinate_mass(int n, double s) {
  const auto integral = [n](double b) {
    const int m = 20000;
    const double h = b / m;
    double sum = 0;
    for (int i = 0; i <= m; ++i) {
      const double w = (i == 0 || i == m) ? 1 : (i % 2 ? 4 : 2);
      sum += w * std::pow(std::max(0.0, 1 - (i * h) * (i * h)), 0.5 * (n - 3));
    }
    return sum * h / 3;
  };
  return integral(std::min(s, 1.0)) / integral(1.0);
}

// The paper's bound |est - <o,q>| <= |o||q| sqrt(1 - <o_bar,o>^2)/<o_bar,o> * eps0/sqrt(d-1) over
// 2000 random pairs, each with its own rotation seed. The paper's analysis makes the error
// exactly |o||q| sqrt(1 - <o,q>^2/(|o||q|)^2) sqrt(1 - <o_bar,o>^2)/<o_bar,o> <w, e> with w
// uniform on the unit sphere orthogonal to o (d - 1 dimensions) and e a fixed unit vector there:
// the bound holds when |<w, e>| <= eps0/sqrt(d - 1), with probability p0 = sphere_coordinate_mass
// (about 94.3% at eps0 = 1.9, the papers' setting; the factor sqrt(1 - cos^2) ~ 1 for independent
// pairs). So at eps0 = 1.9 the measured fraction must match p0 (within 3 binomial standard
// errors, either side: a worse estimator fails, and so does a bound that is not sharp), and it
// cannot reach 99%; at eps0 = 3 (failure probability 0.27%) at least 99% of pairs must be within.
// The one-bit fused score adds the 4-bit query's error to that of the estimator, so it is held to
// the eps0 = 3 criterion only (its fraction at 1.9 is printed).
TEST(Method_rabitq, ErrorWithinThePapersBound) {
  const int pairs = 2000;
  for (int d : {64, 128, 256}) {
    const double p0 = sphere_coordinate_mass(d - 1, 1.9 / std::sqrt(double(d - 1)));
    const double se = std::sqrt(p0 * (1 - p0) / pairs);
    for (int bits = 1; bits <= 4; ++bits) {
      int fused19 = 0, exact19 = 0, fused3 = 0, exact3 = 0;
      for (int p = 0; p < pairs; ++p) {
        const auto o = make_data(Data::kGaussian, 1, d, uint64_t(7919 * p + d));
        const auto q = make_data(Data::kGaussian, 1, d, uint64_t(7919 * p + d + 1));
        const Estimate e =
            estimate(fmt::format("rabitq:bits={},seed={}", bits, p + 1), d, q, o);
        const double c = e.cosine, truth = dot(q, o);
        const double scale =
            std::sqrt(dot(o, o) * dot(q, q)) * std::sqrt(1 - c * c) / c / std::sqrt(double(d - 1));
        fused19 += std::fabs(e.fused - truth) <= 1.9 * scale;
        exact19 += std::fabs(e.exact_query - truth) <= 1.9 * scale;
        fused3 += std::fabs(e.fused - truth) <= 3.0 * scale;
        exact3 += std::fabs(e.exact_query - truth) <= 3.0 * scale;
      }
      const double f19 = double(fused19) / pairs, x19 = double(exact19) / pairs;
      const double f3 = double(fused3) / pairs, x3 = double(exact3) / pairs;
      std::printf(
          "rabitq bits=%d d=%d: within the bound at eps0=1.9: fused %.4f, exact query %.4f "
          "(predicted %.4f "
          "+- %.4f); at eps0=3: fused %.4f, exact query %.4f\n",
          bits, d, f19, x19, p0, se, f3, x3);
      SCOPED_TRACE("bits=" + std::to_string(bits) + " d=" + std::to_string(d));
      EXPECT_NEAR(x19, p0, 3 * se);
      if (bits >= 2) {
        EXPECT_NEAR(f19, p0, 3 * se);
      }
      EXPECT_GE(x3, 0.99);
      EXPECT_GE(f3, 0.99);
    }
  }
}

// Through the cache (GQA 8/2, residual windows, sinks, tokens compressed one by one as they leave
// the window, prefill and decode): with keys at two to four bits, whose scores hold the query and
// the levels in 16-bit fixed point (a relative score error of a few 1e-5 of |q| |k|, which moves
// this test's outputs by about 5e-4 of their norm), the fused attention is within 2e-3 of the
// plain reference; attention_test holds the float methods to 1e-4. One-bit keys score against the 4-bit query, so there the
// two differ by design: that path is held to the reference by FusedEqualsReference and
// ScoresAreExactForTheHeldQuery, and here only runs.
double attention_error(const std::string& spec, int ubatch, int64_t ctx) {
  SCOPED_TRACE(spec);
  const int q_heads = 8, kv_heads = 2, d = 64;
  Rng rng(uint64_t(ctx * 31 + ubatch));
  LayerCache cache(parse_method(spec), LayerConfig(kv_heads, d, 1));
  double worst = 0;
  for (int64_t t = 0; t < ctx; t += ubatch) {
    const int n = int(std::min<int64_t>(ubatch, ctx - t));
    std::vector<float> k(size_t(n) * kv_heads * d), v(k.size()), q(size_t(n) * q_heads * d);
    for (auto* x : {&k, &v, &q}) {
      for (auto& e : *x) e = float(rng.normal());
    }
    cache.append(k.data(), v.data(), n);
    std::vector<int64_t> pos(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) pos[i] = t + i;
    std::vector<float> fused(q.size()), ref(q.size());
    cache.attend(q.data(), n, q_heads, pos.data(), 0.125f, fused.data());
    cache.attend_reference(q.data(), n, q_heads, pos.data(), 0.125f, ref.data());
    for (int i = 0; i < n * q_heads; ++i) {
      double num = 0, den = 0;
      for (int j = 0; j < d; ++j) {
        EXPECT_TRUE(std::isfinite(fused[size_t(i) * d + j]));
        num += std::pow(double(fused[size_t(i) * d + j]) - ref[size_t(i) * d + j], 2);
        den += std::pow(double(ref[size_t(i) * d + j]), 2);
      }
      worst = std::max(worst, std::sqrt(num / std::max(den, 1e-30)));
    }
  }
  return worst;
}

TEST(Method_rabitq, AttentionThroughTheCache) {
  for (const char* spec :
       {"rabitq:bits=2", "rabitq:bits=3,residual=32,sink=2", "rabitq:bits=4,residual=7",
        "k=rabitq:bits=2,v=rabitq:bits=1,residual=16,sink=1"}) {
    for (int ubatch : {1, 50})
      EXPECT_LT(attention_error(spec, ubatch, ubatch == 1 ? 140 : 300), 2e-3) << spec;
  }
  for (int ubatch : {1, 50}) {
    std::printf(
        "rabitq:bits=1,residual=16 ubatch %d: fused vs reference attention, worst relative error "
        "%.3f\n",
        ubatch, attention_error("rabitq:bits=1,residual=16", ubatch, ubatch == 1 ? 140 : 300));
  }
}

TEST(Method_rabitq, BitsPerElementCountTheScalars) {
  // B + 16/d: the codes and the fp16 factor.
  EXPECT_DOUBLE_EQ(parse_method("rabitq").bits_per_element(128), 1.125);
  EXPECT_DOUBLE_EQ(parse_method("rabitq:bits=1").bits_per_element(64), 1.25);
  EXPECT_DOUBLE_EQ(parse_method("rabitq:bits=2").bits_per_element(128), 2.125);
  EXPECT_DOUBLE_EQ(parse_method("rabitq:bits=3").bits_per_element(128), 3.125);
  EXPECT_DOUBLE_EQ(parse_method("rabitq:bits=4").bits_per_element(256), 4.0625);
  EXPECT_DOUBLE_EQ(parse_method("k=rabitq:bits=1,v=rabitq:bits=4").bits_per_element(128),
                   0.5 * (1.125 + 4.125));
  for (int d : {8, 16, 32, 64, 128, 256}) {
    for (const char* spec : {"rabitq", "rabitq:bits=2", "rabitq:bits=3", "rabitq:bits=4"}) {
      check_block_bytes_match_formula(spec, d);
    }
  }
}

TEST(Method_rabitq, BadSpecsAreRefused) {
  for (const char* spec : {"rabitq:bits=0", "rabitq:bits=9", "rabitq:bits=5", "rabitq:bits=-1",
                           "rabitq:bits=x", "rabitq:rot=1", "rabitq:seed=-3"}) {
    EXPECT_THROW(parse_method(spec), Error) << spec;
  }
  for (int d : {4, 2000, 8192}) {
    EXPECT_THROW(parse_method("rabitq").keys().key_codec(CodecContext{d, 0}), Error) << d;
    EXPECT_THROW(parse_method("rabitq").values().value_codec(CodecContext{d, 0}), Error) << d;
  }
}

}  // namespace
}  // namespace vq::kv::testing
