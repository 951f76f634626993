// KIVI: fused scores/accumulation equal the plain reference for every bit width, both key axes
// and ragged groups; bits per element follow the formula; the residual policy (keys leave in
// whole blocks, values one by one); and the paper's qualitative finding on outlier-channel keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "tests/kv/codec_harness.h"
#include "veloxquant/kv/cache.h"

namespace vq::kv::testing {
namespace {

// At 2, 3 and 4 bits with whole 16-token groups KIVI takes the lane kernels (kivi_lanes.cpp; 3
// bits when d is a multiple of 32). Their
// scores hold each row's group-folded query q_c s_c in 16-bit fixed point: the exact bound is
// checked by KeyScoresWithinTheHeldQueryBound, and here they are held to 1e-3 of |q| |k| (a
// sanity bound). Their accumulation holds the weights in fixed point, as q4 does
// (fixed_point_tol).
constexpr double kHeldQuerySanity = 1e-3;

void check_lanes(const std::string& spec, const std::vector<int>& dims, int tokens) {
  for (int d : dims) check_all(spec, {d}, tokens, kHeldQuerySanity, fixed_point_tol(d));
}

TEST(Method_kivi, FusedEqualsReference) {
  check_all("kivi:group=24,residual=40", {64, 80, 128}, 80);
  // 3 bits takes the lanes where d is a multiple of 32, the packed path at d = 80.
  check_lanes("kivi:kbits=3,vbits=3,residual=32", {64, 80, 128}, 80);
  check_lanes("kivi:kbits=3,vbits=2,residual=32", {96}, 80);
  check_lanes("kivi:kbits=2,vbits=3,residual=32", {256}, 80);
  // Per-token keys take the packed path; their 2-bit values the lane kernel.
  for (int d : {64, 80, 128}) check_all("kivi:kaxis=token,residual=32", {d}, 80, 1e-5, fixed_point_tol(d));
  for (const char* spec : {"kivi:residual=32", "kivi:kbits=4,vbits=4,residual=32"}) check_lanes(spec, {64, 80, 128}, 80);
  check_lanes("kivi", {128, 256}, 256);  // the default block of 128 tokens
}

// The lane kernels' scores against decode-then-dot, within the bound of holding the query in
// fixed point: per token group and row, unit = max_c |q_c s_c| / 32512 and each q_c s_c is held
// within unit / 2 (plus the rounding of two float products, under 0.01 unit), so a score is off
// by at most 0.51 unit * sum_c code_c (plus float rounding). The
// scales and codes are recovered from the decoded keys: a group's smallest decoded value in a
// channel is its zero (code 0) and its largest is zero + (2^b - 1) scale.
void check_held_query_bound(const std::string& spec, int bits, int d, Data kind, uint64_t seed) {
  SCOPED_TRACE(spec + " d=" + std::to_string(d));
  const Method m = parse_method(spec);
  const auto kc = m.keys().key_codec(CodecContext{d, 0});
  const int G = 32, levels = (1 << bits) - 1, n_q = 5;
  const auto kx = make_data(kind, 96, d, seed);
  const Encoded e = encode_run(*kc, kx, 0);
  const auto kd = decode_run(*kc, e, 0);
  const int64_t n = e.tokens;
  ASSERT_EQ(n % G, 0);
  std::vector<double> scale(size_t(n / G) * d), zero(size_t(n / G) * d);
  for (int64_t g = 0; g < n / G; ++g) {
    for (int c = 0; c < d; ++c) {
      double lo = kd[size_t(g * G) * d + c], hi = lo;
      for (int t = 1; t < G; ++t) {
        lo = std::min<double>(lo, kd[size_t(g * G + t) * d + c]);
        hi = std::max<double>(hi, kd[size_t(g * G + t) * d + c]);
      }
      scale[size_t(g) * d + c] = (hi - lo) / levels;
      zero[size_t(g) * d + c] = lo;
    }
  }
  const auto q = make_data(Data::kGaussian, n_q, d, seed + 7);
  std::vector<float> states(size_t(n_q) * kc->query_state_floats());
  for (int r = 0; r < n_q; ++r) kc->prepare_query(&q[size_t(r) * d], &states[r * kc->query_state_floats()]);
  for (auto [i0, i1] : std::vector<std::pair<int64_t, int64_t>>{{0, n}, {3, n - 5}}) {
    std::vector<float> s(size_t(n_q) * size_t(i1 - i0));
    kc->scores(states.data(), n_q, e.bytes.data(), 0, i0, i1, s.data(), size_t(i1 - i0));
    for (int r = 0; r < n_q; ++r) {
      const float* qr = &q[size_t(r) * d];
      for (int64_t i = i0; i < i1; ++i) {
        const size_t g = size_t(i / G) * d;
        double unit = 0, codes = 0, ref = 0;
        for (int c = 0; c < d; ++c) unit = std::max(unit, std::fabs(qr[c] * scale[g + c]) / 32512);
        for (int c = 0; c < d; ++c) {
          if (scale[g + c] > 0) codes += std::round((kd[size_t(i) * d + c] - zero[g + c]) / scale[g + c]);
          ref += double(qr[c]) * kd[size_t(i) * d + c];
        }
        const double bound = 0.51 * unit * codes + 1e-5 * norm(qr, d) * norm(&kd[size_t(i) * d], d) + 1e-30;
        ASSERT_LE(std::fabs(s[size_t(r) * (i1 - i0) + (i - i0)] - ref), bound) << "score r=" << r << " i=" << i;
      }
    }
  }
}

TEST(Method_kivi, KeyScoresWithinTheHeldQueryBound) {
  const int tried = for_each_supported_target([] {
    for (int bits : {2, 3, 4}) {
      const std::string spec = "kivi:kbits=" + std::to_string(bits) + ",residual=32";
      for (int d : {64, 80, 128}) {
        for (Data kind : {Data::kGaussian, Data::kOutliers, Data::kZeros, Data::kConstant, Data::kHuge}) {
          check_held_query_bound(spec, bits, d, kind, 300 + uint64_t(d) + uint64_t(kind));
        }
      }
    }
  });
  EXPECT_GE(tried, 2);
}

// The lane kernels change their register blocking with the vector width (four channels and two
// accumulator sets per pass at 16 lanes, two and one below) and their dot products with the
// instruction set (vpdpbusd with VNNI, two multiply-adds without, shifts and multiplies on the
// scalar target): every target this CPU runs takes its own path (on an AVX-512 machine also
// AVX2's and the scalar one). The integer sums are the same on every target; the float bias
// (sum_c q_c z_c) is added in each target's own order.
TEST(Method_kivi, EveryTargetMatchesReference) {
  const int tried = for_each_supported_target([] {
    check_lanes("kivi:residual=32", {64, 128}, 80);
    check_lanes("kivi:kbits=4,vbits=4,residual=32", {64}, 80);
    check_lanes("kivi:kbits=3,vbits=3,residual=32", {64, 128}, 80);
  });
  EXPECT_GE(tried, 2);  // the best target and the scalar one
}

// Without VNNI the lane kernels add byte products in 16 bits and widen them every few chunks
// (keys) or sub-blocks (values), at most as many as stay below 2^15 at the largest code and held
// byte (kShortProductsOf). Codes at their largest in every channel of half the tokens, against
// a held operand at its largest magnitude in every byte (q_c s_c and w s equal across the row),
// put every short sum at its bound: each target must give the bits of the first (VNNI's 32-bit
// sums, where it runs) and the exact sums. d = 256 is Gemma 3's head (eight widenings a key
// sub-block at 2 bits), 256 tokens a whole value run.
TEST(Method_kivi, ShortSumsHoldTheLargestCodesOnEveryTarget) {
  for (int bits : {2, 3, 4}) {
    const std::string b = std::to_string(bits);
    const Method m = parse_method("kivi:kbits=" + b + ",vbits=" + b + ",residual=32");
    for (int d : {128, 256}) {
      SCOPED_TRACE(m.spec() + " d=" + std::to_string(d));
      const int n = 256, n_q = 4;
      std::vector<float> kx(size_t(n) * d), vx(size_t(n) * d);
      for (int t = 0; t < n; ++t) {
        for (int c = 0; c < d; ++c) {
          kx[size_t(t) * d + c] = float(t % 2);  // each channel's group spans 0..1: codes 0 and the largest
          vx[size_t(t) * d + c] = float(c % 2);  // each token's group likewise, across its channels
        }
      }
      const auto kc = m.keys().key_codec(CodecContext{d, 0});
      const auto vc = m.values().value_codec(CodecContext{d, 0});
      const Encoded ke = encode_run(*kc, kx, 0), ve = encode_run(*vc, vx, 0);
      ASSERT_EQ(ke.tokens, n);
      ASSERT_EQ(ve.tokens, n);
      const std::vector<float> q(size_t(n_q) * d, -1.0f), w(size_t(n_q) * n, 1.0f);
      const auto states = prepare_queries(*kc, q, n_q);
      scores_on_every_target(*kc, states, n_q, ke, 0, n, [&](const std::vector<float>& s) {
        for (int r = 0; r < n_q; ++r) {
          for (int t = 0; t < n; ++t) ASSERT_NEAR(s[size_t(r) * n + t], -float(d * (t % 2)), 1e-3 * d) << "t=" << t;
        }
      });
      std::vector<float> first;
      for_each_supported_target([&] {
        std::vector<float> acc(size_t(n_q) * vc->accum_floats(), 0.0f), out(size_t(n_q) * d);
        vc->accumulate(w.data(), size_t(n), n_q, ve.bytes.data(), 0, 0, n, acc.data());
        vc->finalize(acc.data(), n_q, out.data());
        for (int r = 0; r < n_q; ++r) {
          for (int c = 0; c < d; ++c) ASSERT_NEAR(out[size_t(r) * d + c], float(n * (c % 2)), 1e-3 * n) << "c=" << c;
        }
        if (first.empty()) {
          first = out;
        } else {
          EXPECT_EQ(std::memcmp(first.data(), out.data(), out.size() * 4), 0) << "bits differ from the first target";
        }
      });
    }
  }
}

TEST(Method_kivi, BitsPerElement) {
  const Method m = parse_method("kivi");
  EXPECT_DOUBLE_EQ(m.keys().key_bits(128), 3.0);    // 2 bits + fp16 scale and zero per 32 tokens
  EXPECT_DOUBLE_EQ(m.values().value_bits(128), 3.0);  // 2 bits + fp16 scale and zero per 32 channels
  EXPECT_DOUBLE_EQ(parse_method("kivi:kbits=4,vbits=3").bits_per_element(128), 4.5);
  EXPECT_DOUBLE_EQ(parse_method("kivi:group=24,residual=40").keys().key_bits(64), 2 + 32.0 * 2 / 40);
  EXPECT_EQ(parse_method("kivi:kaxis=token").spec(), "kivi:kaxis=token");
}

TEST(Method_kivi, ErrorShrinksWithBits) {
  const double e2 = relative_mse("kivi", 128, false), e3 = relative_mse("kivi:vbits=3", 128, false),
               e4 = relative_mse("kivi:vbits=4", 128, false);
  EXPECT_LT(e4, e3);
  EXPECT_LT(e3, e2);
  // 4 levels over a Gaussian group's range (about 4.1 sigma for 32 samples): step 1.37 sigma,
  // uniform error step^2/12 = 0.156 of the variance.
  EXPECT_LT(e2, 0.2);
  EXPECT_GT(e2, 0.1);
}

// KIVI's observation: keys have outlier channels, so grouping keys per channel (each channel its
// own scale) reconstructs them far better than per token at 2 bits.
TEST(Method_kivi, PerChannelKeysBeatPerTokenOnOutlierChannels) {
  EXPECT_LT(relative_mse("kivi", 128, true, Data::kOutliers),
            relative_mse("kivi:kaxis=token", 128, true, Data::kOutliers));
}

TEST(Method_kivi, KeysLeaveInWholeBlocksValuesOneByOne) {
  LayerCache cache(parse_method("kivi"), {1, 64, 0, 0});
  std::vector<float> x(64 * 300, 0.5f);
  cache.append(x.data(), x.data(), 300);
  const MemoryUsage m = cache.memory();
  EXPECT_EQ(m.key_elements_compressed, 256 * 64);          // two whole blocks of 128
  EXPECT_EQ(m.value_elements_compressed, (300 - 128) * 64);  // all but the newest 128
}

}  // namespace
}  // namespace vq::kv::testing
