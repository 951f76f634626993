// Lloyd–Max quantizers for the coordinates of a uniformly random unit vector: after a random
// rotation, each coordinate of a unit vector in R^d has the density
//   f(t) = Gamma(d/2) / (sqrt(pi) Gamma((d-1)/2)) * (1 - t^2)^((d-3)/2),   t in [-1, 1]
// (TurboQuant, Zandieh et al., ICLR 2026, section 3.1), close to N(0, 1/d) for large d. The
// optimal 2^b-level scalar quantizer of that density is found by Lloyd's iteration with the
// integrals taken numerically, and cached per (d, b).
#pragma once

#include <vector>

namespace vq::kv {

struct LloydMax {
  std::vector<float> levels;  // ascending, symmetric about 0
  double coordinate_mse = 0;  // E (t - Q(t))^2 under f
  // Expected ||u - u_hat||^2 for a unit vector: d * coordinate_mse.
  double vector_mse(int d) const { return d * coordinate_mse; }
};

// d >= 3, 1 <= bits <= 8. Deterministic; the result is computed once per (d, bits).
const LloydMax& lloyd_max_sphere(int d, int bits);

// The same for the unit-variance Gaussian and the unit-variance Laplace density
// (f(t) = exp(-sqrt(2)|t|) / sqrt(2)), which TurboQuant-RVQ's two stages use; vector_mse does
// not apply (coordinate_mse is per unit variance). 1 <= bits <= 8.
const LloydMax& lloyd_max_gaussian(int bits);
const LloydMax& lloyd_max_laplace(int bits);

// PolarQuant's angles at recursion level >= 2 (Han et al., 2025, Lemma 2): for a Gaussian (or
// uniformly random) vector, the level-l angle psi = atan2(r_b, r_a) between two level-(l-1) radii,
// each the norm of n = 2^(l-1) coordinates, lies in [0, pi/2] with density proportional to
// sin^(n-1)(2 psi). Levels are angles in [0, pi/2]. 2 <= level <= 16.
const LloydMax& lloyd_max_polar_angle(int level, int bits);

}  // namespace vq::kv
