// Walsh-Hadamard: H H = n I, the randomized rotation is orthonormal, inverse undoes forward,
// and the normalized transform without signs is its own inverse.
#include "src/core/hadamard.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "hwy/targets.h"

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

// The butterflies below one vector run in registers (shuffles), the rest from memory or, for the
// rotation of up to 8 vectors, in registers too: every SIMD target this CPU runs gives the bits
// of the plain butterflies, stride 1 first.
TEST(Hadamard, SameBitsAsPlainButterfliesOnEveryTarget) {
  const auto plain = [](float* y, size_t n) {
    for (size_t h = 1; h < n; h *= 2) {
      for (size_t i = 0; i < n; i += 2 * h) {
        for (size_t j = i; j < i + h; ++j) {
          const float a = y[j], b = y[j + h];
          y[j] = a + b;
          y[j + h] = a - b;
        }
      }
    }
  };
  Rng rng(9);
  int tried = 0;
  const int64_t all = hwy::SupportedTargets() & HWY_TARGETS;
  for (int64_t bits = all; bits != 0; bits &= bits - 1) {
    hwy::SetSupportedTargetsForTest(bits & -bits);
    hwy::GetChosenTarget().Update(hwy::SupportedTargets());
    for (size_t n : {1, 2, 4, 8, 16, 32, 64, 128, 256, 1024}) {
      std::vector<float> x(n);
      for (auto& v : x) v = float(rng.normal());
      std::vector<float> want = x;
      plain(want.data(), n);
      std::vector<float> x0 = x;
      fwht(x.data(), n);
      EXPECT_EQ(0, std::memcmp(x.data(), want.data(), n * 4)) << hwy::TargetName(bits & -bits) << ", n " << n;
      // The rotation: signs D (read off forward(e_i)'s first entry, H's first row being all +1),
      // the butterflies, the scale; and its inverse, the scale with the signs after them.
      const RandomizedHadamard r(n, 17);
      const float norm = 1.0f / std::sqrt(float(n));
      std::vector<float> sign(n), fwd = x0, inv = x0, want_fwd = x0, want_inv = x0;
      for (size_t i = 0; i < n; ++i) {
        std::vector<float> e(n, 0.0f);
        e[i] = 1.0f;
        r.forward(e.data());
        sign[i] = e[0] > 0 ? 1.0f : -1.0f;
        want_fwd[i] *= sign[i];
      }
      plain(want_fwd.data(), n);
      plain(want_inv.data(), n);
      for (size_t i = 0; i < n; ++i) {
        want_fwd[i] *= norm;
        want_inv[i] *= norm * sign[i];
      }
      r.forward(fwd.data());
      r.inverse(inv.data());
      EXPECT_EQ(0, std::memcmp(fwd.data(), want_fwd.data(), n * 4)) << "forward, n " << n;
      EXPECT_EQ(0, std::memcmp(inv.data(), want_inv.data(), n * 4)) << "inverse, n " << n;
    }
    ++tried;
  }
  hwy::SetSupportedTargetsForTest(0);
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
  EXPECT_GE(tried, 2);
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
