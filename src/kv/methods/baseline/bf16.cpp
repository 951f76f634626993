// bf16: bfloat16 storage (8-bit exponent, 7-bit mantissa), 16 bits per element.
#include "src/kv/methods/baseline/baseline.h"
#include "src/kv/methods/baseline/half_codec.h"

namespace vq::kv {

const MethodDef& bf16_method() {
  static const MethodDef def{
      {"bf16", "bfloat16, same size as fp16 with a wider range and less precision",
       baseline_params()},
      [](const ParamValues& v) {
        return make_baseline({[](int d) { return make_half_key_codec(HalfKind::kBF16, d); },
                              [](int d) { return make_half_value_codec(HalfKind::kBF16, d); },
                              [](int) { return 16.0; }},
                             v);
      }};
  return def;
}

}  // namespace vq::kv
