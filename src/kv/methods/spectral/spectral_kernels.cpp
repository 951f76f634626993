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

// out[x][j] += c[x][i] * rows[i][j] for X outputs (coefficient rows c_stride apart, outputs
// out_stride apart) and channels [j0, j1), V vectors of channels at a time: each matrix row loads
// once for all X, X * V chains of adds overlap, and every output adds the rows in order, skipping
// those whose own coefficient is zero. Returns where it stopped (the last whole V vectors).
template <int X, int V>
HWY_INLINE int AddScaledBlock(const float* HWY_RESTRICT rows, int n_rows, const float* HWY_RESTRICT c, size_t c_stride,
                              int n, int j0, float* HWY_RESTRICT out, size_t out_stride) {
  const hn::ScalableTag<float> df;
  const int N = int(hn::Lanes(df));
  int j = j0;
  for (; j + V * N <= n; j += V * N) {
    hn::Vec<decltype(df)> a[X][V];
    for (int x = 0; x < X; ++x) {
      for (int v = 0; v < V; ++v) a[x][v] = hn::LoadU(df, out + x * out_stride + j + v * N);
    }
    for (int i = 0; i < n_rows; ++i) {
      const float* row = rows + static_cast<size_t>(i) * n + j;
      hn::Vec<decltype(df)> r[V];
      for (int v = 0; v < V; ++v) r[v] = hn::LoadU(df, row + v * N);
      for (int x = 0; x < X; ++x) {
        const float ci = c[x * c_stride + i];
        if (ci == 0.0f) continue;
        const auto cv = hn::Set(df, ci);
        for (int v = 0; v < V; ++v) a[x][v] = hn::Add(a[x][v], hn::Mul(cv, r[v]));
      }
    }
    for (int x = 0; x < X; ++x) {
      for (int v = 0; v < V; ++v) hn::StoreU(a[x][v], df, out + x * out_stride + j + v * N);
    }
  }
  return j;
}

// The channels past the whole vectors, one at a time, in the same order of sums.
HWY_INLINE void AddScaledTail(const float* HWY_RESTRICT rows, int n_rows, const float* HWY_RESTRICT c, int n, int j0,
                              float* HWY_RESTRICT out) {
  for (int j = j0; j < n; ++j) {
    float s = out[j];
    for (int i = 0; i < n_rows; ++i) {
      if (c[i] != 0.0f) s += c[i] * rows[static_cast<size_t>(i) * n + j];
    }
    out[j] = s;
  }
}

// One output: four vectors of channels at a time (four chains), then one, then the tail.
void AddScaledRows(const float* HWY_RESTRICT rows, int n_rows, const float* HWY_RESTRICT c, int n,
                   float* HWY_RESTRICT out) {
  int j = AddScaledBlock<1, 4>(rows, n_rows, c, 0, n, 0, out, 0);
  j = AddScaledBlock<1, 1>(rows, n_rows, c, 0, n, j, out, 0);
  AddScaledTail(rows, n_rows, c, n, j, out);
}

// Four outputs at a time with two vectors of channels each (eight chains), the rest one by one.
void AddScaledRowsMulti(const float* HWY_RESTRICT rows, int n_rows, const float* HWY_RESTRICT c, size_t c_stride,
                        int n_x, int n, float* HWY_RESTRICT out, size_t out_stride) {
  int x = 0;
  for (; x + 4 <= n_x; x += 4) {
    const float* cx = c + x * c_stride;
    float* ox = out + x * out_stride;
    int j = AddScaledBlock<4, 2>(rows, n_rows, cx, c_stride, n, 0, ox, out_stride);
    j = AddScaledBlock<4, 1>(rows, n_rows, cx, c_stride, n, j, ox, out_stride);
    for (int k = 0; k < 4; ++k) AddScaledTail(rows, n_rows, cx + k * c_stride, n, j, ox + k * out_stride);
  }
  for (; x < n_x; ++x) AddScaledRows(rows, n_rows, c + x * c_stride, n, out + x * out_stride);
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv::spectral
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq::kv::spectral {
HWY_EXPORT(Dot16Rows);
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
}  // namespace vq::kv::spectral
#endif
