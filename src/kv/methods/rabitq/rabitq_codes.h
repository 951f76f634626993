// Extended RaBitQ's choice of codes (Gao et al., SIGMOD 2025, arXiv 2409.09913, section 3): of all
// vectors y on the B-bit grid {-(2^B - 1)/2, ..., (2^B - 1)/2}^d, the one whose direction is
// closest to the unit vector u (largest cosine <y, u> / |y|). At B = 1 the grid is {+-1/2}^d and
// the answer is the sign vector of the original RaBitQ (Gao and Long, SIGMOD 2024).
#pragma once

#include <cstdint>

namespace vq::kv::rabitq {

struct GridCode {
  double ip;     // <y, u> (positive)
  double ynorm;  // |y|
};

// Writes the unsigned codes c_i = y_i + (2^B - 1)/2 in [0, 2^B) of the best y for u (d floats,
// any norm: the cosine does not depend on it) and returns <y, u> and |y|. A coordinate of u
// equal to zero gets the smallest positive level.
GridCode best_grid_code(const float* u, int d, int bits, uint8_t* codes);

}  // namespace vq::kv::rabitq
