// q4: 4-bit codes per group of 32 channels with an fp16 scale (4.5 bits), like llama.cpp q4_0.
// Per token (a block is one token), symmetric round-to-nearest per group; see group_formats.h
// for the byte layout. Optional randomized Hadamard rotation (rot=1).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/kv/methods/q4.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/kv/methods/group_kernels-inl.h"

HWY_BEFORE_NAMESPACE();
namespace vq::kv {
namespace HWY_NAMESPACE {

void Q4Scores(const float* q, int n_q, size_t q_stride, const uint8_t* tokens, size_t tok_bytes,
              int64_t n, int d, float* out, size_t out_stride) {
  FusedScores<Q4Loader>(q, n_q, q_stride, tokens, tok_bytes, n, d, out, out_stride);
}
void Q4Accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* tokens,
                  size_t tok_bytes, int64_t n, int d, float* acc, size_t acc_stride) {
  FusedAccumulate<Q4Loader>(w, w_stride, n_q, tokens, tok_bytes, n, d, acc, acc_stride);
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "src/kv/methods/baseline.h"
#include "src/kv/methods/token_codec.h"
#include "veloxquant/error.h"

namespace vq::kv {
HWY_EXPORT(Q4Scores);
HWY_EXPORT(Q4Accumulate);

namespace {

// Like quantize_row_q4_0: the signed value of largest magnitude maps to code 0 (-8 * scale),
// scale = max / -8, codes = floor(x / scale + 8.5) clamped to 0..15, scale stored as fp16.
void encode_token(const float* x, int d, uint8_t* out) {
  for (int g = 0; g * kQuantGroup < d; ++g) {
    const int gs = std::min(kQuantGroup, d - g * kQuantGroup);
    const float* xg = x + g * kQuantGroup;
    uint8_t* codes = out + (group_codes<Q4Format>(out, d, g) - out);
    float amax = 0.0f, vmax = 0.0f;
    for (int j = 0; j < gs; ++j) {
      if (std::fabs(xg[j]) > amax) {
        amax = std::fabs(xg[j]);
        vmax = xg[j];
      }
    }
    const float scale = vmax / -8.0f;
    const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
    const uint16_t h = f32_to_f16(scale);
    std::memcpy(out + 2 * g, &h, 2);
    const int half = (gs + 1) / 2;
    std::memset(codes, 0, size_t(half));
    for (int j = 0; j < gs; ++j) {
      const int c = std::clamp(int(std::floor(xg[j] * inv + 8.5f)), 0, 15);
      if (j < half) {
        codes[j] = uint8_t(codes[j] | c);
      } else {
        codes[j - half] = uint8_t(codes[j - half] | (c << 4));
      }
    }
  }
}

using Fmt = Q4Format;

void scores(const float* q, int n_q, size_t q_stride, const uint8_t* tokens, size_t tok_bytes, int64_t n, int d,
            float* out, size_t out_stride) {
  HWY_DYNAMIC_DISPATCH(Q4Scores)(q, n_q, q_stride, tokens, tok_bytes, n, d, out, out_stride);
}
void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* tokens, size_t tok_bytes, int64_t n,
                int d, float* acc, size_t acc_stride) {
  HWY_DYNAMIC_DISPATCH(Q4Accumulate)(w, w_stride, n_q, tokens, tok_bytes, n, d, acc, acc_stride);
}

const TokenFormat kFormat{token_bytes<Fmt>, encode_token, decode_token<Fmt>, scores, accumulate};

void check_dim(int d) {
  VQ_CHECK(d <= kQuantGroup * kMaxQuantGroups, fmt::format("q4: head_dim {} above 2048", d));
}

}  // namespace

const MethodDef& q4_method() {
  static const MethodDef def{
      {"q4", "4-bit per group of 32 with an fp16 scale (llama.cpp q4_0)", baseline_params()},
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
