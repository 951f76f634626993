// Kernels of product vector quantizers: the Highway nearest-centroid search, and the lookup-table sum.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/vq_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/kv/vq_kernels.h"

#include <limits>

HWY_BEFORE_NAMESPACE();
namespace vq::kv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;

int NearestCentroid(const float* HWY_RESTRICT ct, const float* HWY_RESTRICT norms, int k, int sub,
                    const float* HWY_RESTRICT x) {
  const DF df;
  const DI di;
  const int N = int(hn::Lanes(df));
  auto best = hn::Set(df, std::numeric_limits<float>::infinity());
  auto best_idx = hn::Zero(di);
  const auto lane = hn::Iota(di, 0);
  int c = 0;
  for (; c + N <= k; c += N) {
    auto dot = hn::Zero(df);
    for (int j = 0; j < sub; ++j) dot = hn::MulAdd(hn::Set(df, x[j]), hn::LoadU(df, ct + size_t(j) * k + c), dot);
    const auto dist = hn::NegMulAdd(hn::Set(df, 2.0f), dot, hn::LoadU(df, norms + c));
    const auto closer = hn::Lt(dist, best);  // strict: a lane keeps its first index on ties
    best = hn::IfThenElse(closer, dist, best);
    best_idx = hn::IfThenElse(hn::RebindMask(di, closer), hn::Add(lane, hn::Set(di, c)), best_idx);
  }
  HWY_ALIGN float bd[hn::MaxLanes(DF())];
  HWY_ALIGN int32_t bi[hn::MaxLanes(DI())];
  hn::Store(best, df, bd);
  hn::Store(best_idx, di, bi);
  float m = std::numeric_limits<float>::infinity();
  int idx = 0;
  for (int i = 0; i < N && c > 0; ++i) {
    if (bd[i] < m || (bd[i] == m && bi[i] < idx)) {
      m = bd[i];
      idx = bi[i];
    }
  }
  for (; c < k; ++c) {  // k not a multiple of the lanes (portable targets)
    float dot = 0;
    for (int j = 0; j < sub; ++j) dot += x[j] * ct[size_t(j) * k + c];
    const float dist = norms[c] - 2.0f * dot;
    if (dist < m) {
      m = dist;
      idx = c;
    }
  }
  return idx;
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq::kv {
HWY_EXPORT(NearestCentroid);
int nearest_centroid(const float* centroids_t, const float* norms, int k, int sub, const float* x) {
  return HWY_DYNAMIC_DISPATCH(NearestCentroid)(centroids_t, norms, k, sub, x);
}
// Scalar loads, eight tokens at a time in eight independent sums. The table of one query row
// (n_sub * k floats, 32 KB at d = 128 and 4-coordinate sub-vectors) is read at random, and on
// AMD Zen 3 eight scalar loads cost less than one AVX2 gather of eight lanes: codec_bench's
// scores/vecinfer took 0.32-0.40 ms with these loads against 0.48-0.50 ms with Highway's
// GatherIndex, interleaved in one session. Each sum adds its entries in the order s = 0, 1, ...,
// as the gather loop did, so the scores are the same bits.
void lut_gather_sum(const float* table, int k, const uint8_t* idx, size_t idx_stride, int n_sub, int n, float* out) {
  int t = 0;
  for (; t + 8 <= n; t += 8) {
    float a[8];
    for (int j = 0; j < 8; ++j) a[j] = out[t + j];
    for (int s = 0; s < n_sub; ++s) {
      const uint8_t* is = idx + size_t(s) * idx_stride + size_t(t);
      const float* ts = table + size_t(s) * size_t(k);
      for (int j = 0; j < 8; ++j) a[j] += ts[is[j]];
    }
    for (int j = 0; j < 8; ++j) out[t + j] = a[j];
  }
  for (; t < n; ++t) {
    float a = out[t];
    for (int s = 0; s < n_sub; ++s) a += table[size_t(s) * size_t(k) + idx[size_t(s) * idx_stride + size_t(t)]];
    out[t] = a;
  }
}
}  // namespace vq::kv
#endif
