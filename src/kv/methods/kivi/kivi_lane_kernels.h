// The entry points of KIVI's lane kernels (kivi_key_kernels.cpp, kivi_value_kernels.cpp),
// dispatched to the best SIMD target; the layouts they read are described in kivi_lanes.h.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vq::kv::kivi_lanes {

// out rows (out_stride apart) = the scores of tokens [i0, i1) against n_q queries (qs floats
// apart); blocks of R tokens, bb bytes apart, b = bits, G tokens per key group.
void key_scores(int bits, const float* q, int n_q, size_t qs, const uint8_t* blocks, size_t bb, int d, int R, int G,
                int64_t i0, int64_t i1, float* out, size_t out_stride);
// acc rows (acc_stride apart: d channel sums, then d/G sums of w * zero) += the weighted values
// of tokens [i0, i1); blocks of 16 tokens, bb bytes apart.
void value_accumulate(int bits, const float* w, size_t w_stride, int n_q, const uint8_t* blocks, size_t bb, int d,
                      int G, int64_t i0, int64_t i1, float* acc, size_t acc_stride);

}  // namespace vq::kv::kivi_lanes
