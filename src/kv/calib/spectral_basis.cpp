#include "src/kv/calib/spectral_basis.h"

// Eigen's products would otherwise use OpenMP, and results must not depend on the thread count.
#define EIGEN_DONT_PARALLELIZE
#include <Eigen/Eigenvalues>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "veloxquant/error.h"

namespace vq::kv {

SpectralBasis spectral_basis(const std::vector<float>& rows, int64_t n, int d) {
  VQ_CHECK(n >= 2 && d >= 1 && rows.size() >= size_t(n) * size_t(d),
           fmt::format("spectral basis: {} vectors of {} floats are too few", n, d));
  Eigen::VectorXd mean = Eigen::VectorXd::Zero(d);
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < d; ++j) mean[j] += rows[size_t(i) * d + j];
  }
  mean /= double(n);
  // Covariance in double, accumulated a block of rows at a time as a rank-k update.
  Eigen::MatrixXd cov = Eigen::MatrixXd::Zero(d, d);
  constexpr int64_t kChunk = 256;
  Eigen::MatrixXd x(kChunk, d);
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t m = std::min(kChunk, n - i0);
    for (int64_t i = 0; i < m; ++i) {
      for (int j = 0; j < d; ++j) x(i, j) = rows[size_t(i0 + i) * d + j] - mean[j];
    }
    cov.selfadjointView<Eigen::Lower>().rankUpdate(x.topRows(m).transpose());
  }
  cov = cov.selfadjointView<Eigen::Lower>();
  cov /= double(n - 1);
  const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(cov);
  VQ_CHECK(eig.info() == Eigen::Success, "spectral basis: the eigen-decomposition did not converge");
  SpectralBasis b;
  b.mean.resize(size_t(d));
  b.sigma.resize(size_t(d));
  b.basis.resize(size_t(d) * d);
  for (int j = 0; j < d; ++j) b.mean[size_t(j)] = float(mean[j]);
  // Eigen orders eigenvalues ascending; the basis holds them descending.
  const double top = std::sqrt(std::max(eig.eigenvalues()[d - 1], 0.0));
  const double floor = std::max(top * kSigmaFloor, 1e-12);
  for (int i = 0; i < d; ++i) {
    const int src = d - 1 - i;
    b.sigma[size_t(i)] = float(std::max(std::sqrt(std::max(eig.eigenvalues()[src], 0.0)), floor));
    Eigen::VectorXd v = eig.eigenvectors().col(src);
    // A sign convention (largest coordinate positive) so the basis does not depend on the solver's.
    Eigen::Index at = 0;
    v.cwiseAbs().maxCoeff(&at);
    if (v[at] < 0) v = -v;
    v.normalize();
    for (int j = 0; j < d; ++j) b.basis[size_t(i) * d + j] = float(v[j]);
  }
  // Floors can only lower-bound; keep the order descending after float rounding.
  for (int i = 1; i < d; ++i) b.sigma[size_t(i)] = std::min(b.sigma[size_t(i)], b.sigma[size_t(i) - 1]);
  return b;
}

double participation_ratio(const SpectralBasis& b) {
  double s = 0, s2 = 0;
  for (float x : b.sigma) {
    const double l = double(x) * x;
    s += l;
    s2 += l * l;
  }
  return s2 > 0 ? s * s / s2 : 0.0;
}

}  // namespace vq::kv
