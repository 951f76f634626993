// Vectorized dequantization of weight rows: bit-identical to dequantize_row_scalar (the same
// float operations in the same order, never fused).
#pragma once

#include <cstdint>

namespace vq::engine {

void dequantize_row(uint32_t type, const uint8_t* src, float* dst, int64_t n);

}  // namespace vq::engine
