// The parameters and checks the methods share (registry.h), and Method's calibration binding.
#include "src/kv/registry.h"

#include <fmt/format.h>

#include <algorithm>

#include "src/core/random_rotation.h"
#include "src/core/rng.h"
#include "veloxquant/error.h"
#include "veloxquant/kv/calibration.h"

namespace vq::kv {

std::vector<ParamInfo> window_params() {
  return {
      {"residual", ParamType::kInt, 0, 0, 1 << 20, "newest tokens kept in fp16 (residual window)", {}},
      {"sink", ParamType::kInt, 0, 0, 1 << 16, "leading tokens kept in fp16 (attention sinks)", {}},
  };
}

std::vector<ParamInfo> rotation_params() {
  return {
      {"rot", ParamType::kBool, 0, 0, 1, "randomized Hadamard rotation of K and V (query rotated)", {}},
      {"seed", ParamType::kInt, 1234, 0, 2147483647, "seed of the rotation's random signs", {}},
  };
}

std::vector<ParamInfo> windowed_method_params(std::vector<ParamInfo> own, int residual_default) {
  for (auto& x : window_params()) {
    if (x.name == "residual") x.default_value = residual_default;
    own.push_back(x);
  }
  return own;
}

std::vector<ParamInfo> rotated_method_params(std::vector<ParamInfo> own) {
  for (auto& x : rotation_params()) {
    if (x.name == "seed") own.push_back(x);
  }
  return windowed_method_params(std::move(own));
}

void check_hadamard_dim(const char* method, int d, int lo) {
  VQ_CHECK(d >= lo && d <= 4096 && (d & (d - 1)) == 0,
           fmt::format("{}: head_dim must be a power of two in [{}, 4096] (the rotation is a Hadamard transform), got {}",
                       method, lo, d));
}

bool rotatable_dim(int d) {
  const bool pow2 = d > 0 && (d & (d - 1)) == 0;
  return pow2 ? d <= 4096 : d > 0 && d <= int(RandomRotation::kMaxDense);
}

void check_rotation_dim(const char* method, int d, int lo) {
  VQ_CHECK(d >= lo && rotatable_dim(d),
           fmt::format("{}: head_dim must be in [{}, {}] (a power of two up to 4096 takes the Hadamard rotation), got {}",
                       method, lo, RandomRotation::kMaxDense, d));
}

uint64_t layer_seed(uint64_t seed, int layer, int side) {
  uint64_t s = seed * 0x100000001b3ull + uint64_t(layer) * 2 + uint64_t(side);
  return splitmix64(s);
}

int Method::sink_tokens() const {
  return std::max(keys_->sink_tokens(), values_->sink_tokens());
}

Method Method::with_calibration(std::shared_ptr<const Calibration> calib) const {
  VQ_CHECK(calib, "with_calibration: no calibration");
  VQ_CHECK(calib->spec == spec_, fmt::format("the calibration was made for '{}', not for '{}'", calib->spec, spec_));
  Method m = *this;
  // A method bound to its calibration as a whole (RateQuant) replaces its sides; both sides of
  // one method stay one object.
  if (auto k = keys_->calibrated(*calib)) {
    m.keys_ = k;
    m.values_ = values_ == keys_ ? k : values_;
  }
  if (values_ != keys_) {
    if (auto v = values_->calibrated(*calib)) m.values_ = v;
  }
  m.calib_ = std::move(calib);
  return m;
}

double Method::bits_per_element(int head_dim) const {
  return 0.5 * (keys_->key_bits(head_dim) + values_->value_bits(head_dim));
}

int fp16_tokens(const MethodImpl& keys, const MethodImpl& values) {
  return std::max(keys.sink_tokens(), values.sink_tokens()) + std::max(keys.key_keep(), values.value_keep());
}

int Method::window_tokens() const { return std::max(keys_->key_keep(), values_->value_keep()); }

int Method::fp16_tokens() const { return kv::fp16_tokens(*keys_, *values_); }

double bits_with_fp16_tokens(double bits, int64_t fp16_tokens, int64_t ctx) {
  VQ_CHECK(ctx >= 1 && fp16_tokens >= 0, "bits counted: a context of fewer than one token");
  const int64_t kept = std::min(fp16_tokens, ctx);
  return (double(ctx - kept) * bits + double(kept) * 16.0) / double(ctx);
}

double Method::bits_counted(int head_dim, int64_t ctx) const {
  return bits_with_fp16_tokens(bits_per_element(head_dim), fp16_tokens(), ctx);
}

}  // namespace vq::kv
