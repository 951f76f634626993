// Moving rows between channel space and the two parts of TurboQuant's outlier split
// (turbo_split.cpp): the channels a group's mask marks, ascending, and the rest, ascending. On
// AVX-512 a vector of 16 channels moves with one compress (or expand) per part; other targets
// walk the channels. Data movement only, so the bits are the same on every target.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vq::kv::turbo_split {

// Floats that part rows must have writable (gather) or readable (scatter) past their end: the
// vector kernels store and load whole vectors.
inline constexpr size_t kPartSlack = 16;

// Both movers do nothing and return false unless the mask (d bits) is intact: exactly n channels
// marked, none past d (a saved cache's damaged mask is the caller's to handle).
//
// hi row r = x row r's marked channels (n floats), lo row r = the others (d - n floats), for
// `rows` rows of x (x_stride apart); hi and lo rows are n and d - n floats apart, written in
// order, each with kPartSlack floats of room past the last.
bool gather_parts(const float* x, size_t x_stride, int rows, const uint8_t* mask, int d, int n, float* hi, float* lo);
// acc row r (acc_stride apart) += the channel-space vector whose marked channels are hi row r and
// the others lo row r (rows n and d - n floats apart, readable kPartSlack floats past the last).
bool scatter_add_parts(const float* hi, const float* lo, int rows, const uint8_t* mask, int d, int n, float* acc,
                       size_t acc_stride);

}  // namespace vq::kv::turbo_split
