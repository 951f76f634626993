// Kernels of product vector quantizers: the nearest-centroid search that encodes a sub-vector,
// and the lookup-table sum that scores a block of tokens from their centroid indices.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vq::kv {

// Index of the centroid nearest x (sub floats) among k (a multiple of 16) centroids given
// transposed, [sub][k], with their squared norms: the smallest |c|^2 - 2 x.c, the first index on
// ties. The running minimum and its index stay in registers; no distance row is stored.
int nearest_centroid(const float* centroids_t, const float* norms, int k, int sub, const float* x);

// out[t] += sum over s < n_sub of table[s * k + idx[s * idx_stride + t]], for t < n.
void lut_gather_sum(const float* table, int k, const uint8_t* idx, size_t idx_stride, int n_sub, int n, float* out);

}  // namespace vq::kv
