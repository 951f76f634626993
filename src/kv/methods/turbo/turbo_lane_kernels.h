// The entry points of TurboQuant's lane kernels (turbo_lane_kernels.cpp), dispatched to the best
// SIMD target; the layout they read is described in turbo_lanes.h. TurboLanePart is the way in for
// codecs.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vq::kv::turbo_lanes {

// The scores of tokens [i0, i1) against n_q queries (qs floats apart) into out rows (out_stride
// apart): written, or with add, added as out + score. Codes of `bits` bits read through table16
// (the levels, 16 floats); blocks bb bytes apart.
void scores(int bits, bool add, const float* q, int n_q, size_t qs, const uint8_t* blocks, size_t bb, int d,
            int64_t i0, int64_t i1, const float* table16, float* out, size_t out_stride);
// The same at one bit from the queries' nibble tables (states, qs floats apart; n_words = d / 32).
void table_scores(bool add, const float* states, int n_q, size_t qs, const uint8_t* blocks, size_t bb, int n_words,
                  int64_t i0, int64_t i1, float* out, size_t out_stride);
// acc rows (acc_stride apart) += sum over tokens [i0, i1) of w_t scale_t level(code_t).
void accumulate(int bits, const float* w, size_t w_stride, int n_q, const uint8_t* blocks, size_t bb, int d,
                int64_t i0, int64_t i1, const float* table16, float* acc, size_t acc_stride);

}  // namespace vq::kv::turbo_lanes
