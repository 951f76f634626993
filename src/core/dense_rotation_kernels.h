// The dense rotation's matrix-vector products (random_rotation.h), compiled per SIMD target
// (dense_rotation_kernels.cpp). Every output is a sum in double over the inputs in order from
// zero, products and sums each rounded (no fused multiply-add), as the scalar loop takes it, with
// the outputs in the vector lanes: every target gives the same bits, and the n chains of sums run
// side by side instead of one after another.
#pragma once

#include <cstddef>

namespace vq::dense_rotation {

// x_r = M x_r in place for rows r < rows (stride floats apart), for the n x n matrix m whose
// column j is m[j n ...] (n floats): y[i] = sum over j in order of double(m[j n + i]) *
// double(x[j]). Several rows share each pass over m, without changing any row's sums.
void apply_columns(const float* m, size_t n, float* x, size_t rows = 1, size_t stride = 0);

}  // namespace vq::dense_rotation
