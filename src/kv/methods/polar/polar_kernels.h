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
// angle a. Level l (1..levels) has d >> l codes of bits[l] <= kTableBits bits as bit planes at
// row + offset[l] (plane_bytes(d >> l) bytes each), and its tables at cos16 + 16 (l - 1) and
// sin16 + 16 (l - 1). d is a power of two. Each output is the one product the scalar decode
// computes, so every target gives its bits.
void decode_row(const uint8_t* row, int d, int levels, const int* bits, const size_t* offset, const float* cos16,
                const float* sin16, float* x);

}  // namespace vq::kv::polar
