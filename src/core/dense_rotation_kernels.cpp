// Highway version of the dense rotation's products (dense_rotation_kernels.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/core/dense_rotation_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include <cstddef>

#include "hwy/highway.h"
#include "src/core/dense_rotation_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace vq::dense_rotation {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr size_t kMaxN = 1024;  // RandomRotation::kMaxDense

void ApplyColumns(const float* HWY_RESTRICT m, size_t n, float* x) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;  // as many floats as a vector has doubles
  const size_t N = hn::Lanes(dd);
  alignas(64) double y[kMaxN];
  alignas(64) double xd[kMaxN];
  for (size_t j = 0; j < n; ++j) xd[j] = double(x[j]);
  size_t i = 0;
  // Four vectors of outputs at a time, so that four chains of dependent sums run side by side.
  for (; i + 4 * N <= n; i += 4 * N) {
    auto a0 = hn::Zero(dd), a1 = hn::Zero(dd), a2 = hn::Zero(dd), a3 = hn::Zero(dd);
    for (size_t j = 0; j < n; ++j) {
      const float* col = m + j * n + i;
      const auto xj = hn::Set(dd, xd[j]);
      a0 = hn::Add(a0, hn::Mul(hn::PromoteTo(dd, hn::LoadU(df, col)), xj));
      a1 = hn::Add(a1, hn::Mul(hn::PromoteTo(dd, hn::LoadU(df, col + N)), xj));
      a2 = hn::Add(a2, hn::Mul(hn::PromoteTo(dd, hn::LoadU(df, col + 2 * N)), xj));
      a3 = hn::Add(a3, hn::Mul(hn::PromoteTo(dd, hn::LoadU(df, col + 3 * N)), xj));
    }
    hn::Store(a0, dd, y + i);
    hn::Store(a1, dd, y + i + N);
    hn::Store(a2, dd, y + i + 2 * N);
    hn::Store(a3, dd, y + i + 3 * N);
  }
  for (; i + N <= n; i += N) {
    auto acc = hn::Zero(dd);
    for (size_t j = 0; j < n; ++j) {
      acc = hn::Add(acc, hn::Mul(hn::PromoteTo(dd, hn::LoadU(df, m + j * n + i)), hn::Set(dd, xd[j])));
    }
    hn::Store(acc, dd, y + i);
  }
  for (; i < n; ++i) {
    double s = 0;
    for (size_t j = 0; j < n; ++j) s += double(m[j * n + i]) * xd[j];
    y[i] = s;
  }
  for (size_t k = 0; k < n; ++k) x[k] = float(y[k]);
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::dense_rotation
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq::dense_rotation {
HWY_EXPORT(ApplyColumns);

void apply_columns(const float* m, size_t n, float* x) { HWY_DYNAMIC_DISPATCH(ApplyColumns)(m, n, x); }
}  // namespace vq::dense_rotation
#endif
