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

void Fwht(float* HWY_RESTRICT x, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t h = 1;
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

}  // namespace HWY_NAMESPACE
}  // namespace vq
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq {
HWY_EXPORT(Fwht);

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
  const size_t n = signs_.size();
  for (size_t i = 0; i < n; ++i) x[i] *= signs_[i];
  fwht(x, n);
  for (size_t i = 0; i < n; ++i) x[i] *= norm_;
}

void RandomizedHadamard::inverse(float* x) const {
  const size_t n = signs_.size();
  fwht(x, n);
  for (size_t i = 0; i < n; ++i) x[i] *= norm_ * signs_[i];
}

}  // namespace vq
#endif
