// Highway versions of the kernels in vq_kernels.h.
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

void LutGatherSum(const float* HWY_RESTRICT table, int k, const uint8_t* HWY_RESTRICT idx, size_t idx_stride,
                  int n_sub, int n, float* HWY_RESTRICT out) {
  const DF df;
  const DI di;
  const hn::Rebind<uint8_t, DI> d8;
  const int N = int(hn::Lanes(df));
  int t = 0;
  for (; t + N <= n; t += N) {
    auto acc = hn::LoadU(df, out + t);
    for (int s = 0; s < n_sub; ++s) {
      const auto i = hn::PromoteTo(di, hn::LoadU(d8, idx + size_t(s) * idx_stride + size_t(t)));
      acc = hn::Add(acc, hn::GatherIndex(df, table + size_t(s) * k, i));
    }
    hn::StoreU(acc, df, out + t);
  }
  for (; t < n; ++t) {
    float acc = out[t];
    for (int s = 0; s < n_sub; ++s) acc += table[size_t(s) * k + idx[size_t(s) * idx_stride + size_t(t)]];
    out[t] = acc;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq::kv {
HWY_EXPORT(NearestCentroid);
HWY_EXPORT(LutGatherSum);

int nearest_centroid(const float* centroids_t, const float* norms, int k, int sub, const float* x) {
  return HWY_DYNAMIC_DISPATCH(NearestCentroid)(centroids_t, norms, k, sub, x);
}
void lut_gather_sum(const float* table, int k, const uint8_t* idx, size_t idx_stride, int n_sub, int n, float* out) {
  HWY_DYNAMIC_DISPATCH(LutGatherSum)(table, k, idx, idx_stride, n_sub, n, out);
}
}  // namespace vq::kv
#endif
