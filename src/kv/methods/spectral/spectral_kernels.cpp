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

// One row's dot product as 16 partial sums, for R rows at once: R independent chains of adds
// overlap in the pipeline, and each row's own order is unchanged.
template <int R>
HWY_INLINE void Dot16Block(const float* HWY_RESTRICT rows, const float* HWY_RESTRICT x, int n,
                           float* HWY_RESTRICT out) {
  const DF df;
  constexpr int N = int(hn::MaxLanes(df));
  const int V = 16 / int(hn::Lanes(df));  // vectors of partial sums
  const int whole = n / 16 * 16, tail = n - whole;
  hn::Vec<DF> acc[R][16 / N];
  for (int k = 0; k < R; ++k) {
    for (int v = 0; v < V; ++v) acc[k][v] = hn::Zero(df);
  }
  const int Nl = int(hn::Lanes(df));
  for (int i = 0; i < whole; i += 16) {
    for (int v = 0; v < V; ++v) {
      const auto xv = hn::LoadU(df, x + i + v * Nl);
      for (int k = 0; k < R; ++k) {
        const float* a = rows + static_cast<size_t>(k) * static_cast<size_t>(n);
        acc[k][v] = hn::Add(acc[k][v], hn::Mul(hn::LoadU(df, a + i + v * Nl), xv));
      }
    }
  }
  alignas(64) float part[16];
  for (int k = 0; k < R; ++k) {
    const float* a = rows + static_cast<size_t>(k) * static_cast<size_t>(n);
    for (int v = 0; v < V; ++v) hn::Store(acc[k][v], df, part + v * Nl);
    for (int j = 0; j < tail; ++j) part[j] += a[whole + j] * x[whole + j];
    float s = 0.0f;
    for (float p : part) s += p;
    out[k] = s;
  }
}

void Dot16Rows(const float* HWY_RESTRICT rows, int n_rows, const float* HWY_RESTRICT x, int n,
               float* HWY_RESTRICT out) {
  int r = 0;
  for (; r + 4 <= n_rows; r += 4) Dot16Block<4>(rows + static_cast<size_t>(r) * n, x, n, out + r);
  for (; r < n_rows; ++r) Dot16Block<1>(rows + static_cast<size_t>(r) * n, x, n, out + r);
}

// out[j] for four vectors of j at once, so that four chains of adds overlap; each output's sum
// over the rows keeps its order.
void AddScaledRows(const float* HWY_RESTRICT rows, int n_rows, const float* HWY_RESTRICT c, int n,
                   float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> df;
  const int N = int(hn::Lanes(df));
  int j = 0;
  for (; j + 4 * N <= n; j += 4 * N) {
    auto a0 = hn::LoadU(df, out + j), a1 = hn::LoadU(df, out + j + N);
    auto a2 = hn::LoadU(df, out + j + 2 * N), a3 = hn::LoadU(df, out + j + 3 * N);
    for (int i = 0; i < n_rows; ++i) {
      if (c[i] == 0.0f) continue;
      const auto ci = hn::Set(df, c[i]);
      const float* row = rows + static_cast<size_t>(i) * n + j;
      a0 = hn::Add(a0, hn::Mul(ci, hn::LoadU(df, row)));
      a1 = hn::Add(a1, hn::Mul(ci, hn::LoadU(df, row + N)));
      a2 = hn::Add(a2, hn::Mul(ci, hn::LoadU(df, row + 2 * N)));
      a3 = hn::Add(a3, hn::Mul(ci, hn::LoadU(df, row + 3 * N)));
    }
    hn::StoreU(a0, df, out + j);
    hn::StoreU(a1, df, out + j + N);
    hn::StoreU(a2, df, out + j + 2 * N);
    hn::StoreU(a3, df, out + j + 3 * N);
  }
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
