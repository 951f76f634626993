// q4: fused paths equal the plain reference (plain and rotated, ragged and power-of-two
// head dims, extreme inputs), block bytes match the formula, and the error band holds.
#include <gtest/gtest.h>

#include <cstring>

#include "src/kv/methods/baseline/q4_layout.h"
#include "tests/kv/codec_harness.h"

namespace vq::kv::testing {
namespace {

// q4's fused paths hold the query (per group of 32) and the weights (per run) in 16-bit fixed
// point: fixed_point_tol (codec_harness.h).
void check_all_q4(const std::string& spec, const std::vector<int>& dims) {
  for (int d : dims) check_all(spec, {d}, 96, fixed_point_tol(d));
}

TEST(Method_q4, FusedEqualsReference) { check_all_q4("q4", {36, 64, 80, 100, 128, 256}); }

TEST(Method_q4, RotatedFusedEqualsReference) { check_all_q4("q4:rot=1", {64, 96, 128, 256}); }

// The value kernel adds the products of two blocks in 16 bits before widening them; a run with an
// odd number of blocks ends with one block on its own (80 tokens: 5 blocks, and 4 or 5 in the
// sub-ranges check_all takes).
TEST(Method_q4, OddBlockCounts) {
  for (int d : {36, 128}) check_all("q4", {d}, 80, fixed_point_tol(d));
}

// The query state holds each q_j as scale * (256 hi_j + lo_j) within max|q_g| / 65024, and the
// fused scores are exact dot products with that held query (to float rounding).
TEST(Method_q4, ScoresAreExactForTheHeldQuery) {
  for (int d : {36, 128}) {
    const Method m = parse_method("q4");
    const auto kc = m.keys().key_codec({d, 0});
    const auto q = make_data(Data::kOutliers, 1, d, 7);
    const auto k = make_data(Data::kOutliers, 32, d, 8);
    const Encoded e = encode_run(*kc, k, 0);
    const auto kd = decode_run(*kc, e, 0);
    std::vector<float> state(kc->query_state_floats());
    kc->prepare_query(q.data(), state.data());
    const int C = q4::n_chunks(d);
    std::vector<double> held(size_t(d), 0.0);
    for (int j = 0; j < d; ++j) {
      const int c = j / 8, k8 = j % 8, g = j / 32;
      uint32_t w[4];
      std::memcpy(w, state.data() + q4::QueryState::chunk_word(c, 0), sizeof(w));
      const int byte = k8 / 2, parity = k8 % 2;
      const int hi = int8_t(w[parity] >> (8 * byte) & 0xFF), lo = int8_t(w[2 + parity] >> (8 * byte) & 0xFF);
      float scale;
      std::memcpy(&scale, state.data() + q4::QueryState::group_word(C, g), 4);
      held[j] = double(scale) * (256.0 * hi + lo);
      float amax = 0;
      for (int i = g * 32; i < std::min(d, g * 32 + 32); ++i) amax = std::max(amax, std::fabs(q[i]));
      EXPECT_LE(std::fabs(held[j] - q[j]), amax / 65024.0 * (1 + 1e-6)) << "d=" << d << " j=" << j;
    }
    std::vector<float> s(32);
    kc->scores(state.data(), 1, e.bytes.data(), 0, 0, 32, s.data(), 32);
    for (int t = 0; t < 32; ++t) {
      double ref = 0, mag = 0;
      for (int j = 0; j < d; ++j) {
        ref += held[j] * kd[size_t(t) * d + j];
        mag += std::fabs(held[j] * kd[size_t(t) * d + j]);
      }
      EXPECT_NEAR(s[t], ref, 1e-6 * mag) << "d=" << d << " t=" << t;
    }
  }
}

// Peaked weights (one token dominant, the rest a thousand times smaller, as softmax gives): the
// small weights are held relative to the run's largest, so their error is bounded by
// max|w| max|v| n sqrt(d) / 65024 at worst, plus float rounding.
TEST(Method_q4, AccumulateWithPeakedWeights) {
  const int d = 128, n = 256;
  const Method m = parse_method("q4");
  const auto vc = m.values().value_codec({d, 0});
  const auto v = make_data(Data::kOutliers, n, d, 9);
  const Encoded e = encode_run(*vc, v, 0);
  const auto vd = decode_run(*vc, e, 0);
  std::vector<float> w(n);
  Rng rng(3);
  for (int t = 0; t < n; ++t) w[t] = 1e-3f * float(rng.uniform());
  w[77] = 1.0f;
  std::vector<float> acc(vc->accum_floats(), 0.0f), out(static_cast<size_t>(d));
  vc->accumulate(w.data(), size_t(n), 1, e.bytes.data(), 0, 0, n, acc.data());
  vc->finalize(acc.data(), 1, out.data());
  double vmax = 0, wv = 0, err = 0;
  for (float x : vd) vmax = std::max(vmax, double(std::fabs(x)));
  std::vector<double> ref(size_t(d), 0.0);
  for (int t = 0; t < n; ++t) {
    wv += std::fabs(w[t]) * norm(&vd[size_t(t) * d], d);
    for (int j = 0; j < d; ++j) ref[j] += double(w[t]) * vd[size_t(t) * d + j];
  }
  for (int j = 0; j < d; ++j) err += std::pow(out[j] - ref[j], 2);
  const double bound = 1.0 * vmax * n * std::sqrt(double(d)) / 65024.0 + 1e-5 * wv;
  EXPECT_LE(std::sqrt(err), bound);
  EXPECT_LT(std::sqrt(err), 1e-3 * wv);  // far inside the bound in practice
}

TEST(Method_q4, ErrorBand) {
  // 4-bit groups of 32: relative MSE about 1e-2 on Gaussians.
  EXPECT_LT(relative_mse("q4", 128, true), 1.5e-2);
  EXPECT_LT(relative_mse("q4", 128, false), 1.5e-2);
  EXPECT_LT(relative_mse("q4:rot=1", 128, true), 1.5e-2);
}

TEST(Method_q4, RotationTakesAnyDimensionUpToTheDenseLimit) { check_rotation_dims("q4:rot=1"); }

}  // namespace
}  // namespace vq::kv::testing

namespace vq::kv::testing {
namespace {

// Rotation spreads outlier channels: on outlier-heavy keys, q4 with rot=1 reconstructs better.
TEST(Method_q4, RotationHelpsOutlierKeys) {
  EXPECT_LT(relative_mse("q4:rot=1", 128, true, Data::kOutliers),
            relative_mse("q4", 128, true, Data::kOutliers));
}

}  // namespace
}  // namespace vq::kv::testing

#include "hwy/targets.h"

namespace vq::kv::testing {
namespace {

// Same bytes, same query and weights: the same scores and sums, bit for bit, on every x86 SIMD
// target this CPU runs (VNNI, and the AVX-512 and AVX2 forms of the byte dot product). The
// portable fallbacks (EMU128, SCALAR) round a * b + c twice, having no fused multiply-add, so
// they agree only to rounding: they are held to the reference instead (next test).
TEST(Method_q4, IdenticalOnEveryTarget) {
  const int d = 128, n = 256;
  const Method m = parse_method("q4");
  const auto kc = m.keys().key_codec({d, 0});
  const auto vc = m.values().value_codec({d, 0});
  const auto x = make_data(Data::kOutliers, n, d, 21);
  const Encoded ke = encode_run(*kc, x, 0), ve = encode_run(*vc, x, 0);
  const auto q = make_data(Data::kGaussian, 4, d, 22);
  std::vector<float> states(4 * kc->query_state_floats());
  for (int r = 0; r < 4; ++r) kc->prepare_query(&q[size_t(r) * d], &states[r * kc->query_state_floats()]);
  const auto w = make_data(Data::kGaussian, 4, n, 23);
  const auto run = [&] {
    std::vector<float> out(size_t(4) * n + 4 * vc->accum_floats(), 0.0f);
    kc->scores(states.data(), 4, ke.bytes.data(), 0, 3, n, out.data(), size_t(n));
    vc->accumulate(w.data(), size_t(n), 4, ve.bytes.data(), 0, 1, n - 5, out.data() + size_t(4) * n);
    return out;
  };
  const std::vector<float> expected = run();
  int tried = 0;
  for (int64_t target : {int64_t(HWY_AVX3_DL), int64_t(HWY_AVX3), int64_t(HWY_AVX2)}) {
    if ((hwy::SupportedTargets() & target) == 0) continue;
    auto check = [&] { EXPECT_EQ(run(), expected); };
    run_with_target(target, check);
    ++tried;
  }
  EXPECT_GE(tried, 1);
}

}  // namespace
}  // namespace vq::kv::testing

namespace vq::kv::testing {
namespace {

// Each instruction set has its own byte dot products and weight planes (byte_dot-inl.h, q4.cpp):
// every target this CPU runs, e.g. AVX3_DL's vpdpbusd, AVX3's and AVX2's short pair sums and the
// portable shifts on an AVX-512 VNNI machine.
TEST(Method_q4, EveryTargetMatchesReference) {
  EXPECT_GE(for_each_supported_target([] { check_all_q4("q4", {36, 128}); }), 2);
}

}  // namespace
}  // namespace vq::kv::testing
