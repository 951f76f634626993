// Highway versions of QJL's sketch projection and per-group query tables (qjl_lane_kernels.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/methods/qjl/qjl_lane_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "hwy/highway.h"
#include "src/kv/methods/qjl/qjl_lane_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace vq::kv::qjl {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DU = hn::RebindToUnsigned<DF>;

// tab[16 k + i] = sum over j < 4, in order, of w[4k + j] * (bit j of i ? c : -c): each product is
// +-(w c), so w is scaled by c once and each term's sign set by an exclusive or. Only exact IEEE
// products and sums in a fixed order, no fused multiply-add: every target gives the same bits.
void NibbleTables(const float* HWY_RESTRICT w, int n, float c, float* HWY_RESTRICT wc, float* HWY_RESTRICT tab) {
  const DF df;
  const DU du;
  const int N = int(hn::Lanes(df));
  const auto vc = hn::Set(df, c);
  for (int i = 0; i < n; i += N) hn::StoreU(hn::Mul(hn::LoadU(df, w + i), vc), df, wc + i);
  alignas(64) uint32_t neg[4][16];  // the sign bit where bit j of i is clear (level -c)
  for (int j = 0; j < 4; ++j) {
    for (int i = 0; i < 16; ++i) neg[j][i] = ((i >> j) & 1) ? 0u : 0x80000000u;
  }
  for (int h = 0; h < 16; h += N) {
    const auto s0 = hn::BitCast(df, hn::LoadU(du, neg[0] + h)), s1 = hn::BitCast(df, hn::LoadU(du, neg[1] + h));
    const auto s2 = hn::BitCast(df, hn::LoadU(du, neg[2] + h)), s3 = hn::BitCast(df, hn::LoadU(du, neg[3] + h));
    for (int k = 0; k < n / 4; ++k) {
      const float* x = wc + 4 * k;
      auto t = hn::Add(hn::Xor(hn::Set(df, x[0]), s0), hn::Xor(hn::Set(df, x[1]), s1));
      t = hn::Add(t, hn::Xor(hn::Set(df, x[2]), s2));
      t = hn::Add(t, hn::Xor(hn::Set(df, x[3]), s3));
      hn::StoreU(t, df, tab + 16 * size_t(k) + size_t(h));
    }
  }
}

void QueryTables(const float* HWY_RESTRICT w, int m, float c, float* HWY_RESTRICT tab, float* HWY_RESTRICT scratch) {
  NibbleTables(w, m, c, scratch, tab);
}

// w_out is summed over the columns in order with separate products and sums (the same bits on
// every target, as above).
void OutlierGroupTables(int m, int om, const float* const* cols, const float* HWY_RESTRICT coefs, int n_cols,
                        float c_in, float c_out, float* HWY_RESTRICT tab_corr, float* HWY_RESTRICT tab_out,
                        float* HWY_RESTRICT scratch) {
  const DF df;
  const int N = int(hn::Lanes(df));
  float* w_out = scratch;
  float* wc = scratch + m;
  for (int i = 0; i < m; i += N) {
    auto acc = hn::Zero(df);
    for (int k = 0; k < n_cols; ++k) acc = hn::Add(acc, hn::Mul(hn::Set(df, coefs[k]), hn::LoadU(df, cols[k] + i)));
    hn::StoreU(acc, df, w_out + i);
  }
  NibbleTables(w_out, om, c_out, wc, tab_out);
  if (om != m) NibbleTables(w_out, m, c_in, wc, tab_corr);
}

// kV vectors of rows [i, i + kV N) of S x_x for X vectors x (x_stride apart) into X outputs
// (out_stride apart), each summed over the channels in order, the channels with
// (mask[c] != 0) != in_mask skipped (none when mask is null): each column of S loads once for all X.
template <int kV, int X>
HWY_INLINE void ProjectRows(const float* HWY_RESTRICT st, int m, int d, const float* HWY_RESTRICT xs, size_t x_stride,
                            int i, float* HWY_RESTRICT out, size_t out_stride, const uint8_t* mask, bool in_mask) {
  const DF df;
  const int N = int(hn::Lanes(df));
  hn::Vec<DF> acc[X][kV];
  for (int x = 0; x < X; ++x) {
    for (int v = 0; v < kV; ++v) acc[x][v] = hn::Zero(df);
  }
  for (int c = 0; c < d; ++c) {
    if (mask && (mask[c] != 0) != in_mask) continue;
    const float* col = st + size_t(c) * size_t(m) + size_t(i);
    hn::Vec<DF> s[kV];
    for (int v = 0; v < kV; ++v) s[v] = hn::LoadU(df, col + v * N);
    for (int x = 0; x < X; ++x) {
      const auto xc = hn::Set(df, xs[size_t(x) * x_stride + size_t(c)]);
      for (int v = 0; v < kV; ++v) acc[x][v] = hn::Add(acc[x][v], hn::Mul(xc, s[v]));
    }
  }
  for (int x = 0; x < X; ++x) {
    for (int v = 0; v < kV; ++v) hn::StoreU(acc[x][v], df, out + size_t(x) * out_stride + i + v * N);
  }
}

// The first `rows` rows of S x_x for X vectors: kV vectors of rows at a time, then one, then the
// rows past the last whole vector one at a time; a product and a sum, each rounded (no fused
// multiply-add), so every target and the scalar tail give the same bits.
template <int kV, int X>
HWY_INLINE void ProjectBlock(const float* HWY_RESTRICT st, int m, int d, const float* HWY_RESTRICT xs, size_t x_stride,
                             int rows, float* HWY_RESTRICT out, size_t out_stride, const uint8_t* mask, bool in_mask) {
  const DF df;
  const int N = int(hn::Lanes(df));
  int i = 0;
  for (; i + kV * N <= rows; i += kV * N) ProjectRows<kV, X>(st, m, d, xs, x_stride, i, out, out_stride, mask, in_mask);
  for (; i + N <= rows; i += N) ProjectRows<1, X>(st, m, d, xs, x_stride, i, out, out_stride, mask, in_mask);
  for (int x = 0; x < X; ++x) {
    const float* xr = xs + size_t(x) * x_stride;
    for (int ii = i; ii < rows; ++ii) {
      float s = 0.0f;
      for (int c = 0; c < d; ++c) {
        if (mask && (mask[c] != 0) != in_mask) continue;
        s += xr[c] * st[size_t(c) * size_t(m) + size_t(ii)];
      }
      out[size_t(x) * out_stride + size_t(ii)] = s;
    }
  }
}

// out[i] = sum over the channels c, in order, of x[c] * st[c m + i]. Eight vectors of rows stay in
// registers over all channels.
void ProjectColumns(const float* HWY_RESTRICT st, int m, int d, const float* HWY_RESTRICT x, int rows,
                    float* HWY_RESTRICT out, const uint8_t* mask, bool in_mask) {
  ProjectBlock<8, 1>(st, m, d, x, 0, rows, out, 0, mask, in_mask);
}

// ProjectColumns (no mask) for n_x vectors: four per pass over S where 4 x 4 accumulators fit the
// registers, one elsewhere; each output with ProjectColumns' bits (the blocking of rows into
// vectors does not change a row's sum).
void ProjectColumnsRows(const float* HWY_RESTRICT st, int m, int d, const float* HWY_RESTRICT xs, size_t x_stride,
                        int n_x, int rows, float* HWY_RESTRICT out, size_t out_stride) {
  constexpr int kX = HWY_MAX_BYTES >= 64 ? 4 : 1;
  int x = 0;
  for (; x + kX <= n_x; x += kX) {
    ProjectBlock<4, kX>(st, m, d, xs + size_t(x) * x_stride, x_stride, rows, out + size_t(x) * out_stride, out_stride,
                        nullptr, false);
  }
  for (; x < n_x; ++x) {
    ProjectBlock<8, 1>(st, m, d, xs + size_t(x) * x_stride, x_stride, rows, out + size_t(x) * out_stride, out_stride,
                       nullptr, false);
  }
}

// out row r (out_stride apart) [c] += sum over i < m, in order from 0, of st[c m + i] * a_r[i]: the
// scalar order of each (r, c), with the rows in the vector lanes (a block of N rows transposed
// into aT first) and four channels at a time, so that the chains of sums run side by side.
void TransposedAdd(const float* HWY_RESTRICT st, int m, int d, const float* HWY_RESTRICT a, size_t a_stride, int n,
                   float* HWY_RESTRICT out, size_t out_stride) {
  const DF df;
  const int N = int(hn::Lanes(df));
  constexpr int kC = 4;
  // Scratch kept per thread: decode finalizes every step, and this would allocate each time.
  static thread_local std::vector<float> aT;
  aT.resize(size_t(m) * size_t(N));
  alignas(64) float sums[kC][hn::MaxLanes(df)];
  for (int r0 = 0; r0 < n; r0 += N) {
    const int nr = std::min(N, n - r0);
    for (int i = 0; i < m; ++i) {
      for (int l = 0; l < N; ++l) aT[size_t(i) * N + l] = l < nr ? a[size_t(r0 + l) * a_stride + size_t(i)] : 0.0f;
    }
    for (int c0 = 0; c0 < d; c0 += kC) {
      const int nc = std::min(kC, d - c0);
      hn::Vec<DF> acc[kC];
      for (int k = 0; k < kC; ++k) acc[k] = hn::Zero(df);
      const float* col[kC];
      for (int k = 0; k < kC; ++k) col[k] = st + size_t(std::min(c0 + k, d - 1)) * size_t(m);
      for (int i = 0; i < m; ++i) {
        const auto x = hn::LoadU(df, aT.data() + size_t(i) * N);
        for (int k = 0; k < kC; ++k) acc[k] = hn::Add(acc[k], hn::Mul(hn::Set(df, col[k][i]), x));
      }
      for (int k = 0; k < nc; ++k) {
        hn::Store(acc[k], df, sums[k]);
        for (int l = 0; l < nr; ++l) out[size_t(r0 + l) * out_stride + size_t(c0 + k)] += sums[k][l];
      }
    }
  }
}

// Tokens in the lanes, eight columns at a time (a short last pass repeats its first column and
// drops the sums): each channel's bit of the tokens' words becomes a sign bit, set where the bit
// is clear, that an exclusive or puts on the column's entry; only exact negations and sums in
// order, so every target gives the same bits.
void SignColumnSums(const uint8_t* HWY_RESTRICT words, int rows, const float* const* cols, int n_cols,
                    float* HWY_RESTRICT out) {
  const DF df;
  const DU du;
  const int N = int(hn::Lanes(df));
  constexpr int kCols = 8, kTokens = 16;
  for (int k0 = 0; k0 < n_cols; k0 += kCols) {
    const float* c[kCols];
    for (int k = 0; k < kCols; ++k) c[k] = cols[k0 + k < n_cols ? k0 + k : k0];
    for (int t0 = 0; t0 < kTokens; t0 += N) {
      hn::Vec<DF> acc[kCols];
      for (int k = 0; k < kCols; ++k) acc[k] = hn::Zero(df);
      for (int g = 0; g < rows / 32; ++g) {
        auto w = hn::LoadU(du, reinterpret_cast<const uint32_t*>(words) + size_t(g) * kTokens + size_t(t0));
        for (int b = 0; b < 32; ++b) {
          const auto neg = hn::BitCast(df, hn::ShiftLeft<31>(hn::Not(w)));
          w = hn::ShiftRight<1>(w);
          const int j = 32 * g + b;
          for (int k = 0; k < kCols; ++k) acc[k] = hn::Add(acc[k], hn::Xor(hn::Set(df, c[k][j]), neg));
        }
      }
      for (int k = 0; k < kCols && k0 + k < n_cols; ++k) {
        hn::StoreU(acc[k], df, out + size_t(k0 + k) * kTokens + size_t(t0));
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv::qjl
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq::kv::qjl {
HWY_EXPORT(QueryTables);
HWY_EXPORT(OutlierGroupTables);
HWY_EXPORT(ProjectColumns);
HWY_EXPORT(TransposedAdd);
HWY_EXPORT(ProjectColumnsRows);
HWY_EXPORT(SignColumnSums);

void sign_column_sums(const uint8_t* words, int rows, const float* const* cols, int n_cols, float* out) {
  HWY_DYNAMIC_DISPATCH(SignColumnSums)(words, rows, cols, n_cols, out);
}

void project_columns_rows(const float* st, int m, int d, const float* xs, size_t x_stride, int n_x, int rows,
                          float* out, size_t out_stride) {
  HWY_DYNAMIC_DISPATCH(ProjectColumnsRows)(st, m, d, xs, x_stride, n_x, rows, out, out_stride);
}

void transposed_add(const float* st, int m, int d, const float* a, size_t a_stride, int n, float* out,
                    size_t out_stride) {
  HWY_DYNAMIC_DISPATCH(TransposedAdd)(st, m, d, a, a_stride, n, out, out_stride);
}

void project_columns(const float* st, int m, int d, const float* x, int rows, float* out, const uint8_t* mask,
                     bool in_mask) {
  HWY_DYNAMIC_DISPATCH(ProjectColumns)(st, m, d, x, rows, out, mask, in_mask);
}

void query_tables(const float* w, int m, float c, float* tab, float* scratch) {
  HWY_DYNAMIC_DISPATCH(QueryTables)(w, m, c, tab, scratch);
}

void outlier_group_tables(int m, int om, const float* const* cols, const float* coefs, int n_cols, float c_in,
                          float c_out, float* tab_corr, float* tab_out, float* scratch) {
  HWY_DYNAMIC_DISPATCH(OutlierGroupTables)(m, om, cols, coefs, n_cols, c_in, c_out, tab_corr, tab_out, scratch);
}
}  // namespace vq::kv::qjl
#endif
