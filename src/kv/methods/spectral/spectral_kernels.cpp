// Highway versions of SpectralQuant's basis products (spectral_kernels.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/methods/spectral/spectral_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/kv/methods/spectral/spectral_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace vq::kv::spectral {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// 16 partial sums whatever the vector width: 16 / N vectors of them.
using DF = hn::CappedTag<float, 16>;

void Dot16Rows(const float* HWY_RESTRICT rows, int n_rows, const float* HWY_RESTRICT x, int n,
               float* HWY_RESTRICT out) {
  const DF df;
  const int N = int(hn::Lanes(df));
  const int V = 16 / N;  // vectors of partial sums
  const int whole = n / 16 * 16, tail = n - whole;
  alignas(64) float part[16];
  for (int r = 0; r < n_rows; ++r) {
    const float* a = rows + static_cast<size_t>(r) * static_cast<size_t>(n);
    hn::Vec<DF> acc[16];
    for (int v = 0; v < V; ++v) acc[v] = hn::Zero(df);
    for (int i = 0; i < whole; i += 16) {
      for (int v = 0; v < V; ++v) {
        acc[v] = hn::Add(acc[v], hn::Mul(hn::LoadU(df, a + i + v * N), hn::LoadU(df, x + i + v * N)));
      }
    }
    for (int v = 0; v < V; ++v) hn::Store(acc[v], df, part + v * N);
    for (int j = 0; j < tail; ++j) part[j] += a[whole + j] * x[whole + j];
    float s = 0.0f;
    for (float p : part) s += p;
    out[r] = s;
  }
}

void AddScaledRows(const float* HWY_RESTRICT rows, int n_rows, const float* HWY_RESTRICT c, int n,
                   float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> df;
  const int N = int(hn::Lanes(df));
  int j = 0;
  for (; j + N <= n; j += N) {
    auto acc = hn::LoadU(df, out + j);
    for (int i = 0; i < n_rows; ++i) {
      if (c[i] == 0.0f) continue;
      acc = hn::Add(acc, hn::Mul(hn::Set(df, c[i]), hn::LoadU(df, rows + static_cast<size_t>(i) * n + j)));
    }
    hn::StoreU(acc, df, out + j);
  }
  for (; j < n; ++j) {
    float s = out[j];
    for (int i = 0; i < n_rows; ++i) {
      if (c[i] != 0.0f) s += c[i] * rows[static_cast<size_t>(i) * n + j];
    }
    out[j] = s;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv::spectral
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq::kv::spectral {
HWY_EXPORT(Dot16Rows);
HWY_EXPORT(AddScaledRows);

void dot16_rows(const float* rows, int n_rows, const float* x, int n, float* out) {
  HWY_DYNAMIC_DISPATCH(Dot16Rows)(rows, n_rows, x, n, out);
}

void add_scaled_rows(const float* rows, int n_rows, const float* c, int n, float* out) {
  HWY_DYNAMIC_DISPATCH(AddScaledRows)(rows, n_rows, c, n, out);
}
}  // namespace vq::kv::spectral
#endif
