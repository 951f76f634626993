// Walsh-Hadamard: H H = n I, the randomized rotation is orthonormal, inverse undoes forward,
// and the normalized transform without signs is its own inverse.
#include "src/core/hadamard.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "src/core/rng.h"
#include "veloxquant/error.h"

namespace vq {
namespace {

TEST(Hadamard, TwiceIsNTimesIdentity) {
  Rng rng(5);
  for (size_t n : {1, 2, 4, 8, 16, 64, 128, 256, 1024}) {
    std::vector<float> x(n), y;
    for (auto& v : x) v = float(rng.normal());
    y = x;
    fwht(y.data(), n);
    fwht(y.data(), n);
    for (size_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], float(n) * x[i], 1e-4 * n) << n;
  }
}

TEST(Hadamard, MatchesDefinition) {
  const size_t n = 16;
  for (size_t col = 0; col < n; ++col) {
    std::vector<float> e(n, 0.0f);
    e[col] = 1.0f;
    fwht(e.data(), n);
    for (size_t row = 0; row < n; ++row) {
      const int parity = __builtin_popcountll(row & col) & 1;
      EXPECT_EQ(e[row], parity ? -1.0f : 1.0f);
    }
  }
}

TEST(Hadamard, RotationIsOrthonormalAndInvertible) {
  for (size_t n : {64, 128, 256}) {
    RandomizedHadamard r(n, 42);
    // Columns of R are R e_i: check R^T R = I through dot products of images.
    std::vector<std::vector<float>> cols(n, std::vector<float>(n, 0.0f));
    for (size_t i = 0; i < n; ++i) {
      cols[i][i] = 1.0f;
      r.forward(cols[i].data());
    }
    for (size_t i = 0; i < n; i += 7) {
      for (size_t j = 0; j < n; j += 5) {
        double dot = 0;
        for (size_t k = 0; k < n; ++k) dot += double(cols[i][k]) * cols[j][k];
        EXPECT_NEAR(dot, i == j ? 1.0 : 0.0, 1e-6);
      }
    }
    Rng rng(9);
    std::vector<float> x(n), y;
    for (auto& v : x) v = float(rng.normal());
    y = x;
    r.forward(y.data());
    r.inverse(y.data());
    for (size_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], x[i], 1e-5);
  }
}

TEST(Hadamard, NormalizedTransformIsItsOwnInverse) {
  const size_t n = 128;
  Rng rng(1);
  std::vector<float> x(n), y;
  for (auto& v : x) v = float(rng.normal());
  y = x;
  for (int pass = 0; pass < 2; ++pass) {
    fwht(y.data(), n);
    for (auto& v : y) v /= std::sqrt(float(n));
  }
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], x[i], 1e-5);
}

TEST(Hadamard, SeedsDiffer) {
  RandomizedHadamard a(64, 1), b(64, 2), c(64, 1);
  std::vector<float> xa(64, 1.0f), xb(64, 1.0f), xc(64, 1.0f);
  a.forward(xa.data());
  b.forward(xb.data());
  c.forward(xc.data());
  EXPECT_EQ(xa, xc);
  EXPECT_NE(xa, xb);
}

TEST(Hadamard, RejectsNonPowerOfTwo) {
  std::vector<float> x(12);
  EXPECT_THROW(fwht(x.data(), 12), Error);
  EXPECT_THROW(RandomizedHadamard(96, 1), Error);
}

}  // namespace
}  // namespace vq
