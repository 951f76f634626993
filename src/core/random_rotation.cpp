// The dense case: Householder QR of an n x n matrix of seeded standard normals, in double, then
// Q's columns multiplied by the signs of R's diagonal so that Q is Haar-distributed rather than
// biased by the QR convention (Mezzadri, "How to generate random matrices from the classical
// compact groups", 2007).
#include "src/core/random_rotation.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "src/core/dense_rotation_kernels.h"
#include "src/core/rng.h"
#include "veloxquant/error.h"

namespace vq {

RandomRotation::RandomRotation(size_t n, uint64_t seed) : n_(n) {
  VQ_CHECK(n >= 1, "random rotation: dimension must be positive");
  if (is_power_of_two(n)) {
    hadamard_.emplace(n, seed);
    return;
  }
  VQ_CHECK(n <= kMaxDense,
           fmt::format("random rotation: dimension {} is not a power of two and above {} (dense matrix too large)", n,
                       kMaxDense));
  Rng rng(seed);
  std::vector<double> a(n * n);  // column-major: a[c * n + r]
  for (auto& v : a) v = rng.normal();
  // Householder vectors stored in place below the diagonal; R's diagonal kept apart.
  std::vector<double> beta(n, 0.0), rdiag(n, 0.0);
  for (size_t k = 0; k < n; ++k) {
    double* col = a.data() + k * n;
    double norm2 = 0;
    for (size_t r = k; r < n; ++r) norm2 += col[r] * col[r];
    const double norm = std::sqrt(norm2);
    const double alpha = col[k] >= 0 ? -norm : norm;  // R_kk, sign chosen to avoid cancellation
    rdiag[k] = alpha;
    const double v0 = col[k] - alpha;
    const double vnorm2 = norm2 - col[k] * col[k] + v0 * v0;
    col[k] = v0;
    beta[k] = vnorm2 > 0 ? 2.0 / vnorm2 : 0.0;
    for (size_t c = k + 1; c < n; ++c) {  // apply I - beta v v^T to the remaining columns
      double* x = a.data() + c * n;
      double dot = 0;
      for (size_t r = k; r < n; ++r) dot += col[r] * x[r];
      dot *= beta[k];
      for (size_t r = k; r < n; ++r) x[r] -= dot * col[r];
    }
  }
  // Q = H_0 H_1 ... H_{n-1}: apply the reflections to the identity, last first.
  std::vector<double> q(n * n, 0.0);  // column-major
  for (size_t i = 0; i < n; ++i) q[i * n + i] = 1.0;
  for (size_t k = n; k-- > 0;) {
    const double* v = a.data() + k * n;
    for (size_t c = 0; c < n; ++c) {
      double* x = q.data() + c * n;
      double dot = 0;
      for (size_t r = k; r < n; ++r) dot += v[r] * x[r];
      dot *= beta[k];
      for (size_t r = k; r < n; ++r) x[r] -= dot * v[r];
    }
  }
  q_.resize(n * n);
  qt_.resize(n * n);
  for (size_t c = 0; c < n; ++c) {
    const double s = rdiag[c] < 0 ? -1.0 : 1.0;
    for (size_t r = 0; r < n; ++r) q_[r * n + c] = qt_[c * n + r] = float(q[c * n + r] * s);
  }
}

// Q x: output r is sum over c of Q[r][c] x[c], Q's column c is qt_'s row c.
void RandomRotation::forward(float* x) const {
  if (hadamard_) return hadamard_->forward(x);
  dense_rotation::apply_columns(qt_.data(), n_, x);
}

// Q^T x: output c is sum over r of Q[r][c] x[r], Q^T's column r is Q's row r.
void RandomRotation::inverse(float* x) const {
  if (hadamard_) return hadamard_->inverse(x);
  dense_rotation::apply_columns(q_.data(), n_, x);
}

void RandomRotation::forward_rows(float* x, size_t rows, size_t stride) const {
  if (hadamard_) return hadamard_->forward_rows(x, rows, stride);
  dense_rotation::apply_columns(qt_.data(), n_, x, rows, stride);
}

void RandomRotation::inverse_rows(float* x, size_t rows, size_t stride) const {
  if (hadamard_) return hadamard_->inverse_rows(x, rows, stride);
  dense_rotation::apply_columns(q_.data(), n_, x, rows, stride);
}

size_t RandomRotation::bytes() const {
  return hadamard_ ? hadamard_->bytes() : (q_.size() + qt_.size()) * sizeof(float);
}

}  // namespace vq
