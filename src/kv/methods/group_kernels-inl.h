// Fused attention kernels for the per-token grouped formats (q8, q4), written once over a
// per-format loader that turns a group's bytes into float vectors. Included per Highway target.
#if defined(VQ_KV_GROUP_KERNELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef VQ_KV_GROUP_KERNELS_INL_H_
#undef VQ_KV_GROUP_KERNELS_INL_H_
#else
#define VQ_KV_GROUP_KERNELS_INL_H_
#endif

#include <algorithm>

#include "hwy/highway.h"
#include "src/kv/methods/group_formats.h"

HWY_BEFORE_NAMESPACE();
namespace vq::kv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The group's fp16 scale broadcast to all lanes, converted by the hardware where it can.
template <class DF>
HWY_INLINE hn::Vec<DF> LoadScale(DF df, const uint8_t* HWY_RESTRICT gp) {
  const hn::CappedTag<float, 1> d1;
  const hn::Rebind<hwy::float16_t, decltype(d1)> dh1;
  const auto s = hn::PromoteTo(d1, hn::LoadU(dh1, reinterpret_cast<const hwy::float16_t*>(gp)));
  return hn::Set(df, hn::GetLane(s));
}

// Dequantized channels [16*half + k*N, ...) of a full group, N = Lanes(df) <= 16.
template <class DF>
HWY_INLINE hn::Vec<DF> LoadGroup(Q8Format, DF df, const uint8_t* HWY_RESTRICT gp, int first,
                                 hn::Vec<DF> vs) {
  const hn::RebindToSigned<DF> di32;
  const hn::Rebind<int8_t, DF> di8;
  const auto c = hn::PromoteTo(di32, hn::LoadU(di8, reinterpret_cast<const int8_t*>(gp + 2) + first));
  return hn::Mul(vs, hn::ConvertTo(df, c));
}

template <class DF>
HWY_INLINE hn::Vec<DF> LoadGroup(Q4Format, DF df, const uint8_t* HWY_RESTRICT gp, int first,
                                 hn::Vec<DF> vs) {
  const hn::RebindToSigned<DF> di32;
  const hn::RebindToUnsigned<DF> du32;
  const hn::Rebind<uint8_t, DF> du8;
  const auto x = hn::LoadU(du8, gp + 2 + (first & 15));
  const auto c = first < 16 ? hn::And(x, hn::Set(du8, 15)) : hn::ShiftRight<4>(x);
  const auto ci = hn::Sub(hn::BitCast(di32, hn::PromoteTo(du32, c)), hn::Set(di32, 8));
  return hn::Mul(hn::ConvertTo(df, ci), vs);
}

template <class Fmt, int kRows>
HWY_INLINE void GroupScoresRows(const float* HWY_RESTRICT q, size_t q_stride,
                                const uint8_t* HWY_RESTRICT tokens, size_t tok_bytes, int64_t n,
                                int d, float* HWY_RESTRICT out, size_t out_stride) {
  const hn::ScalableTag<float> df;
  const int N = int(hn::Lanes(df));
  const int full = (kQuantGroup % N == 0) ? d / kQuantGroup : 0;
  const size_t gb = Fmt::group_bytes(kQuantGroup);
  for (int64_t t = 0; t < n; ++t) {
    const uint8_t* tok = tokens + size_t(t) * tok_bytes;
    hn::Vec<decltype(df)> acc[kRows];
    for (int r = 0; r < kRows; ++r) acc[r] = hn::Zero(df);
    for (int g = 0; g < full; ++g) {
      const uint8_t* gp = tok + size_t(g) * gb;
      const auto vs = LoadScale(df, gp);
      for (int k = 0; k < kQuantGroup; k += N) {
        const auto v = LoadGroup(Fmt(), df, gp, k, vs);
        for (int r = 0; r < kRows; ++r) {
          acc[r] = hn::MulAdd(hn::LoadU(df, q + r * q_stride + g * kQuantGroup + k), v, acc[r]);
        }
      }
    }
    for (int r = 0; r < kRows; ++r) {
      float s = hn::GetLane(hn::SumOfLanes(df, acc[r]));
      for (int g = full; g * kQuantGroup < d; ++g) {
        const int gs = std::min(kQuantGroup, d - g * kQuantGroup);
        const uint8_t* gp = tok + size_t(g) * gb;
        for (int j = 0; j < gs; ++j) s += q[r * q_stride + g * kQuantGroup + j] * Fmt::value(gp, gs, j);
      }
      out[r * out_stride + t] = s;
    }
  }
}

template <class Fmt>
void GroupScores(const float* q, int n_q, size_t q_stride, const uint8_t* tokens, size_t tok_bytes,
                 int64_t n, int d, float* out, size_t out_stride) {
  int r = 0;
  for (; r + 4 <= n_q; r += 4) {
    GroupScoresRows<Fmt, 4>(q + r * q_stride, q_stride, tokens, tok_bytes, n, d, out + r * out_stride, out_stride);
  }
  for (; r < n_q; ++r) {
    GroupScoresRows<Fmt, 1>(q + r * q_stride, q_stride, tokens, tok_bytes, n, d, out + r * out_stride, out_stride);
  }
}

// acc rows += w * values; one 16-channel half-group of kRows accumulators stays in registers
// while the tokens stream past.
template <class Fmt, int kRows>
HWY_INLINE void GroupAccumulateRows(const float* HWY_RESTRICT w, size_t w_stride,
                                    const uint8_t* HWY_RESTRICT tokens, size_t tok_bytes,
                                    int64_t n, int d, float* HWY_RESTRICT acc, size_t acc_stride) {
  const hn::ScalableTag<float> df;
  const int N = int(hn::Lanes(df));
  const int full = (16 % N == 0) ? d / kQuantGroup : 0;
  const size_t gb = Fmt::group_bytes(kQuantGroup);
  constexpr int kMaxVecs = 16;  // 16 channels / lanes, at most 16 (scalar target)
  const int nv = 16 / N;
  for (int g = 0; g < full; ++g) {
    for (int half = 0; half < 2; ++half) {
      const int c0 = g * kQuantGroup + half * 16;
      hn::Vec<decltype(df)> a[kRows][kMaxVecs];
      for (int r = 0; r < kRows; ++r) {
        for (int k = 0; k < nv; ++k) a[r][k] = hn::LoadU(df, acc + r * acc_stride + c0 + k * N);
      }
      for (int64_t t = 0; t < n; ++t) {
        const uint8_t* gp = tokens + size_t(t) * tok_bytes + size_t(g) * gb;
        const auto vs = LoadScale(df, gp);
        for (int k = 0; k < nv; ++k) {
          const auto v = LoadGroup(Fmt(), df, gp, half * 16 + k * N, vs);
          for (int r = 0; r < kRows; ++r) {
            a[r][k] = hn::MulAdd(hn::Set(df, w[r * w_stride + t]), v, a[r][k]);
          }
        }
      }
      for (int r = 0; r < kRows; ++r) {
        for (int k = 0; k < nv; ++k) hn::StoreU(a[r][k], df, acc + r * acc_stride + c0 + k * N);
      }
    }
  }
  for (int g = full; g * kQuantGroup < d; ++g) {
    const int gs = std::min(kQuantGroup, d - g * kQuantGroup);
    for (int64_t t = 0; t < n; ++t) {
      const uint8_t* gp = tokens + size_t(t) * tok_bytes + size_t(g) * gb;
      for (int j = 0; j < gs; ++j) {
        const float v = Fmt::value(gp, gs, j);
        for (int r = 0; r < kRows; ++r) acc[r * acc_stride + g * kQuantGroup + j] += w[r * w_stride + t] * v;
      }
    }
  }
}

template <class Fmt>
void GroupAccumulate(const float* w, size_t w_stride, int n_q, const uint8_t* tokens,
                     size_t tok_bytes, int64_t n, int d, float* acc, size_t acc_stride) {
  int r = 0;
  for (; r + 4 <= n_q; r += 4) {
    GroupAccumulateRows<Fmt, 4>(w + r * w_stride, w_stride, tokens, tok_bytes, n, d, acc + r * acc_stride, acc_stride);
  }
  for (; r < n_q; ++r) {
    GroupAccumulateRows<Fmt, 1>(w + r * w_stride, w_stride, tokens, tok_bytes, n, d, acc + r * acc_stride, acc_stride);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#endif  // VQ_KV_GROUP_KERNELS_INL_H_
