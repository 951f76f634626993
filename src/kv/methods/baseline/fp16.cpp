// fp16: the uncompressed cache every other method is measured against (16 bits per element).
#include "src/kv/methods/baseline/baseline.h"
#include "src/kv/methods/baseline/half_codec.h"

namespace vq::kv {

const MethodDef& fp16_method() {
  static const MethodDef def{
      {"fp16", "IEEE half precision, uncompressed reference", baseline_params()},
      [](const ParamValues& v) {
        return make_baseline({[](int d) { return make_half_key_codec(HalfKind::kF16, d); },
                              [](int d) { return make_half_value_codec(HalfKind::kF16, d); },
                              [](int) { return 16.0; }},
                             v);
      }};
  return def;
}

}  // namespace vq::kv
