// Highway version of the dense rotation's products (dense_rotation_kernels.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/core/dense_rotation_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include <cstddef>
#include <vector>

#include "hwy/highway.h"
#include "src/core/dense_rotation_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace vq::dense_rotation {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;


// Rows x_0 .. x_{R-1} (stride apart) at once: each pass over the matrix's columns serves R rows,
// so that the matrix (n^2 floats, from L2 for the sizes used) streams once per R rows, and 4 R
// chains of sums run side by side. Each output's sum keeps the scalar order.
template <int R>
HWY_INLINE void ApplyBlock(const float* HWY_RESTRICT m, size_t n, float* x, size_t stride) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;  // as many floats as a vector has doubles
  const size_t N = hn::Lanes(dd);
  // Scratch on the heap, kept per thread (a static array here would be static TLS, reserved and
  // cleared for every thread the process starts).
  static thread_local std::vector<double> scratch;
  scratch.resize(2 * size_t(R) * n);
  double* y[R];
  double* xd[R];
  for (int r = 0; r < R; ++r) {
    y[r] = scratch.data() + size_t(r) * n;
    xd[r] = scratch.data() + size_t(R + r) * n;
    for (size_t j = 0; j < n; ++j) xd[r][j] = double(x[r * stride + j]);
  }
  size_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    hn::Vec<decltype(dd)> a[R][4];
    for (int r = 0; r < R; ++r) {
      for (int k = 0; k < 4; ++k) a[r][k] = hn::Zero(dd);
    }
    for (size_t j = 0; j < n; ++j) {
      const float* col = m + j * n + i;
      const auto c0 = hn::PromoteTo(dd, hn::LoadU(df, col)), c1 = hn::PromoteTo(dd, hn::LoadU(df, col + N));
      const auto c2 = hn::PromoteTo(dd, hn::LoadU(df, col + 2 * N)), c3 = hn::PromoteTo(dd, hn::LoadU(df, col + 3 * N));
      for (int r = 0; r < R; ++r) {
        const auto xj = hn::Set(dd, xd[r][j]);
        a[r][0] = hn::Add(a[r][0], hn::Mul(c0, xj));
        a[r][1] = hn::Add(a[r][1], hn::Mul(c1, xj));
        a[r][2] = hn::Add(a[r][2], hn::Mul(c2, xj));
        a[r][3] = hn::Add(a[r][3], hn::Mul(c3, xj));
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int k = 0; k < 4; ++k) hn::StoreU(a[r][k], dd, y[r] + i + k * N);
    }
  }
  for (; i + N <= n; i += N) {
    for (int r = 0; r < R; ++r) {
      auto acc = hn::Zero(dd);
      for (size_t j = 0; j < n; ++j) {
        acc = hn::Add(acc, hn::Mul(hn::PromoteTo(dd, hn::LoadU(df, m + j * n + i)), hn::Set(dd, xd[r][j])));
      }
      hn::StoreU(acc, dd, y[r] + i);
    }
  }
  for (; i < n; ++i) {
    for (int r = 0; r < R; ++r) {
      double s = 0;
      for (size_t j = 0; j < n; ++j) s += double(m[j * n + i]) * xd[r][j];
      y[r][i] = s;
    }
  }
  for (int r = 0; r < R; ++r) {
    for (size_t k = 0; k < n; ++k) x[r * stride + k] = float(y[r][k]);
  }
}

void ApplyColumns(const float* HWY_RESTRICT m, size_t n, float* x, size_t rows, size_t stride) {
  // Four rows where the registers hold 16 accumulators beside the columns (32 vector
  // registers), two elsewhere.
  constexpr int kR = HWY_MAX_BYTES >= 64 ? 4 : 2;
  size_t r = 0;
  for (; r + kR <= rows; r += kR) ApplyBlock<kR>(m, n, x + r * stride, stride);
  for (; r < rows; ++r) ApplyBlock<1>(m, n, x + r * stride, stride);
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::dense_rotation
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq::dense_rotation {
HWY_EXPORT(ApplyColumns);

void apply_columns(const float* m, size_t n, float* x, size_t rows, size_t stride) {
  HWY_DYNAMIC_DISPATCH(ApplyColumns)(m, n, x, rows, stride);
}
}  // namespace vq::dense_rotation
#endif
