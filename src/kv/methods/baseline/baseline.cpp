// Baseline MethodImpl: wraps per-token codecs, adding rotation and window policy.
#include "src/kv/methods/baseline/baseline.h"

#include <fmt/format.h>

#include "src/core/hadamard.h"
#include "src/kv/rotation.h"
#include "veloxquant/error.h"

namespace vq::kv {
namespace {

class BaselineMethod final : public WindowedMethod {
 public:
  BaselineMethod(BaselineCodecs codecs, const ParamValues& v)
      : WindowedMethod(v), codecs_(std::move(codecs)), rot_(param_bool(v, "rot")), seed_(uint64_t(param_int(v, "seed"))) {}

  std::unique_ptr<KeyCodec> key_codec(const CodecContext& ctx) const override {
    auto c = codecs_.key(ctx.head_dim);
    if (rot_) {
      check_rotatable(ctx.head_dim);
      c = rotate_keys(std::move(c), layer_seed(seed_, ctx.layer, 0));
    }
    return c;
  }
  std::unique_ptr<ValueCodec> value_codec(const CodecContext& ctx) const override {
    auto c = codecs_.value(ctx.head_dim);
    if (rot_) {
      check_rotatable(ctx.head_dim);
      c = rotate_values(std::move(c), layer_seed(seed_, ctx.layer, 1));
    }
    return c;
  }
  double key_bits(int head_dim) const override { return codecs_.bits(head_dim); }
  double value_bits(int head_dim) const override {
    return codecs_.value_bits ? codecs_.value_bits(head_dim) : codecs_.bits(head_dim);
  }

 private:
  static void check_rotatable(int d) {
    check_rotation_dim("rot=1", d, 1);
  }
  BaselineCodecs codecs_;
  bool rot_;
  uint64_t seed_;
};

}  // namespace

std::unique_ptr<MethodImpl> make_baseline(BaselineCodecs codecs, const ParamValues& values) {
  return std::make_unique<BaselineMethod>(std::move(codecs), values);
}

std::vector<ParamInfo> baseline_params() {
  return windowed_method_params(rotation_params());
}

}  // namespace vq::kv
