// The integer dot products (src/engine/qdot.h): the vector kernels of every target this CPU runs
// equal the plain reference bit for bit; a token's result does not depend on how many tokens share
// the call; the activation quantizers follow ggml's rules; hand-computed blocks come out exact.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "hwy/highway.h"
#include "hwy/targets.h"
#include "src/core/fp16.h"
#include "src/core/rng.h"
#include "src/engine/qdot.h"
#include "tests/engine/random_weights.h"

namespace vq::engine {
namespace {

const GgmlType kIntTypes[] = {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ5_0,
                              GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};

// n_tok activation rows: Gaussian, with a few large outliers, some all-zero blocks and a block
// whose largest element is negative (the Q8_K sign rule).
std::vector<uint8_t> random_acts(ActQuant q, int64_t n, int n_tok, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(size_t(n) * size_t(n_tok));
  for (auto& v : x) v = float(rng.normal());
  for (size_t i = 0; i < x.size(); i += 97) x[i] *= 40.f;
  std::fill(x.begin(), x.begin() + 32, 0.f);
  if (x.size() > 300) x[300] = -500.f;
  const size_t stride = act_row_bytes(q, n);
  std::vector<uint8_t> a(stride * size_t(n_tok));
  for (int t = 0; t < n_tok; ++t) quantize_activations(q, x.data() + size_t(t) * size_t(n), n, a.data() + t * stride);
  return a;
}

TEST(QDot, KernelsEqualReferenceOnEveryTarget) {
  int targets = 0;
  const int64_t all = hwy::SupportedTargets() & (HWY_TARGETS | HWY_AVX3_DL);
  for (int64_t bits = all; bits != 0; bits &= bits - 1) {
    hwy::SetSupportedTargetsForTest(bits & -bits);
    hwy::GetChosenTarget().Update(hwy::SupportedTargets());
    ++targets;
    for (GgmlType t : kIntTypes) {
      const ActQuant q = act_quant_for(uint32_t(t));
      for (int64_t n : {256, 512, 2048}) {
        const auto w = random_row(t, n, uint64_t(t) * 31 + uint64_t(n));
        const auto a = random_acts(q, n, kQDotMaxTokens, uint64_t(n));
        const size_t stride = act_row_bytes(q, n);
        for (int n_tok = 1; n_tok <= kQDotMaxTokens; ++n_tok) {
          float got[kQDotMaxTokens], want[kQDotMaxTokens], alone[kQDotMaxTokens];
          qdot_row(uint32_t(t), w.data(), n, a.data(), stride, n_tok, got, 1);
          qdot_row_reference(uint32_t(t), w.data(), n, a.data(), stride, n_tok, want, 1);
          for (int k = 0; k < n_tok; ++k) qdot_row(uint32_t(t), w.data(), n, a.data() + k * stride, stride, 1, alone + k, 1);
          ASSERT_EQ(0, std::memcmp(got, want, sizeof(float) * size_t(n_tok)))
              << hwy::TargetName(bits & -bits) << " " << ggml_type_info(uint32_t(t))->name << " n=" << n
              << " n_tok=" << n_tok << ": " << got[0] << " vs " << want[0];
          ASSERT_EQ(0, std::memcmp(got, alone, sizeof(float) * size_t(n_tok))) << "batch composition changed a result";
          if (q == ActQuant::kQ8_0) {
            std::vector<float> table(size_t(n / 32 * kQDotMaxTokens));
            act_scale_table(a.data(), stride, n_tok, n, table.data());
            qdot_row(uint32_t(t), w.data(), n, a.data(), stride, n_tok, got, 1, table.data());
            ASSERT_EQ(0, std::memcmp(got, want, sizeof(float) * size_t(n_tok))) << "with the scale table";
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
  EXPECT_GE(targets, 1);
}

TEST(QDot, ReferenceIsTheDotOfTheDequantizedOperands) {
  for (GgmlType t : kIntTypes) {
    const ActQuant q = act_quant_for(uint32_t(t));
    const int64_t n = 1024;
    const auto w = random_row(t, n, 11);
    const auto a = random_acts(q, n, 1, 12);
    std::vector<float> wf(n), xf(n);
    dequantize_row_scalar(uint32_t(t), w.data(), wf.data(), n);
    dequantize_activations(q, a.data(), n, xf.data());
    double exact = 0, bound = 0;
    for (int64_t i = 0; i < n; ++i) {
      exact += double(wf[size_t(i)]) * xf[size_t(i)];
      bound += std::fabs(double(wf[size_t(i)]) * xf[size_t(i)]);
    }
    float got;
    qdot_row_reference(uint32_t(t), w.data(), n, a.data(), 0, 1, &got, 1);
    EXPECT_LE(std::fabs(got - exact), 1e-6 * bound) << ggml_type_info(uint32_t(t))->name;
  }
}

TEST(ActQuant, Q8_KFollowsGgml) {
  std::vector<float> x(256, 0.f);
  x[0] = 1.f;
  x[1] = -2.f;  // largest magnitude, negative: maps to -127, so the scale is positive 2/127
  x[2] = 0.5f;
  x[17] = 1.99f;
  std::vector<uint8_t> a(act_row_bytes(ActQuant::kQ8_K, 256));
  quantize_activations(ActQuant::kQ8_K, x.data(), 256, a.data());
  const auto& b = *reinterpret_cast<const BlockQ8_KAct*>(a.data());
  EXPECT_FLOAT_EQ(b.d, 2.f / 127.f);
  EXPECT_EQ(b.qs[1], -127);
  EXPECT_EQ(b.qs[0], 64);   // 63.5 rounds half to even
  EXPECT_EQ(b.qs[2], 32);   // 31.75
  EXPECT_EQ(b.qs[17], 126); // 126.365
  EXPECT_EQ(b.bsums[0], 64 - 127 + 32);
  EXPECT_EQ(b.bsums[1], 126);
  // A positive largest element maps to -127 times a negative scale, as ggml does.
  x[1] = 2.f;
  quantize_activations(ActQuant::kQ8_K, x.data(), 256, a.data());
  EXPECT_FLOAT_EQ(b.d, -2.f / 127.f);
  EXPECT_EQ(b.qs[1], -127);
}

TEST(ActQuant, Q8_0FollowsGgml) {
  std::vector<float> x(32, 0.f);
  x[0] = -127.f;  // scale 127 / 127 = 1
  x[1] = 1.5f;    // halves round to even
  x[2] = 2.5f;
  x[3] = -3.25f;
  std::vector<uint8_t> a(act_row_bytes(ActQuant::kQ8_0, 32));
  quantize_activations(ActQuant::kQ8_0, x.data(), 32, a.data());
  const auto& b = *reinterpret_cast<const BlockQ8_0Act*>(a.data());
  EXPECT_EQ(b.d, 1.f);
  EXPECT_EQ(b.qs[0], -127);
  EXPECT_EQ(b.qs[1], 2);
  EXPECT_EQ(b.qs[2], 2);
  EXPECT_EQ(b.qs[3], -3);
  // The scale is stored at fp16 precision, as ggml's block_q8_0 holds it.
  x[0] = 1.f;
  quantize_activations(ActQuant::kQ8_0, x.data(), 32, a.data());
  EXPECT_EQ(b.d, f16_to_f32(f32_to_f16(3.25f / 127.f)));
}

TEST(ActQuant, NonFiniteInputGivesNaNNotAQuietNumber) {
  for (ActQuant q : {ActQuant::kQ8_0, ActQuant::kQ8_K}) {
    for (float bad : {NAN, INFINITY}) {
      std::vector<float> x(256, 1.f);
      x[5] = bad;
      std::vector<uint8_t> a(act_row_bytes(q, 256));
      quantize_activations(q, x.data(), 256, a.data());
      const GgmlType t = q == ActQuant::kQ8_0 ? GgmlType::kQ8_0 : GgmlType::kQ4_K;
      const auto w = random_row(t, 256, 3);
      float got;
      qdot_row(uint32_t(t), w.data(), 256, a.data(), 0, 1, &got, 1);
      EXPECT_TRUE(std::isnan(got)) << int(q) << " " << bad;
    }
  }
}

TEST(QDot, Q4_KByHand) {
  // One super-block: d = 1, dmin = 0.5, sub-block 0 has scale 2 and min 3, the rest 0; every
  // code is 5. Activations: d = 1, qs = 1 everywhere. Sub-block 0 sums 32 * (2 * 5) = 320; its
  // min term is 3 * 32 = 96, times dmin: 48. Expected 320 - 48 = 272.
  BlockQ4_K w{};
  w.d = f32_to_f16(1.f);
  w.dmin = f32_to_f16(0.5f);
  w.scales[0] = 2;
  w.scales[4] = 3;
  std::memset(w.qs, 0x55, sizeof w.qs);
  BlockQ8_KAct y{};
  y.d = 1.f;
  std::memset(y.qs, 1, sizeof y.qs);
  for (auto& s : y.bsums) s = 16;
  float got, ref;
  qdot_row(uint32_t(GgmlType::kQ4_K), reinterpret_cast<uint8_t*>(&w), 256, reinterpret_cast<uint8_t*>(&y), 0, 1, &got, 1);
  qdot_row_reference(uint32_t(GgmlType::kQ4_K), reinterpret_cast<uint8_t*>(&w), 256, reinterpret_cast<uint8_t*>(&y), 0, 1,
                     &ref, 1);
  EXPECT_EQ(got, 272.f);
  EXPECT_EQ(ref, 272.f);
}

}  // namespace
}  // namespace vq::engine
