// Vectorized dequantization of weight rows: bit-identical to dequantize_row_scalar (the same
// float operations in the same order, never fused).
#pragma once

#include <cstdint>

namespace vq::engine {

void dequantize_row(uint32_t type, const uint8_t* src, float* dst, int64_t n);

// out[t * out_stride] = dot(dequantized row, x + t * n) for t < n_tok (1 to 4), without writing
// the dequantized row anywhere. Returns false when this type or shape has no fused path.
bool dot_row_supported(uint32_t type, int64_t n, int64_t n_tok);
bool dot_row(uint32_t type, const uint8_t* src, int64_t n, const float* x, int64_t n_tok, float* out,
             int64_t out_stride);
// The same for an F16 row (n a multiple of 32) and activations held as fp16 (xh + t * n).
bool dot_row_f16(const uint8_t* src, int64_t n, const uint16_t* xh, int64_t n_tok, float* out, int64_t out_stride);

}  // namespace vq::engine
