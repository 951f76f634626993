// Highway versions of the small float kernels in vector_ops.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/kernels/vector_ops.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/kv/kernels/vector_ops.h"

#include <cmath>

HWY_BEFORE_NAMESPACE();
namespace vq::kv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void DotRows(const float* HWY_RESTRICT q, int n_q, size_t q_stride, const float* HWY_RESTRICT x, int n,
             float* HWY_RESTRICT out, size_t out_stride) {
  const hn::ScalableTag<float> df;
  const int N = int(hn::Lanes(df));
  for (int r = 0; r < n_q; ++r) {
    const float* qr = q + size_t(r) * q_stride;
    auto a0 = hn::Zero(df), a1 = hn::Zero(df);
    int i = 0;
    for (; i + 2 * N <= n; i += 2 * N) {
      a0 = hn::MulAdd(hn::LoadU(df, qr + i), hn::LoadU(df, x + i), a0);
      a1 = hn::MulAdd(hn::LoadU(df, qr + i + N), hn::LoadU(df, x + i + N), a1);
    }
    for (; i + N <= n; i += N) a0 = hn::MulAdd(hn::LoadU(df, qr + i), hn::LoadU(df, x + i), a0);
    float s = hn::GetLane(hn::SumOfLanes(df, hn::Add(a0, a1)));
    for (; i < n; ++i) s += qr[i] * x[i];
    out[size_t(r) * out_stride] = s;
  }
}

void AffineU8(const uint8_t* HWY_RESTRICT codes, int n, float scale, float zero, float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint8_t, decltype(df)> d8;
  const hn::RebindToUnsigned<decltype(df)> du;
  const int N = int(hn::Lanes(df));
  const auto vs = hn::Set(df, scale), vz = hn::Set(df, zero);
  int i = 0;
  for (; i + N <= n; i += N) {
    const auto c = hn::ConvertTo(df, hn::BitCast(di, hn::PromoteTo(du, hn::LoadU(d8, codes + i))));
    hn::StoreU(hn::MulAdd(c, vs, vz), df, out + i);
  }
  for (; i < n; ++i) out[i] = std::fma(float(codes[i]), scale, zero);
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq::kv {
HWY_EXPORT(DotRows);
HWY_EXPORT(AffineU8);

void dot_rows(const float* q, int n_q, size_t q_stride, const float* x, int n, float* out, size_t out_stride) {
  HWY_DYNAMIC_DISPATCH(DotRows)(q, n_q, q_stride, x, n, out, out_stride);
}
void affine_u8(const uint8_t* codes, int n, float scale, float zero, float* out) {
  HWY_DYNAMIC_DISPATCH(AffineU8)(codes, n, scale, zero, out);
}
}  // namespace vq::kv
#endif
