// 16-bit float attention kernels. Scores: up to four query rows share each loaded key vector.
// Accumulation: a strip of output channels stays in registers while the tokens stream past.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/f16_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "src/core/fp16.h"
#include "src/kv/f16_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace vq::kv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <bool kBF16, class DF>
HWY_INLINE hn::Vec<DF> LoadHalf(DF df, const uint16_t* HWY_RESTRICT p) {
  if constexpr (kBF16) {
    const hn::RebindToUnsigned<DF> du32;
    const hn::Rebind<uint16_t, DF> du16;
    return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du32, hn::LoadU(du16, p))));
  } else {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
  }
}

// Streaming a cache from memory is latency bound unless enough lines are in flight: fetch the
// row kPrefetchTokens ahead (prefetching past the end of a run is harmless).
constexpr int64_t kPrefetchTokens = 32;
HWY_INLINE void PrefetchRow(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (size_t o = 0; o < bytes; o += 64) hwy::Prefetch(c + o);
}

template <bool kBF16>
HWY_INLINE float HalfScalar(uint16_t h) {
  return kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

template <bool kBF16, int kRows>
HWY_INLINE void ScoresRows(const float* HWY_RESTRICT q, size_t q_stride, const uint16_t* HWY_RESTRICT x,
                           size_t x_stride, int64_t n, int d, float* HWY_RESTRICT out,
                           size_t out_stride) {
  const hn::ScalableTag<float> df;
  const int N = int(hn::Lanes(df));
  const int dv = d / N * N;
  for (int64_t t = 0; t < n; ++t) {
    const uint16_t* xt = x + t * x_stride;
    PrefetchRow(xt + kPrefetchTokens * x_stride, size_t(d) * 2);
    hn::Vec<decltype(df)> acc[kRows];
    for (int r = 0; r < kRows; ++r) acc[r] = hn::Zero(df);
    for (int j = 0; j < dv; j += N) {
      const auto xv = LoadHalf<kBF16>(df, xt + j);
      for (int r = 0; r < kRows; ++r) acc[r] = hn::MulAdd(hn::LoadU(df, q + r * q_stride + j), xv, acc[r]);
    }
    for (int r = 0; r < kRows; ++r) {
      float s = hn::GetLane(hn::SumOfLanes(df, acc[r]));
      for (int j = dv; j < d; ++j) s += q[r * q_stride + j] * HalfScalar<kBF16>(xt[j]);
      out[r * out_stride + t] = s;
    }
  }
}

template <bool kBF16>
void Scores(const float* q, int n_q, size_t q_stride, const uint16_t* x, size_t x_stride,
            int64_t n, int d, float* out, size_t out_stride) {
  int r = 0;
  for (; r + 4 <= n_q; r += 4) {
    ScoresRows<kBF16, 4>(q + r * q_stride, q_stride, x, x_stride, n, d, out + r * out_stride, out_stride);
  }
  for (; r < n_q; ++r) {
    ScoresRows<kBF16, 1>(q + r * q_stride, q_stride, x, x_stride, n, d, out + r * out_stride, out_stride);
  }
}

// Two vectors of channels times kRows rows of accumulators live in registers.
template <bool kBF16, int kRows>
HWY_INLINE void AccumulateRows(const float* HWY_RESTRICT w, size_t w_stride, const uint16_t* HWY_RESTRICT x,
                               size_t x_stride, int64_t n, int d, float* HWY_RESTRICT acc,
                               size_t acc_stride) {
  const hn::ScalableTag<float> df;
  const int N = int(hn::Lanes(df));
  int j = 0;
  for (; j + 2 * N <= d; j += 2 * N) {
    hn::Vec<decltype(df)> a0[kRows], a1[kRows];
    for (int r = 0; r < kRows; ++r) {
      a0[r] = hn::LoadU(df, acc + r * acc_stride + j);
      a1[r] = hn::LoadU(df, acc + r * acc_stride + j + N);
    }
    for (int64_t t = 0; t < n; ++t) {
      if (j == 0) PrefetchRow(x + (t + kPrefetchTokens) * x_stride, size_t(d) * 2);
      const auto x0 = LoadHalf<kBF16>(df, x + t * x_stride + j);
      const auto x1 = LoadHalf<kBF16>(df, x + t * x_stride + j + N);
      for (int r = 0; r < kRows; ++r) {
        const auto wv = hn::Set(df, w[r * w_stride + t]);
        a0[r] = hn::MulAdd(wv, x0, a0[r]);
        a1[r] = hn::MulAdd(wv, x1, a1[r]);
      }
    }
    for (int r = 0; r < kRows; ++r) {
      hn::StoreU(a0[r], df, acc + r * acc_stride + j);
      hn::StoreU(a1[r], df, acc + r * acc_stride + j + N);
    }
  }
  for (; j < d; ++j) {
    for (int r = 0; r < kRows; ++r) {
      float s = acc[r * acc_stride + j];
      for (int64_t t = 0; t < n; ++t) s += w[r * w_stride + t] * HalfScalar<kBF16>(x[t * x_stride + j]);
      acc[r * acc_stride + j] = s;
    }
  }
}

template <bool kBF16>
void Accumulate(const float* w, size_t w_stride, int n_q, const uint16_t* x, size_t x_stride,
                int64_t n, int d, float* acc, size_t acc_stride) {
  int r = 0;
  for (; r + 4 <= n_q; r += 4) {
    AccumulateRows<kBF16, 4>(w + r * w_stride, w_stride, x, x_stride, n, d, acc + r * acc_stride, acc_stride);
  }
  for (; r < n_q; ++r) {
    AccumulateRows<kBF16, 1>(w + r * w_stride, w_stride, x, x_stride, n, d, acc + r * acc_stride, acc_stride);
  }
}

void HalfScores(bool bf16, const float* q, int n_q, size_t q_stride, const uint16_t* x,
                size_t x_stride, int64_t n, int d, float* out, size_t out_stride) {
  if (bf16) {
    Scores<true>(q, n_q, q_stride, x, x_stride, n, d, out, out_stride);
  } else {
    Scores<false>(q, n_q, q_stride, x, x_stride, n, d, out, out_stride);
  }
}

void HalfAccumulate(bool bf16, const float* w, size_t w_stride, int n_q, const uint16_t* x,
                    size_t x_stride, int64_t n, int d, float* acc, size_t acc_stride) {
  if (bf16) {
    Accumulate<true>(w, w_stride, n_q, x, x_stride, n, d, acc, acc_stride);
  } else {
    Accumulate<false>(w, w_stride, n_q, x, x_stride, n, d, acc, acc_stride);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq::kv {
HWY_EXPORT(HalfScores);
HWY_EXPORT(HalfAccumulate);

void half_scores(HalfKind kind, const float* q, int n_q, size_t q_stride, const uint16_t* x,
                 size_t x_stride, int64_t n, int d, float* out, size_t out_stride) {
  HWY_DYNAMIC_DISPATCH(HalfScores)(kind == HalfKind::kBF16, q, n_q, q_stride, x, x_stride, n, d, out, out_stride);
}

void half_accumulate(HalfKind kind, const float* w, size_t w_stride, int n_q, const uint16_t* x,
                     size_t x_stride, int64_t n, int d, float* acc, size_t acc_stride) {
  HWY_DYNAMIC_DISPATCH(HalfAccumulate)(kind == HalfKind::kBF16, w, w_stride, n_q, x, x_stride, n, d, acc, acc_stride);
}
}  // namespace vq::kv
#endif
