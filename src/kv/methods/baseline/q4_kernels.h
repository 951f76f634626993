// The entry points of q4's fused kernels (q4_key_kernels.cpp, q4_value_kernels.cpp), dispatched
// to the best SIMD target.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vq::kv::q4 {

// out rows (out_stride apart) = the scores of key tokens [i0, i1) against n_q held queries
// (QueryState words, qs apart); blocks of 16 tokens, block_bytes(d) apart.
void scores(const float* q, int n_q, size_t qs, const uint8_t* blocks, int64_t i0, int64_t i1, int d, float* out,
            size_t out_stride);
// acc rows (acc_stride apart) += sum over value tokens [i0, i1) of w * v.
void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, int64_t i0, int64_t i1, int d,
                float* acc, size_t acc_stride);

}  // namespace vq::kv::q4
