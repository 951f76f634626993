// Kernels of product vector quantizers, value side: lut_centroid_accumulate (codebook_kernels.h),
// which adds the attention weights of a run of tokens into per-centroid sums and folds them
// through the codebook, instead of decoding each token's value.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL  // the same targets as the key side's kernels
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/kernels/centroid_accumulate_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "src/kv/kernels/codebook_kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

HWY_BEFORE_NAMESPACE();
namespace vq::kv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;

// One block's tokens [slot, slot + m) of a group of G sub-vectors (G = 4 or 8) into their
// [centroid][row] tables, which lie kTableBytes apart from `base`: the block's index bytes first
// become byte offsets of their sums, made with vectors, so a step needs no shift to address a sum
// (and one base address keeps each table's distance a constant in the instruction's addressing:
// with a base register per table the compiler spilled them and reloaded one per step).
template <int G, size_t kTableBytes>
HWY_INLINE void ScatterBlockWeights(char* HWY_RESTRICT base, const uint8_t* HWY_RESTRICT block_idx, int slot, int m,
                                    const float* HWY_RESTRICT wk, uint16_t* HWY_RESTRICT off) {
  constexpr int B = kLutBlockTokens, kRows = 4;
  const hn::CappedTag<float, kRows> d4;  // four lanes wherever this is called (N4 == kRows)
  const hn::ScalableTag<uint16_t> d16;
  const hn::Rebind<uint8_t, decltype(d16)> d8;
  const int N16 = int(hn::Lanes(d16));
  for (int j = 0; j < G * B; j += N16) {
    hn::Store(hn::ShiftLeft<4>(hn::PromoteTo(d16, hn::LoadU(d8, block_idx + j))), d16, off + j);
  }
  const uint16_t* o = off + slot;
  for (int k = 0; k < m; ++k) {
    const auto wv = hn::Load(d4, wk + size_t(k) * kRows);
    float* p[G];
    hn::Vec<decltype(d4)> sum[G];
    // All loads before any store: no load waits behind another table's store.
    for (int u = 0; u < G; ++u) p[u] = reinterpret_cast<float*>(base + u * kTableBytes + o[k + u * B]);
    for (int u = 0; u < G; ++u) sum[u] = hn::Add(hn::Load(d4, p[u]), wv);
    for (int u = 0; u < G; ++u) hn::Store(sum[u], d4, p[u]);
  }
}

// a * b + c rounded once on every target: the targets without a fused multiply-add (the portable
// ones) take std::fma lane by lane, so all give the same bits.
template <class D>
HWY_INLINE hn::Vec<D> FusedMulAdd(D d, hn::Vec<D> a, hn::Vec<D> b, hn::Vec<D> c) {
#if HWY_NATIVE_FMA
  (void)d;
  return hn::MulAdd(a, b, c);
#else
  HWY_ALIGN float x[hn::MaxLanes(d)], y[hn::MaxLanes(d)], z[hn::MaxLanes(d)];
  hn::Store(a, d, x);
  hn::Store(b, d, y);
  hn::Store(c, d, z);
  for (size_t i = 0; i < hn::Lanes(d); ++i) z[i] = std::fma(x[i], y[i], z[i]);
  return hn::Load(d, z);
#endif
}

// Columns [j0, j0 + kCols) of one sub-vector of `sub` coordinates, for up to four rows whose
// centroid weights are a[r][c * kStep] (kStep = 4: a [centroid][row] table of sums):
// out[r * out_stride + j] += the sum over c of a[r][c * kStep] * cb[c * sub + j], as two partial
// sums, even and odd c, each in c order by fused multiply-adds, then even + odd. Each lane computes
// its column's sums in that order, so the lane count does not change the bits. Fused, the product
// takes half the operations of a multiply and an add (docs/performance.md, VecInfer).
template <int kCols, int kStep>
void FoldColumns(const float* const* HWY_RESTRICT a, int nr, const float* HWY_RESTRICT cb, int sub,
                 float* HWY_RESTRICT out, size_t out_stride) {
  constexpr int kRows = 4;
  const hn::CappedTag<float, kCols> dc;
  const int L = int(hn::Lanes(dc));
  for (int j0 = 0; j0 < kCols; j0 += L) {
    hn::Vec<decltype(dc)> even[kRows], odd[kRows];
    for (int r = 0; r < kRows; ++r) even[r] = odd[r] = hn::Zero(dc);
    for (int c = 0; c < kLutCentroids; c += 2) {
      const auto c0 = hn::LoadU(dc, cb + size_t(c) * sub + j0), c1 = hn::LoadU(dc, cb + size_t(c + 1) * sub + j0);
      for (int r = 0; r < kRows; ++r) {
        even[r] = FusedMulAdd(dc, hn::Set(dc, a[r][c * kStep]), c0, even[r]);
        odd[r] = FusedMulAdd(dc, hn::Set(dc, a[r][(c + 1) * kStep]), c1, odd[r]);
      }
    }
    for (int r = 0; r < nr; ++r) {
      float* o = out + size_t(r) * out_stride + j0;
      hn::StoreU(hn::Add(hn::LoadU(dc, o), hn::Add(even[r], odd[r])), dc, o);
    }
  }
}

// One sub-vector's [centroid][row] table of sums folded through its codebook cb ([c][sub]) into
// nr <= 4 rows of out (out_stride apart).
void FoldSums(const float* HWY_RESTRICT sums, int nr, const float* HWY_RESTRICT cb, int sub, float* HWY_RESTRICT out,
              size_t out_stride) {
  const float* a[4] = {sums, sums + 1, sums + 2, sums + 3};
  int j = 0;
  for (; j + 16 <= sub; j += 16) FoldColumns<16, 4>(a, nr, cb + j, sub, out + j, out_stride);
  for (; j + 8 <= sub; j += 8) FoldColumns<8, 4>(a, nr, cb + j, sub, out + j, out_stride);
  for (; j + 4 <= sub; j += 4) FoldColumns<4, 4>(a, nr, cb + j, sub, out + j, out_stride);
  for (; j < sub; ++j) FoldColumns<1, 4>(a, nr, cb + j, sub, out + j, out_stride);
}

// kRows rows' accumulators for kVecs vectors of channels from c0 held in registers over the nt
// decoded tokens of a tile (d floats apart): a = a + w * x token by token, multiply and add
// rounded apart, so each sum runs in token order as one scalar chain would.
template <int kRows, int kVecs>
HWY_INLINE void GatherStrip(const float* HWY_RESTRICT w, size_t w_stride, const float* HWY_RESTRICT tile, int nt,
                            size_t ts, int c0, float* HWY_RESTRICT acc, size_t acc_stride) {
  const DF df;
  const int N = int(hn::Lanes(df));
  hn::Vec<DF> a[kRows][kVecs];
  for (int r = 0; r < kRows; ++r) {
    for (int k = 0; k < kVecs; ++k) a[r][k] = hn::LoadU(df, acc + size_t(r) * acc_stride + c0 + k * N);
  }
  for (int t = 0; t < nt; ++t) {
    hn::Vec<DF> x[kVecs];
    for (int k = 0; k < kVecs; ++k) x[k] = hn::LoadU(df, tile + size_t(t) * ts + c0 + k * N);
    for (int r = 0; r < kRows; ++r) {
      const auto wv = hn::Set(df, w[size_t(r) * w_stride + size_t(t)]);
      for (int k = 0; k < kVecs; ++k) a[r][k] = hn::Add(a[r][k], hn::Mul(wv, x[k]));
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int k = 0; k < kVecs; ++k) hn::StoreU(a[r][k], df, acc + size_t(r) * acc_stride + c0 + k * N);
  }
}

template <int kRows>
HWY_INLINE void GatherRows(const float* HWY_RESTRICT w, size_t w_stride, const float* HWY_RESTRICT tile, int nt,
                           size_t ts, int d, float* HWY_RESTRICT acc, size_t acc_stride) {
  const DF df;
  const int N = int(hn::Lanes(df));
  int c = 0;
  for (; c + 4 * N <= d; c += 4 * N) GatherStrip<kRows, 4>(w, w_stride, tile, nt, ts, c, acc, acc_stride);
  for (; c + N <= d; c += N) GatherStrip<kRows, 1>(w, w_stride, tile, nt, ts, c, acc, acc_stride);
  for (; c < d; ++c) {
    for (int r = 0; r < kRows; ++r) {
      float& a = acc[size_t(r) * acc_stride + size_t(c)];
      for (int t = 0; t < nt; ++t) a = a + w[size_t(r) * w_stride + size_t(t)] * tile[size_t(t) * ts + size_t(c)];
    }
  }
}

// Short runs (prefill tiles): the run's values decoded a few tokens at a time into a tile, then
// added to each query row times its weight with four rows and four vectors of channels in
// registers. Every sum takes its tokens in order, multiplies and adds kept apart.
void GatherAccumulate(const float* HWY_RESTRICT w, size_t w_stride, int n_q, int n_sub, int sub,
                      const float* HWY_RESTRICT codebook, const uint8_t* HWY_RESTRICT blocks, size_t bb, int64_t i0,
                      int64_t i1, float* HWY_RESTRICT acc, size_t acc_stride) {
  constexpr int B = kLutBlockTokens;
  const int d = n_sub * sub;
  // Tokens per tile: 16, fewer for large d, so that the tile (at most 64 KB) stays near the core.
  const int kT = std::max(1, std::min(16, 16384 / d));
  static thread_local std::vector<float> tile_buf;
  tile_buf.resize(size_t(kT) * size_t(d));
  float* const tile = tile_buf.data();
  for (int64_t t0 = i0; t0 < i1; t0 += kT) {
    const int nt = int(std::min<int64_t>(kT, i1 - t0));
    for (int t = 0; t < nt; ++t) {
      const int64_t i = t0 + t;
      const uint8_t* idx = blocks + size_t(i / B) * bb + size_t(i % B);
      float* v = tile + size_t(t) * d;
      for (int s = 0; s < n_sub; ++s) {
        std::copy_n(codebook + (size_t(s) * kLutCentroids + idx[size_t(s) * B]) * size_t(sub), sub, v + size_t(s) * sub);
      }
    }
    const float* wt = w + size_t(t0 - i0);
    int r = 0;
    for (; r + 4 <= n_q; r += 4) {
      GatherRows<4>(wt + size_t(r) * w_stride, w_stride, tile, nt, size_t(d), d, acc + size_t(r) * acc_stride, acc_stride);
    }
    for (; r < n_q; ++r) {
      GatherRows<1>(wt + size_t(r) * w_stride, w_stride, tile, nt, size_t(d), d, acc + size_t(r) * acc_stride, acc_stride);
    }
  }
}

// See lut_centroid_accumulate in codebook_kernels.h. Long runs: four rows at a time (missing rows weigh 0),
// kLutWeightRun tokens at a time, eight sub-vectors at a time: a token's four-row weight vector is
// loaded once and added to its eight sub-vectors' [centroid][row] sums, eight independent
// load-add-store steps (their tables differ, so none waits on another's store). Eight tables
// (32 KB) still leave L1 room for the weights and indices streaming past, and halve the passes
// over the run's weights against four (docs/cache.md has the measurement).
// Each sum adds its tokens in order, on every target; after each pass the group's tables are
// folded through their codebooks into the rows (FoldSums).
void LutCentroidAccumulate(const float* HWY_RESTRICT w, size_t w_stride, int n_q, int n_sub, int sub,
                           const float* HWY_RESTRICT codebook, const uint8_t* HWY_RESTRICT blocks, size_t bb,
                           int64_t i0, int64_t i1, float* HWY_RESTRICT acc, size_t acc_stride) {
  if (i1 - i0 < kLutSumsMinTokens) {
    GatherAccumulate(w, w_stride, n_q, n_sub, sub, codebook, blocks, bb, i0, i1, acc, acc_stride);
    return;
  }
  constexpr int B = kLutBlockTokens, kRows = 4, kChunk = kLutWeightRun, kGroup = 8;
  const hn::CappedTag<float, kRows> d4;  // the four rows of a sum (one lane at a time on HWY_SCALAR)
  const int N4 = int(hn::Lanes(d4));
  const DF df;
  const int N = int(hn::Lanes(df));
  HWY_ALIGN float sums[kGroup][kLutCentroids * kRows];  // [sub-vector of the group][centroid][row]
  HWY_ALIGN float wt[kChunk * kRows];                   // [token][row]
  static_assert(kLutCentroids * kRows * sizeof(float) <= 65536, "byte offsets of a sum fit 16 bits");
  static_assert(kRows * sizeof(float) == 16, "a centroid's byte offset is its index shifted left by 4");
  HWY_ALIGN uint16_t off[kGroup * B];  // [sub-vector of the group][slot]: byte offset in its sums
  char* const base = reinterpret_cast<char*>(&sums[0][0]);
  constexpr size_t kTableBytes = sizeof(sums[0]);
  for (int r0 = 0; r0 < n_q; r0 += kRows) {
    const int nr = std::min(kRows, n_q - r0);
    for (int64_t c0 = i0; c0 < i1; c0 += kChunk) {
      const int n = int(std::min<int64_t>(kChunk, i1 - c0));
      const float* wr[kRows];
      for (int r = 0; r < nr; ++r) wr[r] = w + size_t(r0 + r) * w_stride + size_t(c0 - i0);
      int t0 = 0;
      if (nr == kRows) {  // [row][token] to [token][row], N tokens at a time
        for (; t0 + N <= n; t0 += N) {
          hn::StoreInterleaved4(hn::LoadU(df, wr[0] + t0), hn::LoadU(df, wr[1] + t0), hn::LoadU(df, wr[2] + t0),
                                hn::LoadU(df, wr[3] + t0), df, wt + size_t(t0) * kRows);
        }
      }
      for (int t = t0; t < n; ++t) {
        for (int r = 0; r < kRows; ++r) wt[t * kRows + r] = r < nr ? wr[r][t] : 0.0f;
      }
      for (int s0 = 0, g = 0; s0 < n_sub; s0 += g) {
        g = n_sub - s0 >= kGroup ? kGroup : std::min(4, n_sub - s0);  // 8, then 4, then what is left
        std::fill_n(&sums[0][0], size_t(g) * kLutCentroids * kRows, 0.0f);
        for (int t = 0; t < n;) {
          const int64_t i = c0 + t, blk = i / B, slot = i % B;
          const int m = int(std::min<int64_t>(n - t, B - slot));
          const uint8_t* block_idx = blocks + size_t(blk) * bb + size_t(s0) * B;  // the group's first sub-vector
          const uint8_t* idx = block_idx + slot;
          const float* wk = wt + size_t(t) * kRows;
          if (s0 == 0) {  // the first pass asks for the block after next, all of it: later passes find it in L2
            const uint8_t* ahead = blocks + size_t(blk + 2) * bb;
            for (size_t o = 0; o < bb; o += 64) hwy::Prefetch(ahead + o);
          }
          if (g == kGroup && N4 == kRows) {
            ScatterBlockWeights<kGroup, kTableBytes>(base, block_idx, int(slot), m, wk, off);
          } else if (g == 4 && N4 == kRows) {
            ScatterBlockWeights<4, kTableBytes>(base, block_idx, int(slot), m, wk, off);
          } else {
            for (int k = 0; k < m; ++k) {
              for (int u = 0; u < g; ++u) {
                float* p = sums[u] + size_t(idx[k + u * B]) * kRows;
                const float* q = wk + size_t(k) * kRows;
                for (int j = 0; j < kRows; j += N4) hn::Store(hn::Add(hn::Load(d4, p + j), hn::Load(d4, q + j)), d4, p + j);
              }
            }
          }
          t += m;
        }
        for (int u = 0; u < g; ++u) {
          const int sv = s0 + u;
          FoldSums(sums[u], nr, codebook + size_t(sv) * kLutCentroids * size_t(sub), sub,
                   acc + size_t(r0) * acc_stride + size_t(sv) * size_t(sub), acc_stride);
        }
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq::kv {
HWY_EXPORT(LutCentroidAccumulate);
void lut_centroid_accumulate(const float* w, size_t w_stride, int n_q, int n_sub, int sub, const float* codebook,
                             const uint8_t* blocks, size_t block_bytes, int64_t i0, int64_t i1, float* acc,
                             size_t acc_stride) {
  HWY_DYNAMIC_DISPATCH(LutCentroidAccumulate)(w, w_stride, n_q, n_sub, sub, codebook, blocks, block_bytes, i0, i1, acc,
                                              acc_stride);
}
}  // namespace vq::kv
#endif
