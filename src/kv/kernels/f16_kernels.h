// Attention kernels over 16-bit float rows (fp16 or bf16): the residual window, the sinks, and
// the fp16/bf16 methods all read their tokens through these.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vq::kv {

enum class HalfKind { kF16, kBF16 };

// out[r * out_stride + t] = q_r . x_t for t in [0, n); q_r = q + r * q_stride, x_t = x + t * x_stride.
void half_scores(HalfKind kind, const float* q, int n_q, size_t q_stride, const uint16_t* x,
                 size_t x_stride, int64_t n, int d, float* out, size_t out_stride);

// acc[r * acc_stride + j] += sum over t of w[r * w_stride + t] * x_t[j].
void half_accumulate(HalfKind kind, const float* w, size_t w_stride, int n_q, const uint16_t* x,
                     size_t x_stride, int64_t n, int d, float* acc, size_t acc_stride);

// The same kernels over fp32 rows (x_stride in floats): for codecs that decode a tile of tokens
// into a cache-resident scratch first.
void float_scores(const float* q, int n_q, size_t q_stride, const float* x, size_t x_stride, int64_t n, int d,
                  float* out, size_t out_stride);
void float_accumulate(const float* w, size_t w_stride, int n_q, const float* x, size_t x_stride, int64_t n, int d,
                      float* acc, size_t acc_stride);

}  // namespace vq::kv
