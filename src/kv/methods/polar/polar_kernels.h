// PolarQuant's row decode with the angles' cos and sin looked up in registers (polar_kernels.cpp,
// compiled per SIMD target); polar.cpp describes the method and the row layout.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vq::kv::polar {

// Angles of at most this many bits decode through register tables of 16 floats.
inline constexpr int kTableBits = 4;

// One row into x (d floats): the d >> levels fp16 radii at the row's start, then walking the tree
// down from level `levels` to 1, each parent r_i giving r_i cos(a) and r_i sin(a) for its coded
// angle a. Level l (1..levels) has d >> l codes of bits[l] bits as bit planes at row + offset[l]
// (plane_bytes(d >> l) bytes each), and its tables at cos + stride (l - 1) and sin + stride (l - 1)
// (stride >= 16, zero past 2^bits[l]). d is a power of two. With `tables` (every level has at
// most kTableBits bits) a vector of angles at a time; otherwise, and on targets of fewer than 8
// lanes, one at a time. Each output is the same one product either way, so every target gives its
// bits.
void decode_row(const uint8_t* row, int d, int levels, const int* bits, const size_t* offset, const float* cos,
                const float* sin, size_t stride, bool tables, float* x);

}  // namespace vq::kv::polar
