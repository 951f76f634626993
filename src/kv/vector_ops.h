// Small vectorized float kernels shared by codecs that decode a token (or a group) into registers
// or L1 before using it: dots against several query rows, and weighted accumulation.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vq::kv {

// out[r * out_stride] = q_r . x for r < n_q; q_r = q + r * q_stride, x has n floats.
void dot_rows(const float* q, int n_q, size_t q_stride, const float* x, int n, float* out, size_t out_stride);

// acc_r += w[r * w_stride] * x for r < n_q; acc_r = acc + r * acc_stride.
void axpy_rows(const float* w, size_t w_stride, int n_q, const float* x, int n, float* acc, size_t acc_stride);

// out[i] = codes[i] * scale + zero (one fused multiply-add per element, as the scalar decoders
// compute it with std::fma).
void affine_u8(const uint8_t* codes, int n, float scale, float zero, float* out);

}  // namespace vq::kv
