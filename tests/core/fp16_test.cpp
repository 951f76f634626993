// fp16/bf16 conversions: exact round trips, round-to-nearest-even against a double-precision
// oracle, and the bulk (vectorized) paths equal to the scalar ones bit for bit.
#include "src/core/fp16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "src/core/rng.h"

namespace vq {
namespace {

// Oracle: the binary16 value nearest to x (ties to even), found by search over all halves.
uint16_t nearest_f16(float x, const std::vector<double>& table) {
  if (std::isnan(x)) return 0x7e00;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(double(x));
  if (a >= 65520.0) return sign | 0x7c00;
  uint16_t best = 0;
  double best_err = 1e300;
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const double err = std::fabs(table[h] - a);
    if (err < best_err || (err == best_err && (h & 1) == 0)) {
      best_err = err;
      best = uint16_t(h);
    }
  }
  return sign | best;
}

TEST(Fp16, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(uint16_t(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), h) << std::hex << h;
  }
}

TEST(Fp16, RoundsToNearestEven) {
  std::vector<double> table(0x7c00);
  for (uint32_t h = 0; h < 0x7c00; ++h) table[h] = double(f16_to_f32(uint16_t(h)));
  Rng rng(7);
  std::vector<float> xs = {0.0f, -0.0f, 1.0f, 65504.0f, 65519.0f, 65520.0f, 1e-8f, 5.96e-8f,
                           2.98e-8f, 2.99e-8f, 6.1e-5f, 6.103515625e-05f, -3.0e-6f};
  // Exact midpoints between neighbouring halves exercise the tie rule.
  for (uint32_t h = 0; h + 1 < 0x7c00; h += 97) xs.push_back(float((table[h] + table[h + 1]) / 2));
  for (int i = 0; i < 400; ++i) xs.push_back(float(rng.normal() * std::pow(10.0, rng.uniform() * 12 - 8)));
  for (float x : xs) EXPECT_EQ(f32_to_f16(x), nearest_f16(x, table)) << x;
}

TEST(Fp16, BulkEqualsScalar) {
  Rng rng(3);
  std::vector<float> x(1003);
  for (auto& v : x) v = float(rng.normal() * std::pow(10.0, rng.uniform() * 10 - 6));
  x[5] = 70000.0f;
  x[6] = -1e-7f;
  std::vector<uint16_t> h(x.size()), b(x.size());
  f32_to_f16(x.data(), h.data(), x.size());
  f32_to_bf16(x.data(), b.data(), x.size());
  std::vector<float> back(x.size()), bback(x.size());
  f16_to_f32(h.data(), back.data(), x.size());
  bf16_to_f32(b.data(), bback.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(h[i], f32_to_f16(x[i])) << i;
    ASSERT_EQ(b[i], f32_to_bf16(x[i])) << i;
    ASSERT_EQ(back[i], f16_to_f32(h[i])) << i;
    ASSERT_EQ(bback[i], bf16_to_f32(b[i])) << i;
  }
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to the even mantissa (1.0).
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: rounds up to even.
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

}  // namespace
}  // namespace vq
