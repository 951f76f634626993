// SpectralQuant's products with its d x d basis (spectral.cpp), compiled per SIMD target
// (spectral_kernels.cpp). Every key the cache takes and every query row and value output pays d^2
// multiply-adds here, which prefill's many rows make a large share of its time. Both keep the
// scalar order of their sums, so every target gives the same bits.
#pragma once

namespace vq::kv::spectral {

// out[i] = the dot product of rows[i] (n floats, rows n apart) with x, for i < n_rows: each as 16
// partial sums (term k into partial k mod 16, in order), then the 16 added in order from zero.
void dot16_rows(const float* rows, int n_rows, const float* x, int n, float* out);

// dot16_rows for n_x vectors x (x_stride apart): out[x * out_stride + i], each product as
// dot16_rows gives it. Several vectors share each pass over the rows: prefill's query rows.
void dot16_rows_multi(const float* rows, int n_rows, const float* xs, size_t x_stride, int n_x, int n, float* out,
                      size_t out_stride);

// For n_x coefficient vectors c_x (c_stride apart) and outputs out_x (out_stride apart):
// out_x[j] += c_x[i] * rows[i][j] for i = 0, 1, ... n_rows - 1 in order, j < n (rows n apart), a row
// whose coefficient is zero skipped; the same bits for any n_x.
void add_scaled_rows_multi(const float* rows, int n_rows, const float* c, size_t c_stride, int n_x, int n, float* out,
                           size_t out_stride);

}  // namespace vq::kv::spectral
