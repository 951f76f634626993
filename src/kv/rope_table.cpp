#include "src/kv/rope_table.h"

#include <fmt/format.h>

#include <atomic>
#include <cmath>

#include "src/kv/kernels/lut_kernels.h"
#include "veloxquant/error.h"

namespace vq::kv {

namespace {
constexpr int kLow = RopeTable::kSegment;
uint64_t next_serial() {
  static std::atomic<uint64_t> n{0};
  return ++n;
}
}  // namespace

RopeTable::RopeTable(int head_dim, RopeSpec spec)
    : d_(head_dim), half_(head_dim / 2), spec_(spec), serial_(next_serial()) {
  if (identity()) return;
  VQ_CHECK(head_dim >= 2 && head_dim % 2 == 0, fmt::format("RoPE needs an even head size, not {}", head_dim));
  VQ_CHECK(std::isfinite(spec.base) && spec.base > 1.0f && std::isfinite(spec.freq_scale) && spec.freq_scale > 0.0f,
           "RoPE base must be > 1 and its frequency scale > 0");
  VQ_CHECK(spec.freq_factors.empty() || spec.freq_factors.size() == size_t(half_),
           fmt::format("RoPE: {} frequency factors for a head of {}", spec.freq_factors.size(), head_dim));
  theta_.resize(size_t(half_));
  for (int i = 0; i < half_; ++i) {
    theta_[size_t(i)] = double(spec.freq_scale) * std::pow(double(spec.base), -2.0 * i / head_dim);
    if (!spec.freq_factors.empty()) theta_[size_t(i)] /= double(spec.freq_factors[size_t(i)]);
  }
  low_.resize(size_t(kLow) * 2 * half_);
  for (int b = 0; b < kLow; ++b) {
    for (int i = 0; i < half_; ++i) {
      low_[size_t(b) * 2 * half_ + i] = float(std::cos(b * theta_[size_t(i)]));
      low_[size_t(b) * 2 * half_ + half_ + i] = float(std::sin(b * theta_[size_t(i)]));
    }
  }
}

const float* RopeTable::segment(int64_t a) const {
  VQ_CHECK(a >= 0 && a < (int64_t(1) << 32) / kLow, "RoPE: position out of range");
  std::lock_guard<std::mutex> lock(mu_);
  if (size_t(a) >= segments_.size()) segments_.resize(size_t(a) + 1);
  auto& seg = segments_[size_t(a)];
  if (!seg) {
    seg.reset(new float[size_t(2 * half_)]);
    for (int i = 0; i < half_; ++i) {
      // fmod keeps the argument small, so cos and sin stay exact for large positions.
      const double angle = std::fmod(double(a) * kLow * theta_[size_t(i)], 2.0 * M_PI);
      seg[size_t(i)] = float(std::cos(angle));
      seg[size_t(half_ + i)] = float(std::sin(angle));
    }
    ++n_segments_;
  }
  return seg.get();
}

size_t RopeTable::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return (low_.size() + n_segments_ * 2 * size_t(half_)) * sizeof(float) + segments_.capacity() * sizeof(void*);
}

void RopeTable::angles(int64_t pos, float* cs, float* sn) const {
  VQ_CHECK(pos >= 0, "RoPE: negative position");
  // Runs of positions share a segment: remember the last one per thread (tables are told
  // apart by a serial number, never by address, which a later table may reuse).
  thread_local uint64_t last_table = 0;
  thread_local int64_t last_a = -1;
  thread_local const float* seg = nullptr;
  const int64_t a = pos / kLow;
  if (last_table != serial_ || last_a != a) {
    seg = segment(a);
    last_table = serial_;
    last_a = a;
  }
  const float* hi = seg;
  const float* lo = low(int(pos % kLow));
  compose_angles(hi, hi + half_, lo, lo + half_, half_, cs, sn);
}

void RopeTable::rotate(float* x, int64_t pos, bool inverse) const {
  if (identity()) return;
  float cs[2048], sn[2048];
  VQ_CHECK(half_ <= 2048, "RoPE: head size above 4096");
  angles(pos, cs, sn);
  rotate_by(x, cs, sn, inverse);
}

void RopeTable::rotate_by(float* x, const float* cs, const float* sn, bool inverse) const {
  if (identity()) return;
  if (spec_.style == RopeSpec::Style::kNeox) {
    rotate_pairs(x, x + half_, half_, cs, sn, inverse ? -1.0f : 1.0f);
    return;
  }
  for (int i = 0; i < half_; ++i) {
    const int a = first(i), b = second(i);
    const float s = (inverse ? -1.0f : 1.0f) * sn[i];
    const float x0 = x[a], x1 = x[b];
    x[a] = x0 * cs[i] - x1 * s;
    x[b] = x0 * s + x1 * cs[i];
  }
}

void RopeTable::angle_columns(int cols, float* cos_t, float* sin_t) const {
  for (int i = 0; i < half_; ++i) {
    for (int b = 0; b < cols; ++b) {
      cos_t[size_t(i) * cols + b] = identity() ? 1.0f : float(std::cos(b * theta_[size_t(i)]));
      sin_t[size_t(i) * cols + b] = identity() ? 0.0f : float(std::sin(b * theta_[size_t(i)]));
    }
  }
}

void RopeTable::rotate_low_rows(float* x, size_t stride, int n, int b0, bool inverse) const {
  if (identity()) return;
  VQ_CHECK(b0 >= 0 && n >= 0 && b0 + n <= kSegment, "RoPE: rows beyond the low table");
  if (spec_.style == RopeSpec::Style::kNeox) {
    rotate_halves_rows(x, stride, n, half_, low(b0), size_t(2) * half_, inverse ? -1.0f : 1.0f);
    return;
  }
  for (int r = 0; r < n; ++r) rotate_by(x + size_t(r) * stride, low(b0 + r), low(b0 + r) + half_, inverse);
}

}  // namespace vq::kv
