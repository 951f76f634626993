// The spectral basis of a set of vectors (SpectralQuant): their mean, and the eigenvectors of
// their covariance with the standard deviation along each, strongest first; and the effective
// dimension of that spectrum.
#pragma once

#include <cstdint>
#include <vector>

#include "veloxquant/kv/calibration.h"

namespace vq::kv {

// From n rows of d floats. Deviations are floored at kSigmaFloor times the largest (and at a
// tiny absolute value), so that whitening never divides by a direction the samples never
// moved in. Deterministic (no threads inside).
inline constexpr double kSigmaFloor = 1e-3;
SpectralBasis spectral_basis(const std::vector<float>& rows, int64_t n, int d);

// The participation ratio (sum lambda)^2 / sum lambda^2 of the eigenvalues lambda = sigma^2: the
// number of equally strong directions that would spread the variance as evenly (1 when one
// direction holds it all, d when all hold the same).
double participation_ratio(const SpectralBasis& b);

}  // namespace vq::kv
