// 16-bit float codecs: the packed form is the fp16/bf16 bits themselves, read by the shared
// 16-bit kernels (the same ones that read the fp16 window and sinks).
#include "src/kv/methods/baseline/half_codec.h"

#include "src/core/fp16.h"
#include "src/kv/methods/baseline/token_codec.h"

namespace vq::kv {
namespace {

const uint16_t* as_half(const uint8_t* p) { return reinterpret_cast<const uint16_t*>(p); }

template <HalfKind kKind>
const TokenFormat& half_format() {
  static const TokenFormat f{
      [](int d) { return size_t(d) * 2; },
      [](const float* x, int d, uint8_t* tok) {
        kKind == HalfKind::kF16 ? f32_to_f16(x, reinterpret_cast<uint16_t*>(tok), size_t(d))
                                : f32_to_bf16(x, reinterpret_cast<uint16_t*>(tok), size_t(d));
      },
      [](const uint8_t* tok, int d, float* x) {
        kKind == HalfKind::kF16 ? f16_to_f32(as_half(tok), x, size_t(d)) : bf16_to_f32(as_half(tok), x, size_t(d));
      },
      [](const float* q, int n_q, size_t q_stride, const uint8_t* tokens, size_t tok_bytes, int64_t n, int d,
         float* out, size_t out_stride) {
        half_scores(kKind, q, n_q, q_stride, as_half(tokens), tok_bytes / 2, n, d, out, out_stride);
      },
      [](const float* w, size_t w_stride, int n_q, const uint8_t* tokens, size_t tok_bytes, int64_t n, int d,
         float* acc, size_t acc_stride) {
        half_accumulate(kKind, w, w_stride, n_q, as_half(tokens), tok_bytes / 2, n, d, acc, acc_stride);
      }};
  return f;
}

const TokenFormat& format(HalfKind kind) {
  return kind == HalfKind::kF16 ? half_format<HalfKind::kF16>() : half_format<HalfKind::kBF16>();
}

}  // namespace

std::unique_ptr<KeyCodec> make_half_key_codec(HalfKind kind, int head_dim) {
  return make_token_key_codec(format(kind), head_dim);
}
std::unique_ptr<ValueCodec> make_half_value_codec(HalfKind kind, int head_dim) {
  return make_token_value_codec(format(kind), head_dim);
}

}  // namespace vq::kv
