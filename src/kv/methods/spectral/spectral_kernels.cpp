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

// The dot products of R rows with X vectors (xs, x_stride apart), each as 16 partial sums: the
// R x X chains of adds overlap in the pipeline, each row streams once per X vectors, and every
// product keeps its own order of sums. out[x * out_stride + k] for row k and vector x.
template <int R, int X>
HWY_INLINE void Dot16Block(const float* HWY_RESTRICT rows, const float* HWY_RESTRICT xs, size_t x_stride, int n,
                           float* HWY_RESTRICT out, size_t out_stride) {
  const DF df;
  constexpr int N = int(hn::MaxLanes(df));
  const int Nl = int(hn::Lanes(df));
  const int V = 16 / Nl;  // vectors of partial sums
  const int whole = n / 16 * 16, tail = n - whole;
  hn::Vec<DF> acc[X][R][16 / N];
  for (int x = 0; x < X; ++x) {
    for (int k = 0; k < R; ++k) {
      for (int v = 0; v < V; ++v) acc[x][k][v] = hn::Zero(df);
    }
  }
  for (int i = 0; i < whole; i += 16) {
    for (int v = 0; v < V; ++v) {
      hn::Vec<DF> a[R];
      for (int k = 0; k < R; ++k) a[k] = hn::LoadU(df, rows + static_cast<size_t>(k) * static_cast<size_t>(n) + i + v * Nl);
      for (int x = 0; x < X; ++x) {
        const auto xv = hn::LoadU(df, xs + x * x_stride + i + v * Nl);
        for (int k = 0; k < R; ++k) acc[x][k][v] = hn::Add(acc[x][k][v], hn::Mul(a[k], xv));
      }
    }
  }
  alignas(64) float part[16];
  for (int x = 0; x < X; ++x) {
    const float* xr = xs + x * x_stride;
    for (int k = 0; k < R; ++k) {
      const float* a = rows + static_cast<size_t>(k) * static_cast<size_t>(n);
      for (int v = 0; v < V; ++v) hn::Store(acc[x][k][v], df, part + v * Nl);
      for (int j = 0; j < tail; ++j) part[j] += a[whole + j] * xr[whole + j];
      float s = 0.0f;
      for (float p : part) s += p;
      out[x * out_stride + k] = s;
    }
  }
}

// All rows against X vectors: four rows at a time, then one.
template <int X>
HWY_INLINE void Dot16AllRows(const float* HWY_RESTRICT rows, int n_rows, const float* HWY_RESTRICT xs, size_t x_stride,
                             int n, float* HWY_RESTRICT out, size_t out_stride) {
  int r = 0;
  for (; r + 4 <= n_rows; r += 4) Dot16Block<4, X>(rows + static_cast<size_t>(r) * n, xs, x_stride, n, out + r, out_stride);
  for (; r < n_rows; ++r) Dot16Block<1, X>(rows + static_cast<size_t>(r) * n, xs, x_stride, n, out + r, out_stride);
}

void Dot16RowsMulti(const float* HWY_RESTRICT rows, int n_rows, const float* HWY_RESTRICT xs, size_t x_stride, int n_x,
                    int n, float* HWY_RESTRICT out, size_t out_stride) {
  // Four vectors per pass where 4 x 4 accumulators fit the registers (one vector of partial
  // sums each, 32 registers), one elsewhere.
  constexpr int kX = HWY_MAX_BYTES >= 64 ? 4 : 1;
  int x = 0;
  for (; x + kX <= n_x; x += kX) Dot16AllRows<kX>(rows, n_rows, xs + x * x_stride, x_stride, n, out + x * out_stride, out_stride);
  for (; x < n_x; ++x) Dot16AllRows<1>(rows, n_rows, xs + x * x_stride, x_stride, n, out + x * out_stride, out_stride);
}

void Dot16Rows(const float* HWY_RESTRICT rows, int n_rows, const float* HWY_RESTRICT x, int n,
               float* HWY_RESTRICT out) {
  Dot16AllRows<1>(rows, n_rows, x, 0, n, out, 0);
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

// AddScaledRows for X outputs at once (coefficient rows c_stride apart, outputs out_stride
// apart): each row of the matrix loads once for all X, each output keeps its order of sums and
// skips the rows whose own coefficient is zero.
template <int X>
HWY_INLINE void AddScaledBlock(const float* HWY_RESTRICT rows, int n_rows, const float* HWY_RESTRICT c, size_t c_stride,
                               int n, float* HWY_RESTRICT out, size_t out_stride) {
  const hn::ScalableTag<float> df;
  const int N = int(hn::Lanes(df));
  int j = 0;
  for (; j + 2 * N <= n; j += 2 * N) {
    hn::Vec<decltype(df)> a[X][2];
    for (int x = 0; x < X; ++x) {
      a[x][0] = hn::LoadU(df, out + x * out_stride + j);
      a[x][1] = hn::LoadU(df, out + x * out_stride + j + N);
    }
    for (int i = 0; i < n_rows; ++i) {
      const float* row = rows + static_cast<size_t>(i) * n + j;
      const auto r0 = hn::LoadU(df, row), r1 = hn::LoadU(df, row + N);
      for (int x = 0; x < X; ++x) {
        const float ci = c[x * c_stride + i];
        if (ci == 0.0f) continue;
        const auto cv = hn::Set(df, ci);
        a[x][0] = hn::Add(a[x][0], hn::Mul(cv, r0));
        a[x][1] = hn::Add(a[x][1], hn::Mul(cv, r1));
      }
    }
    for (int x = 0; x < X; ++x) {
      hn::StoreU(a[x][0], df, out + x * out_stride + j);
      hn::StoreU(a[x][1], df, out + x * out_stride + j + N);
    }
  }
  for (int x = 0; x < X; ++x) {
    const float* cx = c + x * c_stride;
    float* ox = out + x * out_stride;
    for (int jj = j; jj < n; ++jj) {
      float s = ox[jj];
      for (int i = 0; i < n_rows; ++i) {
        if (cx[i] != 0.0f) s += cx[i] * rows[static_cast<size_t>(i) * n + jj];
      }
      ox[jj] = s;
    }
  }
}

void AddScaledRowsMulti(const float* HWY_RESTRICT rows, int n_rows, const float* HWY_RESTRICT c, size_t c_stride,
                        int n_x, int n, float* HWY_RESTRICT out, size_t out_stride) {
  int x = 0;
  for (; x + 4 <= n_x; x += 4) AddScaledBlock<4>(rows, n_rows, c + x * c_stride, c_stride, n, out + x * out_stride, out_stride);
  for (; x < n_x; ++x) AddScaledRows(rows, n_rows, c + x * c_stride, n, out + x * out_stride);
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv::spectral
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq::kv::spectral {
HWY_EXPORT(Dot16Rows);
HWY_EXPORT(AddScaledRows);
HWY_EXPORT(Dot16RowsMulti);
HWY_EXPORT(AddScaledRowsMulti);

void dot16_rows_multi(const float* rows, int n_rows, const float* xs, size_t x_stride, int n_x, int n, float* out,
                      size_t out_stride) {
  HWY_DYNAMIC_DISPATCH(Dot16RowsMulti)(rows, n_rows, xs, x_stride, n_x, n, out, out_stride);
}

void add_scaled_rows_multi(const float* rows, int n_rows, const float* c, size_t c_stride, int n_x, int n, float* out,
                           size_t out_stride) {
  HWY_DYNAMIC_DISPATCH(AddScaledRowsMulti)(rows, n_rows, c, c_stride, n_x, n, out, out_stride);
}

void dot16_rows(const float* rows, int n_rows, const float* x, int n, float* out) {
  HWY_DYNAMIC_DISPATCH(Dot16Rows)(rows, n_rows, x, n, out);
}

void add_scaled_rows(const float* rows, int n_rows, const float* c, int n, float* out) {
  HWY_DYNAMIC_DISPATCH(AddScaledRows)(rows, n_rows, c, n, out);
}
}  // namespace vq::kv::spectral
#endif
