// The per-token operations (src/engine/ops.h) that have vector kernels: gelu_mul on every target
// this CPU runs gives gelu_ggml(gate) * up bit for bit, at the ±10 edges and just inside them (where
// the gate rounds to ±10), on fp16 rounding ties, for infinities and NaN, and in the scalar tail.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "src/core/rng.h"
#include "src/engine/ops.h"
#include "tests/each_target.h"

namespace vq::engine {
namespace {

TEST(GeluMul, EqualsTheScalarGeluOnEveryTarget) {
  std::vector<float> gate = {-10.0f, 10.0f, std::nextafter(-10.0f, 0.0f), std::nextafter(10.0f, 0.0f), -10.5f,
                             11.0f, 0.0f, -0.0f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 1e-8f, -6e-8f,
                             std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  gate.push_back(nan);
  Rng rng(5);
  while (gate.size() < 1002) gate.push_back(float(rng.normal() * 4.0));
  gate.push_back(nan);  // in the scalar tail
  std::vector<float> up(gate.size());
  for (auto& u : up) u = float(rng.normal());
  // A NaN gate looks up a zero entry, so its product is a zero (as ggml's table gives).
  std::vector<float> want(gate.size());
  for (size_t i = 0; i < gate.size(); ++i) want[i] = (std::isnan(gate[i]) ? 0.0f : gelu_ggml(gate[i])) * up[i];
  // Just below 10 the gate rounds to 10 in fp16: ggml's table entry there, about 10, not 0.
  EXPECT_EQ(gelu_ggml(std::nextafter(10.0f, 0.0f)), 10.0f);
  const int targets = for_each_supported_target([&] {
    std::vector<float> got(gate.size());
    gelu_mul(gate.data(), up.data(), int64_t(gate.size()), got.data());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(0, std::memcmp(&got[i], &want[i], sizeof(float)))
          << "gate " << gate[i] << " gives " << got[i] << ", want " << want[i];
    }
  });
  EXPECT_GE(targets, 1);
}

}  // namespace
}  // namespace vq::engine
