// QJL's kernels, compiled per SIMD target (qjl_lane_kernels.cpp): the sketch's projection S x
// (qjl_sketch.h; every key the cache takes is projected), and the query tables of its keys with
// outlier channels in the token-lane layout (qjl.cpp).
//
// A nibble table (turbo_lanes.h) of w over n rows with levels -c, +c: entry i of nibble k is the
// sum over j < 4, in order, of w[4k + j] * (bit j of i ? c : -c), products and sums rounded in
// float; every target gives the same bits.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vq::kv::qjl {

// out[0, rows) = the first rows of S x for S kept by columns (st: d columns of m floats), over the
// channels c with (mask[c] != 0) == in_mask (all when mask is null): each row's sum over the
// channels in order, products and sums rounded in float; every target gives the same bits.
void project_columns(const float* st, int m, int d, const float* x, int rows, float* out, const uint8_t* mask,
                     bool in_mask);
// project_columns over all channels for n_x vectors x (x_stride apart) into outputs out_stride
// apart, each with project_columns' bits; the vectors share each pass over S (prefill's query rows).
void project_columns_rows(const float* st, int m, int d, const float* xs, size_t x_stride, int n_x, int rows,
                          float* out, size_t out_stride);
// For n rows a_r (a_stride apart, m floats each): out row r (out_stride apart) += S^T a_r, each
// channel's sum over the m rows of S taken in order from zero and then added to out (the scalar
// add_transposed's order), so every target gives the same bits.
void transposed_add(const float* st, int m, int d, const float* a, size_t a_stride, int n, float* out,
                    size_t out_stride);

// tab (4 m floats) = the nibble table of w (m rows, a multiple of 32) with levels -c, +c.
// scratch: m floats.
void query_tables(const float* w, int m, float c, float* tab, float* scratch);

// The tables of a group's outlier share w_out = sum_k coefs[k] * cols[k][0, m) of S q (summed in
// that order): tab_out (4 om floats) over its first om rows with levels -+c_out, and, when om != m,
// tab_corr (4 m floats) over all m rows with levels -+c_in (when om = m, c_out = c_in and tab_out
// is that table). m and om are multiples of 32; scratch holds 2 m floats.
void outlier_group_tables(int m, int om, const float* const* cols, const float* coefs, int n_cols, float c_in,
                          float c_out, float* tab_corr, float* tab_out, float* scratch);

// For the 16 tokens of a key part at one bit (turbo_lanes.h; words: its code words, rows = its
// channels, a multiple of 32): out[k * 16 + t] = the sum over j < rows, in order, of
// (bit j of token t ? +1 : -1) * cols[k][j], rounded in float; every target gives the same bits.
// The tokens' sign vectors against a few columns of S, before their scales and levels.
void sign_column_sums(const uint8_t* words, int rows, const float* const* cols, int n_cols, float* out);

}  // namespace vq::kv::qjl
