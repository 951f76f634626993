// Small vectorized float kernels for codecs that decode a group of codes before using it: dots
// against several query rows, and the affine decode of byte codes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vq::kv {

// out[r * out_stride] = q_r . x for r < n_q; q_r = q + r * q_stride, x has n floats.
void dot_rows(const float* q, int n_q, size_t q_stride, const float* x, int n, float* out, size_t out_stride);

// out[i] = codes[i] * scale + zero (one fused multiply-add per element, as the scalar decoders
// compute it with std::fma).
void affine_u8(const uint8_t* codes, int n, float scale, float zero, float* out);

}  // namespace vq::kv
