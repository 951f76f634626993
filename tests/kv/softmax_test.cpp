// The online-softmax tile: its exp is within a few ulp of std::exp over the whole range it meets
// (scores minus their running max, down to underflow), masked scores get weight 0, and the row
// state (max, sum, rescale factor) follows the definition in softmax.h.
#include "src/kv/kernels/softmax.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "src/core/rng.h"

namespace vq::kv {
namespace {

TEST(Softmax, ExpIsAccurateDownToUnderflow) {
  // One row whose max is 0: the weights are exp(score) themselves.
  const int n = 4096;
  std::vector<float> s(n);
  Rng rng(5);
  for (int t = 0; t < n; ++t) s[t] = -float(rng.uniform()) * (t % 2 ? 90.0f : 12.0f);
  s[0] = 0.0f;
  std::vector<float> x = s;
  float m = -std::numeric_limits<float>::infinity(), l = 0, rescale = 0;
  online_softmax_tile(s.data(), n, 1, n, &m, &l, &rescale);
  EXPECT_EQ(m, 0.0f);
  double sum = 0;
  for (int t = 0; t < n; ++t) {
    const double ref = std::exp(double(x[t]));
    sum += ref;
    if (ref < 1.2e-38) {  // below the smallest normal float: flushed or tiny
      EXPECT_LE(s[t], 2e-38f) << x[t];
      continue;
    }
    EXPECT_NEAR(s[t], ref, 3e-7 * ref) << "x=" << x[t];
  }
  EXPECT_NEAR(l, sum, 1e-6 * sum);
}

TEST(Softmax, MaskedScoresGetZeroAndStateFollowsDefinition) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> s = {1.0f, -inf, 3.0f, 2.0f, -inf, 0.5f, 1.5f, -inf, 2.5f, 0.0f, -1.0f, -inf, 3.5f, 1.0f, -2.0f, 0.25f,
                          4.0f};  // 17: a vector tail too
  const std::vector<float> x = s;
  float m = 3.0f, l = 2.0f, rescale = 0;
  online_softmax_tile(s.data(), s.size(), 1, int64_t(s.size()), &m, &l, &rescale);
  EXPECT_EQ(m, 4.0f);
  EXPECT_NEAR(rescale, std::exp(-1.0), 1e-7);
  double sum = 0;
  for (size_t t = 0; t < x.size(); ++t) {
    const double ref = std::isinf(x[t]) ? 0.0 : std::exp(double(x[t]) - 4.0);
    EXPECT_NEAR(s[t], ref, 3e-7 * ref + 1e-30) << t;
    sum += ref;
  }
  EXPECT_NEAR(l, 2.0 * std::exp(-1.0) + sum, 1e-6);
}

}  // namespace
}  // namespace vq::kv
