// FWHT: butterflies with stride >= one vector run through Highway; the short strides are scalar.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/core/hadamard.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/core/hadamard.h"
#include "src/core/rng.h"
#include "veloxquant/error.h"

#include <cmath>

HWY_BEFORE_NAMESPACE();
namespace vq {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// kButterflySigns[16 s + j] = -1 where bit s of lane j is set: the lane holds b of its butterfly.
alignas(64) constexpr float kButterflySigns[64] = {
    1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1,
    1, 1, -1, -1, 1, 1, -1, -1, 1, 1, -1, -1, 1, 1, -1, -1,
    1, 1, 1, 1, -1, -1, -1, -1, 1, 1, 1, 1, -1, -1, -1, -1,
    1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1, -1};

// Butterflies of stride h inside each vector: the partner lane comes from a fixed shuffle, and
// a + b (lanes whose bit h is clear) or a - b (set; the lane holds b, the shuffle a) is one
// multiply-add of the lane by +-1 with its partner, rounded once as the scalar sum or difference.
template <class D>
HWY_INLINE hn::Vec<D> InVectorButterflies(D d, hn::Vec<D> v, const float* HWY_RESTRICT signs) {
#if HWY_TARGET == HWY_SCALAR
  (void)d;
  (void)signs;
#else
  constexpr size_t kMax = hn::MaxLanes(D());
  if constexpr (kMax >= 4) {
    v = hn::MulAdd(v, hn::LoadU(d, signs), hn::Shuffle2301(v));        // stride 1: lane j ^ 1
    v = hn::MulAdd(v, hn::LoadU(d, signs + 16), hn::Shuffle1032(v));   // stride 2: j ^ 2
  }
  if constexpr (kMax == 8) {
    v = hn::MulAdd(v, hn::LoadU(d, signs + 32), hn::ConcatLowerUpper(d, v, v));  // stride 4: halves swapped
  }
  if constexpr (kMax >= 16) {
    v = hn::MulAdd(v, hn::LoadU(d, signs + 32), hn::SwapAdjacentBlocks(v));      // stride 4: 128-bit blocks
    v = hn::MulAdd(v, hn::LoadU(d, signs + 48), hn::ConcatLowerUpper(d, v, v));  // stride 8: halves swapped
  }
#endif
  return v;
}

void Fwht(float* HWY_RESTRICT x, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t h = 1;
  // The strides below one vector, in registers, where a vector is 4, 8 or 16 floats.
  constexpr size_t kMax = hn::MaxLanes(decltype(d)());
  if ((kMax == 4 || kMax == 8 || kMax == 16) && N == kMax && n >= N) {
    for (size_t i = 0; i < n; i += N) hn::StoreU(InVectorButterflies(d, hn::LoadU(d, x + i), kButterflySigns), d, x + i);
    h = N;
  }
  for (; h < n && h < N; h *= 2) {
    for (size_t i = 0; i < n; i += 2 * h) {
      for (size_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
  for (; h < n; h *= 2) {
    for (size_t i = 0; i < n; i += 2 * h) {
      for (size_t j = i; j < i + h; j += N) {
        const auto a = hn::LoadU(d, x + j), b = hn::LoadU(d, x + j + h);
        hn::StoreU(hn::Add(a, b), d, x + j);
        hn::StoreU(hn::Sub(a, b), d, x + j + h);
      }
    }
  }
}

// The rotation in registers for n of kV vectors: x <- (pre ? x * pre : x), then the butterflies
// (stride 1 first, as Fwht), then x * norm * (post ? post : 1). The same operations in the same
// order as the plain passes, so the same bits.
template <int kV, class D>
HWY_INLINE void RotateInRegisters(D d, float* HWY_RESTRICT x, const float* HWY_RESTRICT pre,
                                  const float* HWY_RESTRICT post, float norm, const float* HWY_RESTRICT signs) {
  const size_t N = hn::Lanes(d);
  hn::Vec<D> v[kV];
  for (int i = 0; i < kV; ++i) {
    v[i] = hn::LoadU(d, x + i * N);
    if (pre) v[i] = hn::Mul(v[i], hn::LoadU(d, pre + i * N));
    v[i] = InVectorButterflies(d, v[i], signs);
  }
  for (int h = 1; h < kV; h *= 2) {
    for (int i = 0; i < kV; i += 2 * h) {
      for (int j = i; j < i + h; ++j) {
        const auto a = v[j], b = v[j + h];
        v[j] = hn::Add(a, b);
        v[j + h] = hn::Sub(a, b);
      }
    }
  }
  for (int i = 0; i < kV; ++i) {
    const auto m = post ? hn::Mul(hn::Set(d, norm), hn::LoadU(d, post + i * N)) : hn::Set(d, norm);
    hn::StoreU(hn::Mul(v[i], m), d, x + i * N);
  }
}

// x <- norm * post . H (pre . x) for the randomized rotation's two directions (pre or post may be
// null: no sign flips on that side). Up to 8 vectors stay in registers (short parts of a split
// head rotate once per group of tokens, so a pass over memory per stage cost more than the
// arithmetic); longer ones take the passes.
void RotateHadamard(float* HWY_RESTRICT x, size_t n, const float* HWY_RESTRICT pre, const float* HWY_RESTRICT post,
                    float norm) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  constexpr size_t kMax = hn::MaxLanes(decltype(d)());
  if ((kMax == 4 || kMax == 8 || kMax == 16) && N == kMax && n >= N && n <= 8 * N) {
    switch (n / N) {
      case 1: return RotateInRegisters<1>(d, x, pre, post, norm, kButterflySigns);
      case 2: return RotateInRegisters<2>(d, x, pre, post, norm, kButterflySigns);
      case 4: return RotateInRegisters<4>(d, x, pre, post, norm, kButterflySigns);
      default: return RotateInRegisters<8>(d, x, pre, post, norm, kButterflySigns);
    }
  }
  if (pre) {
    for (size_t i = 0; i < n; ++i) x[i] *= pre[i];
  }
  Fwht(x, n);
  for (size_t i = 0; i < n; ++i) x[i] *= post ? norm * post[i] : norm;
}

// RotateHadamard on `rows` vectors `stride` floats apart in one call: rows of a few vectors (the
// parts of a split head, rotated per group of tokens and query row) spend less on the call than
// on the arithmetic, and one row's butterflies overlap the next's. Each row's bits are
// RotateHadamard's.
void RotateHadamardRows(float* HWY_RESTRICT x, size_t n, size_t rows, size_t stride, const float* HWY_RESTRICT pre,
                        const float* HWY_RESTRICT post, float norm) {
  for (size_t r = 0; r < rows; ++r) RotateHadamard(x + r * stride, n, pre, post, norm);
}

}  // namespace HWY_NAMESPACE
}  // namespace vq
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq {
HWY_EXPORT(Fwht);
HWY_EXPORT(RotateHadamard);
HWY_EXPORT(RotateHadamardRows);

void fwht(float* x, size_t n) {
  VQ_CHECK(is_power_of_two(n), "fwht: length must be a power of two");
  HWY_DYNAMIC_DISPATCH(Fwht)(x, n);
}

RandomizedHadamard::RandomizedHadamard(size_t n, uint64_t seed)
    : signs_(n), norm_(1.0f / std::sqrt(float(n))) {
  VQ_CHECK(is_power_of_two(n), "Hadamard rotation needs a power-of-two dimension");
  Rng rng(seed);
  for (auto& s : signs_) s = (rng.next_u64() >> 63) ? -1.0f : 1.0f;
}

void RandomizedHadamard::forward(float* x) const {
  HWY_DYNAMIC_DISPATCH(RotateHadamard)(x, signs_.size(), signs_.data(), nullptr, norm_);
}

void RandomizedHadamard::inverse(float* x) const {
  HWY_DYNAMIC_DISPATCH(RotateHadamard)(x, signs_.size(), nullptr, signs_.data(), norm_);
}

void RandomizedHadamard::forward_rows(float* x, size_t rows, size_t stride) const {
  HWY_DYNAMIC_DISPATCH(RotateHadamardRows)(x, signs_.size(), rows, stride, signs_.data(), nullptr, norm_);
}

void RandomizedHadamard::inverse_rows(float* x, size_t rows, size_t stride) const {
  HWY_DYNAMIC_DISPATCH(RotateHadamardRows)(x, signs_.size(), rows, stride, nullptr, signs_.data(), norm_);
}

}  // namespace vq
#endif
