#include "src/kv/calib/commvq_codebook.h"

#define EIGEN_DONT_PARALLELIZE  // results must not depend on the thread count
#include <Eigen/Cholesky>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "src/core/rng.h"
#include "src/core/threads.h"
#include "src/kv/kernels/vector_ops.h"
#include "veloxquant/error.h"

namespace vq::kv {

namespace {
constexpr int K = kCommHalfCodes;
}

CommCodebook::CommCodebook(int d, std::vector<float> book) : d_(d), pairs_(d / 2), book_(std::move(book)) {
  VQ_CHECK(d >= 2 && d % 2 == 0, fmt::format("commvq: head_dim {} is not even", d));
  const size_t per_stage = size_t(2) * K * size_t(pairs_);
  VQ_CHECK(!book_.empty() && book_.size() % per_stage == 0, "commvq: a codebook is not a whole number of stages");
  stages_ = int(book_.size() / per_stage);
  u_.resize(size_t(stages_) * K * d_);
  w_.resize(u_.size());
  norm_.resize(size_t(stages_) * K);
  g_.resize(size_t(stages_) * K * K);
  for (int s = 0; s < stages_; ++s) {
    const float* X = book_.data() + size_t(s) * per_stage;
    const float* Y = X + size_t(K) * pairs_;
    for (int j = 0; j < K; ++j) {
      float* u = u_.data() + (size_t(s) * K + j) * d_;
      float* w = w_.data() + (size_t(s) * K + j) * d_;
      double nn = 0;
      for (int f = 0; f < pairs_; ++f) {
        const float x = X[size_t(j) * pairs_ + f], y = Y[size_t(j) * pairs_ + f];
        u[2 * f] = x;
        u[2 * f + 1] = y;
        w[2 * f] = -y;  // i z_B = (-Y_B, X_B)
        w[2 * f + 1] = x;
        nn += double(x) * x + double(y) * y;
      }
      norm_[size_t(s) * K + j] = float(nn);
    }
    for (int a = 0; a < K; ++a) {
      for (int b = 0; b < K; ++b) {
        const float* u = u_.data() + (size_t(s) * K + a) * d_;
        const float* w = w_.data() + (size_t(s) * K + b) * d_;
        double g = 0;
        for (int j = 0; j < d_; ++j) g += double(u[j]) * w[j];
        g_[(size_t(s) * K + a) * K + b] = float(g);
      }
    }
  }
}

void CommCodebook::nearest(int s, const float* e, int* a_out, int* b_out) const {
  float a[K], b[K];
  dot_rows(u_.data() + size_t(s) * K * d_, K, size_t(d_), e, d_, a, 1);
  dot_rows(w_.data() + size_t(s) * K * d_, K, size_t(d_), e, d_, b, 1);
  const float* n = norm_.data() + size_t(s) * K;
  const float* g = g_.data() + size_t(s) * K * K;
  float cb[K];
  for (int j = 0; j < K; ++j) cb[j] = n[j] - 2.0f * b[j];
  float best = std::numeric_limits<float>::infinity();
  int ba = 0, bb = 0;
  for (int i = 0; i < K; ++i) {
    const float ca = n[i] - 2.0f * a[i];
    const float* gi = g + size_t(i) * K;
    for (int j = 0; j < K; ++j) {
      const float c = ca + cb[j] + 2.0f * gi[j];
      if (c < best) {
        best = c;
        ba = i;
        bb = j;
      }
    }
  }
  *a_out = ba;
  *b_out = bb;
}

void CommCodebook::subtract(int s, int a, int b, float* e) const {
  const float* u = u_.data() + (size_t(s) * K + a) * d_;
  const float* w = w_.data() + (size_t(s) * K + b) * d_;
  for (int j = 0; j < d_; ++j) e[j] -= u[j] + w[j];
}

void CommCodebook::encode(float* e, uint8_t* codes) const {
  for (int s = 0; s < stages_; ++s) {
    int a = 0, b = 0;
    nearest(s, e, &a, &b);
    subtract(s, a, b, e);
    codes[2 * s] = uint8_t(a);
    codes[2 * s + 1] = uint8_t(b);
  }
}

void CommCodebook::decode(const uint8_t* codes, float* out) const {
  std::fill(out, out + d_, 0.0f);
  for (int s = 0; s < stages_; ++s) {
    const float* u = u_.data() + (size_t(s) * K + codes[2 * s]) * d_;
    const float* w = w_.data() + (size_t(s) * K + codes[2 * s + 1]) * d_;
    for (int j = 0; j < d_; ++j) out[j] += u[j] + w[j];
  }
}

std::vector<float> train_comm_codebook(const std::vector<float>& rows, int64_t n, int d, int stages, int rounds,
                                       uint64_t seed) {
  VQ_CHECK(n >= K && d >= 2 && d % 2 == 0 && stages >= 1,
           fmt::format("commvq calibration: {} vectors of {} floats, at least {} even-sized ones needed", n, d, K));
  const int P = d / 2;
  const size_t per_stage = size_t(2) * K * P;
  std::vector<float> resid(rows.begin(), rows.begin() + ptrdiff_t(size_t(n) * d));
  std::vector<float> book;
  Rng rng(seed);
  std::vector<int> as(static_cast<size_t>(n)), bs(static_cast<size_t>(n));
  // A half-code z_j (it serves as A and as B) starts at half a random residual; EM moves it.
  const auto seed_code = [&](std::vector<float>& th, int j) {
    const float* e = resid.data() + size_t(rng.next_u64() % uint64_t(n)) * d;
    for (int f = 0; f < P; ++f) {
      th[size_t(j) * P + f] = 0.5f * e[2 * f];
      th[size_t(K + j) * P + f] = 0.5f * e[2 * f + 1];
    }
  };
  for (int s = 0; s < stages; ++s) {
    std::vector<float> th(per_stage, 0.0f);  // X [64][P], then Y [64][P]
    for (int j = 0; j < K; ++j) seed_code(th, j);
    for (int round = 0; round <= rounds; ++round) {
      const CommCodebook cb(d, th);
      parallel_for((n + 255) / 256, [&](int64_t c) {
        for (int64_t i = c * 256; i < std::min(n, (c + 1) * 256); ++i) {
          cb.nearest(0, resid.data() + size_t(i) * d, &as[size_t(i)], &bs[size_t(i)]);
        }
      });
      if (round == rounds) {
        for (int64_t i = 0; i < n; ++i) cb.subtract(0, as[size_t(i)], bs[size_t(i)], resid.data() + size_t(i) * d);
        break;
      }
      // M step: minimize sum_n |e_n - (X_A - Y_B, Y_A + X_B)|^2 over X, Y for each pair. Unknowns
      // [X_0..63, Y_0..63]; the normal matrix depends only on the assignment counts.
      Eigen::MatrixXd Km = Eigen::MatrixXd::Zero(2 * K, 2 * K);
      Eigen::MatrixXd H = Eigen::MatrixXd::Zero(2 * K, P);
      for (int64_t i = 0; i < n; ++i) {
        const int a = as[size_t(i)], b = bs[size_t(i)];
        // x-row: +X_a - Y_b; y-row: +Y_a + X_b.
        Km(a, a) += 1;
        Km(K + b, K + b) += 1;
        Km(a, K + b) -= 1;
        Km(K + b, a) -= 1;
        Km(K + a, K + a) += 1;
        Km(b, b) += 1;
        Km(K + a, b) += 1;
        Km(b, K + a) += 1;
        const float* e = resid.data() + size_t(i) * d;
        for (int f = 0; f < P; ++f) {
          const double x = e[2 * f], y = e[2 * f + 1];
          H(a, f) += x;
          H(K + b, f) -= x;
          H(K + a, f) += y;
          H(b, f) += y;
        }
      }
      Km.diagonal().array() += 1e-6 * std::max(1.0, Km.diagonal().mean());
      const Eigen::MatrixXd theta = Km.ldlt().solve(H);
      for (int j = 0; j < 2 * K; ++j) {
        for (int f = 0; f < P; ++f) th[size_t(j) * P + f] = float(theta(j, f));
      }
      // A half-code no vector chose is seeded again from a sample.
      for (int j = 0; j < K; ++j) {
        if (Km(j, j) < 0.5) seed_code(th, j);
      }
    }
    book.insert(book.end(), th.begin(), th.end());
  }
  return book;
}

}  // namespace vq::kv
