// The C API's methods: the registry listed by index, and specs parsed into handles.
#include <algorithm>

#include "src/capi/handles.h"

using namespace vq::capi;

namespace {

const vq::kv::MethodDef& method_at(int index) {
  const auto& all = vq::kv::registered_methods();
  VQ_CHECK(index >= 0 && size_t(index) < all.size(),
           fmt::format("method index {} is outside [0, {})", index, all.size()));
  return *all[size_t(index)];
}

}  // namespace

extern "C" {

VQ_API int vq_method_count(void) {
  try {
    return int(vq::kv::registered_methods().size());
  } catch (...) {
    return 0;
  }
}

VQ_API vq_status vq_method_name(int index, const char** name, const char** summary) {
  return guard([&] {
    const vq::kv::MethodDef& def = method_at(index);
    // The registry's definitions live as long as the library, so their strings can be handed out.
    if (name) *name = def.info.name.c_str();
    if (summary) *summary = def.info.summary.c_str();
  });
}

VQ_API vq_status vq_method_param_count(int index, int* count) {
  return guard([&] {
    require_ptr(count, "count");
    *count = int(method_at(index).info.params.size());
  });
}

VQ_API vq_status vq_method_param_info(int index, int param, vq_method_param* out) {
  return guard([&] {
    require_ptr(out, "out");
    const auto& params = method_at(index).info.params;
    VQ_CHECK(param >= 0 && size_t(param) < params.size(),
             fmt::format("parameter index {} is outside [0, {})", param, params.size()));
    const vq::kv::ParamInfo& p = params[size_t(param)];
    out->name = p.name.c_str();
    out->help = p.help.c_str();
    switch (p.type) {
      case vq::kv::ParamType::kInt: out->type = VQ_PARAM_INT; break;
      case vq::kv::ParamType::kFloat: out->type = VQ_PARAM_FLOAT; break;
      case vq::kv::ParamType::kBool: out->type = VQ_PARAM_BOOL; break;
      case vq::kv::ParamType::kChoice: out->type = VQ_PARAM_CHOICE; break;
    }
    out->default_value = p.default_value;
    out->min = p.min;
    out->max = p.max;
  });
}

VQ_API vq_status vq_method_parse(const char* spec, vq_method** out) {
  return guard([&] {
    require_ptr(out, "out");
    *out = nullptr;
    require_ptr(spec, "spec");
    *out = new vq_method{vq::kv::parse_method(spec)};
  });
}

VQ_API void vq_method_free(vq_method* method) { delete method; }

VQ_API const char* vq_method_spec(const vq_method* method) { return method ? method->method.spec().c_str() : ""; }

VQ_API vq_status vq_method_bits(const vq_method* method, int head_dim, double* bits_per_element, double* key_bits,
                                double* value_bits) {
  return guard([&] {
    require_ptr(method, "method");
    VQ_CHECK(head_dim >= 1 && head_dim <= 4096, fmt::format("head_dim {} is outside [1, 4096]", head_dim));
    const vq::kv::Method& m = method->method;
    if (bits_per_element) *bits_per_element = m.bits_per_element(head_dim);
    if (key_bits) *key_bits = m.keys().key_bits(head_dim);
    if (value_bits) *value_bits = m.values().value_bits(head_dim);
  });
}

VQ_API vq_status vq_method_bits_counted(const vq_method* method, int head_dim, int64_t ctx, double* bits) {
  return guard([&] {
    require_ptr(method, "method");
    require_ptr(bits, "bits");
    VQ_CHECK(head_dim >= 1 && head_dim <= 4096, fmt::format("head_dim {} is outside [1, 4096]", head_dim));
    VQ_CHECK(ctx >= 1, fmt::format("ctx {} is below one token", ctx));
    *bits = method->method.bits_counted(head_dim, ctx);
  });
}

VQ_API int vq_method_needs_calibration(const vq_method* method) {
  return method && method->method.needs_calibration() ? 1 : 0;
}

VQ_API vq_status vq_method_window(const vq_method* method, int* window_tokens, int* sink_tokens) {
  return guard([&] {
    require_ptr(method, "method");
    const vq::kv::Method& m = method->method;
    if (window_tokens) *window_tokens = m.window_tokens();
    if (sink_tokens) *sink_tokens = m.sink_tokens();
  });
}

}  // extern "C"
