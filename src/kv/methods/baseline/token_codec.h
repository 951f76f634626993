// Codecs whose block is one token of a fixed byte size, fully described by a few functions: how
// a token is encoded and decoded, and the fused kernels that score and accumulate runs of tokens.
// The grouped baselines (q8, q4) are built from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "veloxquant/kv/codec.h"

namespace vq::kv {

struct TokenFormat {
  size_t (*token_bytes)(int d);
  void (*encode)(const float* x, int d, uint8_t* tok);
  void (*decode)(const uint8_t* tok, int d, float* x);
  // Fused kernels over n consecutive tokens (tok_bytes apart), as in f16_kernels.h.
  void (*scores)(const float* q, int n_q, size_t q_stride, const uint8_t* tokens, size_t tok_bytes, int64_t n,
                 int d, float* out, size_t out_stride);
  void (*accumulate)(const float* w, size_t w_stride, int n_q, const uint8_t* tokens, size_t tok_bytes,
                     int64_t n, int d, float* acc, size_t acc_stride);
};

std::unique_ptr<KeyCodec> make_token_key_codec(const TokenFormat& f, int d);
std::unique_ptr<ValueCodec> make_token_value_codec(const TokenFormat& f, int d);

}  // namespace vq::kv
