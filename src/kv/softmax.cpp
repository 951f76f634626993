// Vectorized exp over a tile of scores, with the running max and sum of each row.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/softmax.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
#include "src/kv/softmax.h"

#include <cmath>
#include <limits>

HWY_BEFORE_NAMESPACE();
namespace vq::kv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void OnlineSoftmaxTile(float* HWY_RESTRICT s, size_t stride, int rows, int64_t n, float* HWY_RESTRICT m,
                       float* HWY_RESTRICT l, float* HWY_RESTRICT rescale) {
  const hn::ScalableTag<float> df;
  const int64_t N = int64_t(hn::Lanes(df));
  const float kNegInf = -std::numeric_limits<float>::infinity();
  for (int r = 0; r < rows; ++r) {
    float* row = s + size_t(r) * stride;
    float tile_max = kNegInf;
    int64_t t = 0;
    if (n >= N) {
      auto vmax = hn::Set(df, kNegInf);
      for (; t + N <= n; t += N) vmax = hn::Max(vmax, hn::LoadU(df, row + t));
      tile_max = hn::GetLane(hn::MaxOfLanes(df, vmax));
    }
    for (; t < n; ++t) tile_max = std::max(tile_max, row[t]);
    const float m_new = std::max(m[r], tile_max);
    if (m_new == kNegInf) {  // nothing visible yet
      for (t = 0; t < n; ++t) row[t] = 0.0f;
      rescale[r] = 1.0f;
      continue;
    }
    const float c = m[r] == kNegInf ? 0.0f : std::exp(m[r] - m_new);
    const auto vm = hn::Set(df, m_new);
    const auto neg_inf = hn::Set(df, kNegInf);
    auto vsum = hn::Zero(df);
    for (t = 0; t + N <= n; t += N) {
      const auto x = hn::LoadU(df, row + t);
      const auto e = hn::IfThenZeroElse(hn::Eq(x, neg_inf), hn::Exp(df, hn::Sub(x, vm)));
      hn::StoreU(e, df, row + t);
      vsum = hn::Add(vsum, e);
    }
    float sum = hn::GetLane(hn::SumOfLanes(df, vsum));
    for (; t < n; ++t) {
      const float e = row[t] == kNegInf ? 0.0f : std::exp(row[t] - m_new);
      row[t] = e;
      sum += e;
    }
    l[r] = l[r] * c + sum;
    m[r] = m_new;
    rescale[r] = c;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq::kv {
HWY_EXPORT(OnlineSoftmaxTile);

void online_softmax_tile(float* s, size_t stride, int rows, int64_t n, float* m, float* l,
                         float* rescale) {
  HWY_DYNAMIC_DISPATCH(OnlineSoftmaxTile)(s, stride, rows, n, m, l, rescale);
}
}  // namespace vq::kv
#endif
