// Fidelity metrics on hand-made activations whose fp16 rounding is known: keys 1 + 2^-12 (which
// fp16 rounds to 1) and 2 (exact), values exact.
#include "src/eval/fidelity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace vq::eval {
namespace {

constexpr int kDim = 64;
const double kEps = std::ldexp(1.0, -12);

// One KV head, one query head; token 0's key is all 1 + 2^-12, token 1's all 2; values 0.5 and -1;
// one query at position 1, all 2^-6, so that its scores are the key entries themselves.
LayerCapture hand_capture() {
  LayerCapture c;
  c.config = kv::LayerConfig(1, kDim, 0);
  c.n_q_heads = 1;
  c.scale = 1.0f;
  c.k.assign(kDim, float(1 + kEps));
  c.k.insert(c.k.end(), kDim, 2.0f);
  c.v.assign(kDim, 0.5f);
  c.v.insert(c.v.end(), kDim, -1.0f);
  c.q.assign(kDim, float(std::ldexp(1.0, -6)));
  c.q_pos = {1};
  return c;
}

double logistic(double x) { return 1 / (1 + std::exp(-x)); }

TEST(Fidelity, Fp16OnKnownVectors) {
  const LayerCapture cap = hand_capture();
  ASSERT_EQ(cap.n_tokens(), 2);
  const LayerFidelity f = measure_layer(kv::parse_method("fp16"), cap, 1);
  // Keys: token 0 loses 2^-12 in every entry.
  EXPECT_NEAR(f.key_rel_mse, kEps * kEps / ((1 + kEps) * (1 + kEps) + 4), 1e-15);
  EXPECT_NEAR(f.key_cos, 1.0, 1e-12);
  EXPECT_EQ(f.value_rel_mse, 0.0);
  EXPECT_NEAR(f.value_cos, 1.0, 1e-12);
  // Scores: (1 + 2^-12, 2) against (1, 2).
  EXPECT_NEAR(f.score_rel_err, std::sqrt(kEps * kEps / ((1 + kEps) * (1 + kEps) + 4)), 1e-12);
  // Two keys: half the L1 distance is the change of the first weight.
  EXPECT_NEAR(f.mass_moved, logistic(-1.0 + kEps) - logistic(-1.0), 1e-12);
  EXPECT_GT(f.mass_moved, 0.0);
  // The reference stores the same fp16 keys: the outputs match exactly.
  EXPECT_EQ(f.out_rel_err, 0.0);
}

TEST(Fidelity, CoarserStorageLosesMore) {
  const LayerCapture cap = hand_capture();
  LayerCapture noisy = cap;
  for (int j = 0; j < kDim; ++j) noisy.k[size_t(j)] = float(1 + 0.37 * std::sin(0.9 * j));
  const LayerFidelity a = measure_layer(kv::parse_method("q8"), noisy, 1);
  const LayerFidelity b = measure_layer(kv::parse_method("q4"), noisy, 1);
  EXPECT_GT(a.key_rel_mse, 0.0);
  EXPECT_LT(a.key_rel_mse, b.key_rel_mse);
  EXPECT_LT(b.key_cos, 1.0);
}

TEST(Fidelity, MethodMeanAndWorstLayer) {
  LayerCapture good = hand_capture(), bad = hand_capture();
  for (int j = 0; j < kDim; ++j) bad.k[size_t(j)] = float(3 * std::sin(1.7 * j));
  const kv::Method q4 = kv::parse_method("q4");
  const LayerFidelity fg = measure_layer(q4, good, 1), fb = measure_layer(q4, bad, 1);
  ASSERT_GT(fb.out_rel_err, fg.out_rel_err);
  const MethodFidelity m = measure_method(q4, {good, bad, good}, 1);
  ASSERT_EQ(m.layers.size(), 3u);
  EXPECT_EQ(m.worst_layer, 1);
  EXPECT_EQ(m.worst_out_rel_err, fb.out_rel_err);
  EXPECT_NEAR(m.mean.key_rel_mse, (2 * fg.key_rel_mse + fb.key_rel_mse) / 3, 1e-15);
  EXPECT_NEAR(m.mean.out_rel_err, (2 * fg.out_rel_err + fb.out_rel_err) / 3, 1e-15);
}

}  // namespace
}  // namespace vq::eval
