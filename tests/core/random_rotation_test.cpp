// RandomRotation: orthogonal at every dimension, inverse undoes forward, the power-of-two case is
// exactly the randomized Hadamard transform, seeds give different and reproducible matrices, and
// the dense case is Haar-distributed (a fixed unit vector lands on a uniformly random direction).
#include "src/core/random_rotation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "src/core/hadamard.h"
#include "src/core/rng.h"
#include "veloxquant/error.h"

namespace vq {
namespace {

TEST(RandomRotation, OrthogonalAndInverse) {
  Rng rng(3);
  for (size_t n : {1, 3, 48, 80, 96, 112, 128, 160, 192}) {
    SCOPED_TRACE(n);
    const RandomRotation r(n, 11);
    EXPECT_EQ(r.dense(), !is_power_of_two(n));
    // Columns Q e_i are orthonormal.
    std::vector<std::vector<float>> cols(n, std::vector<float>(n, 0.0f));
    for (size_t i = 0; i < n; ++i) {
      cols[i][i] = 1.0f;
      r.forward(cols[i].data());
    }
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = i; j < n; ++j) {
        double dot = 0;
        for (size_t k = 0; k < n; ++k) dot += double(cols[i][k]) * cols[j][k];
        EXPECT_NEAR(dot, i == j ? 1.0 : 0.0, 2e-6);
      }
    }
    std::vector<float> x(n), y;
    for (auto& v : x) v = float(rng.normal());
    y = x;
    r.forward(y.data());
    r.inverse(y.data());
    for (size_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], x[i], 1e-5);
  }
}

TEST(RandomRotation, PowerOfTwoIsTheRandomizedHadamard) {
  const RandomRotation r(128, 77);
  const RandomizedHadamard h(128, 77);
  Rng rng(5);
  std::vector<float> x(128), y;
  for (auto& v : x) v = float(rng.normal());
  y = x;
  r.forward(x.data());
  h.forward(y.data());
  EXPECT_EQ(x, y);
  EXPECT_EQ(r.bytes(), h.bytes());
}

TEST(RandomRotation, SeedsDifferAndRepeat) {
  const RandomRotation a(96, 1), b(96, 2), c(96, 1);
  std::vector<float> xa(96, 1.0f), xb(96, 1.0f), xc(96, 1.0f);
  a.forward(xa.data());
  b.forward(xb.data());
  c.forward(xc.data());
  EXPECT_EQ(xa, xc);
  EXPECT_NE(xa, xb);
  EXPECT_EQ(a.bytes(), 2u * 96u * 96u * sizeof(float));  // the matrix and its transpose
}

// Under the Haar measure Q e_0 is uniform on the sphere: each coordinate has mean 0 and variance
// 1/n, and its first coordinate's square has mean 1/n. A QR without the sign fix makes
// Q's first column follow the sign convention (its first entry would always be negative).
TEST(RandomRotation, DenseIsHaarDistributed) {
  const size_t n = 24;
  const int seeds = 4000;
  double mean0 = 0, sq0 = 0, sq_last = 0;
  for (int s = 0; s < seeds; ++s) {
    const RandomRotation r(n, uint64_t(1000 + s));
    std::vector<float> e(n, 0.0f);
    e[0] = 1.0f;
    r.forward(e.data());
    mean0 += e[0];
    sq0 += double(e[0]) * e[0];
    sq_last += double(e[n - 1]) * e[n - 1];
  }
  mean0 /= seeds;
  sq0 /= seeds;
  sq_last /= seeds;
  const double se = std::sqrt(1.0 / n / seeds);  // standard error of the mean of one coordinate
  EXPECT_NEAR(mean0, 0.0, 4 * se);
  EXPECT_NEAR(sq0 * n, 1.0, 0.08);
  EXPECT_NEAR(sq_last * n, 1.0, 0.08);
}

// The batched forms give each row the bits of forward / inverse one row at a time, for the
// Hadamard form at every in-register size and above, and for the dense form; rows between the
// strides are not touched. Five rows cover the dense form's blocks of rows and its remainder;
// 100 its columns past the last whole vectors.
TEST(RandomRotation, RowsAreOneAtATime) {
  for (size_t n : {4, 8, 16, 32, 64, 128, 256, 48, 100}) {
    const RandomRotation rot(n, 5);
    const size_t rows = 5, stride = n + 3;
    Rng rng(n);
    std::vector<float> x(rows * stride);
    for (auto& v : x) v = float(rng.normal());
    for (int inverse = 0; inverse < 2; ++inverse) {
      std::vector<float> batch = x, one = x;
      if (inverse) {
        rot.inverse_rows(batch.data(), rows, stride);
      } else {
        rot.forward_rows(batch.data(), rows, stride);
      }
      for (size_t r = 0; r < rows; ++r) {
        if (inverse) {
          rot.inverse(one.data() + r * stride);
        } else {
          rot.forward(one.data() + r * stride);
        }
      }
      EXPECT_EQ(batch, one) << "n " << n << (inverse ? " inverse" : " forward");
      EXPECT_NE(batch, x);
    }
  }
}

TEST(RandomRotation, RefusesTooLargeDense) {
  EXPECT_THROW(RandomRotation(RandomRotation::kMaxDense + 1, 1), Error);
  EXPECT_THROW(RandomRotation(0, 1), Error);
  EXPECT_NO_THROW(RandomRotation(2048, 1));  // a power of two: Hadamard
}

}  // namespace
}  // namespace vq
