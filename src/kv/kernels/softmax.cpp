// Vectorized exp over a tile of scores, with the running max and sum of each row.
//
// The exponent here is never positive (scores minus their running max), so the exp is a short
// one: x clamped at -88 (where exp underflows; -inf and anything below give exactly 0), n =
// round(x / ln 2), r = x - n ln 2 in two steps (Cody-Waite), e^r by its degree-6 Taylor
// polynomial on |r| <= ln 2 / 2 (truncation below 1.2e-7), times 2^n built in the exponent bits.
// About 1 ulp, like Highway's general Exp, in 14 operations instead of about twice that: the
// softmax is a measurable part of decode attention over a compressed cache.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/kernels/softmax.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/kv/kernels/softmax.h"

#include <cmath>
#include <limits>

HWY_BEFORE_NAMESPACE();
namespace vq::kv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class DF>
HWY_INLINE hn::Vec<DF> ExpNonPositive(DF df, hn::Vec<DF> x) {
  const hn::RebindToSigned<DF> di;
  x = hn::Max(x, hn::Set(df, -88.0f));
  const auto n = hn::Round(hn::Mul(x, hn::Set(df, 1.44269504088896341f)));
  auto r = hn::NegMulAdd(n, hn::Set(df, 0.693145751953125f), x);  // ln 2, high 16 bits: n * it is exact
  r = hn::NegMulAdd(n, hn::Set(df, 1.42860682030941723e-6f), r);  // ln 2, the rest
  auto p = hn::Set(df, 1.0f / 720.0f);
  p = hn::MulAdd(p, r, hn::Set(df, 1.0f / 120.0f));
  p = hn::MulAdd(p, r, hn::Set(df, 1.0f / 24.0f));
  p = hn::MulAdd(p, r, hn::Set(df, 1.0f / 6.0f));
  p = hn::MulAdd(p, r, hn::Set(df, 0.5f));
  p = hn::MulAdd(p, r, hn::Set(df, 1.0f));
  p = hn::MulAdd(p, r, hn::Set(df, 1.0f));
  // 2^n for n in [-127, 0]: n = -127 gives the bits of +0, so the clamped tail is exactly 0.
  const auto two_n = hn::BitCast(df, hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127))));
  return hn::Mul(p, two_n);
}

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
    const float c = m[r] == kNegInf ? 1.0f : std::exp(m[r] - m_new);  // no state yet: l and the accumulators are 0
    const auto vm = hn::Set(df, m_new);
    auto vsum = hn::Zero(df);
    for (t = 0; t + N <= n; t += N) {
      const auto x = hn::LoadU(df, row + t);
      const auto e = ExpNonPositive(df, hn::Sub(x, vm));  // a masked score (-inf) gives 0
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
