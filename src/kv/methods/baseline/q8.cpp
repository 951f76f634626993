// q8: int8 codes per group of 32 channels with an fp16 scale (8.5 bits), like llama.cpp q8_0.
// Per token (a block is one token), symmetric round-to-nearest per group; see group_formats.h
// for the byte layout. Optional randomized Hadamard rotation (rot=1).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/methods/baseline/q8.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/kv/methods/baseline/group_kernels-inl.h"

HWY_BEFORE_NAMESPACE();
namespace vq::kv {
namespace HWY_NAMESPACE {

void Q8Scores(const float* q, int n_q, size_t q_stride, const uint8_t* tokens, size_t tok_bytes,
              int64_t n, int d, float* out, size_t out_stride) {
  FusedScores<Q8Loader>(q, n_q, q_stride, tokens, tok_bytes, n, d, out, out_stride);
}
void Q8Accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* tokens,
                  size_t tok_bytes, int64_t n, int d, float* acc, size_t acc_stride) {
  FusedAccumulate<Q8Loader>(w, w_stride, n_q, tokens, tok_bytes, n, d, acc, acc_stride);
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "src/kv/methods/baseline/baseline.h"
#include "src/kv/methods/baseline/token_codec.h"
#include "veloxquant/error.h"

namespace vq::kv {
HWY_EXPORT(Q8Scores);
HWY_EXPORT(Q8Accumulate);

namespace {

// Like quantize_row_q8_0: scale = amax / 127, codes = round(x / scale), scale stored as fp16.
void encode_token(const float* x, int d, uint8_t* out) {
  for (int g = 0; g * kQuantGroup < d; ++g) {
    const int gs = std::min(kQuantGroup, d - g * kQuantGroup);
    const float* xg = x + g * kQuantGroup;
    uint8_t* codes = out + (group_codes<Q8Format>(out, d, g) - out);
    float amax = 0.0f;
    for (int j = 0; j < gs; ++j) amax = std::max(amax, std::fabs(xg[j]));
    const float scale = amax / 127.0f;
    const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
    const uint16_t h = f32_to_f16(scale);
    std::memcpy(out + 2 * g, &h, 2);
    for (int j = 0; j < gs; ++j) {
      const float c = std::clamp(std::nearbyint(xg[j] * inv), -127.0f, 127.0f);
      codes[j] = uint8_t(int8_t(c));
    }
  }
}

using Fmt = Q8Format;

void scores(const float* q, int n_q, size_t q_stride, const uint8_t* tokens, size_t tok_bytes, int64_t n, int d,
            float* out, size_t out_stride) {
  HWY_DYNAMIC_DISPATCH(Q8Scores)(q, n_q, q_stride, tokens, tok_bytes, n, d, out, out_stride);
}
void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* tokens, size_t tok_bytes, int64_t n,
                int d, float* acc, size_t acc_stride) {
  HWY_DYNAMIC_DISPATCH(Q8Accumulate)(w, w_stride, n_q, tokens, tok_bytes, n, d, acc, acc_stride);
}

const TokenFormat kFormat{token_bytes<Fmt>, encode_token, decode_token<Fmt>, scores, accumulate};

void check_dim(int d) {
  VQ_CHECK(d <= kQuantGroup * kMaxQuantGroups, fmt::format("q8: head_dim {} above 2048", d));
}

}  // namespace

const MethodDef& q8_method() {
  static const MethodDef def{
      {"q8", "int8 per group of 32 with an fp16 scale (llama.cpp q8_0)", baseline_params()},
      [](const ParamValues& v) {
        return make_baseline({[](int d) {
                                check_dim(d);
                                return make_token_key_codec(kFormat, d);
                              },
                              [](int d) {
                                check_dim(d);
                                return make_token_value_codec(kFormat, d);
                              },
                              [](int d) { return grouped_bits<Fmt>(d); }},
                             v);
      }};
  return def;
}

}  // namespace vq::kv
#endif
