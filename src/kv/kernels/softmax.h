// The online-softmax step of streaming attention (FlashAttention style), one tile at a time.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vq::kv {

// For each row r of scores s[r * stride + t], t in [0, n) (-inf marks a masked token):
//   m' = max(m[r], max_t s), s <- exp(s - m'), l[r] <- l[r] * exp(m[r] - m') + sum_t s,
//   rescale[r] = exp(m[r] - m') (the factor the row's accumulators must be multiplied by),
//   m[r] <- m'. A row whose scores are all -inf so far keeps m = -inf and gets weights 0. A row
//   with no state yet (m[r] = -inf, so its accumulators are zero) gets rescale 1, not exp(-inf):
//   there is nothing to scale, and 1 lets the caller skip the pass.
void online_softmax_tile(float* s, size_t stride, int rows, int64_t n, float* m, float* l,
                         float* rescale);

}  // namespace vq::kv
