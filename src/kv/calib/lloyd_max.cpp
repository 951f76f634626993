#include "src/kv/calib/lloyd_max.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "veloxquant/error.h"

namespace vq::kv {

namespace {

// Lloyd's iteration for the 2^bits-level quantizer of the symmetric density exp(log_f(t)) (not
// necessarily normalized) on [-w, w], outside which its mass is negligible; sd is its standard
// deviation (the scale of the starting levels and of the stopping rule).
template <typename LogDensity>
LloydMax solve(LogDensity log_f, double sd, double w, int bits) {
  // The density on a fine grid, midpoint rule; prefix sums of f and t f give each cell's mass
  // and mean in O(1).
  constexpr int kGrid = 1 << 18;
  const double h = 2.0 * w / kGrid;
  std::vector<double> F(kGrid + 1, 0.0), T(kGrid + 1, 0.0), Q(kGrid + 1, 0.0);
  for (int i = 0; i < kGrid; ++i) {
    const double t = -w + (i + 0.5) * h;
    const double f = std::exp(log_f(t)) * h;
    F[size_t(i) + 1] = F[size_t(i)] + f;
    T[size_t(i) + 1] = T[size_t(i)] + t * f;
    Q[size_t(i) + 1] = Q[size_t(i)] + t * t * f;
  }
  const auto index = [&](double t) {  // grid cells whose midpoint is below t
    return size_t(std::clamp(std::floor((t + w) / h + 0.5), 0.0, double(kGrid)));
  };
  const int k = 1 << bits;
  std::vector<double> c(static_cast<size_t>(k));
  for (int j = 0; j < k; ++j) c[size_t(j)] = sd * 3.0 * (2.0 * j + 1 - k) / k;  // spread over +-3 sd
  for (int it = 0; it < 2000; ++it) {
    double moved = 0;
    size_t lo = 0;
    for (int j = 0; j < k; ++j) {
      const size_t hi = j + 1 < k ? index(0.5 * (c[size_t(j)] + c[size_t(j) + 1])) : size_t(kGrid);
      const double m = F[hi] - F[lo];
      if (m > 0) {
        const double nc = (T[hi] - T[lo]) / m;
        moved = std::max(moved, std::fabs(nc - c[size_t(j)]));
        c[size_t(j)] = nc;
      }
      lo = hi;
    }
    if (moved < 1e-13 * sd) break;
  }
  LloydMax r;
  double mse = 0;
  size_t lo = 0;
  for (int j = 0; j < k; ++j) {
    const size_t hi = j + 1 < k ? index(0.5 * (c[size_t(j)] + c[size_t(j) + 1])) : size_t(kGrid);
    const double cj = c[size_t(j)];
    mse += (Q[hi] - Q[lo]) - 2 * cj * (T[hi] - T[lo]) + cj * cj * (F[hi] - F[lo]);
    lo = hi;
    r.levels.push_back(float(cj));
  }
  r.coordinate_mse = mse / F[kGrid];
  return r;
}

LloydMax solve_sphere(int d, int bits) {
  // w = min(1, 12 standard deviations): beyond that the mass is below 1e-30.
  const double sd = 1.0 / std::sqrt(double(d));
  const double log_norm = std::lgamma(d / 2.0) - 0.5 * std::log(M_PI) - std::lgamma((d - 1) / 2.0);
  return solve([&](double t) { return log_norm + 0.5 * (d - 3) * std::log1p(-t * t); }, sd, std::min(1.0, 12.0 * sd),
               bits);
}

enum Family { kSphere, kGaussian, kLaplace, kPolar };

const LloydMax& cached(Family family, int d, int bits) {
  static std::mutex mu;
  static std::map<std::tuple<int, int, int>, LloydMax> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(int(family), d, bits);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  LloydMax q;
  switch (family) {
    case kSphere: q = solve_sphere(d, bits); break;
    // Unit variance; 12 standard deviations hold all but 1e-32 of the mass.
    case kGaussian: q = solve([](double t) { return -0.5 * t * t; }, 1.0, 12.0, bits); break;
    // Unit variance: scale 1/sqrt(2); the tail beyond 40 holds e^-56 of the mass.
    case kLaplace: q = solve([](double t) { return -M_SQRT2 * std::fabs(t); }, 1.0, 40.0, bits); break;
    // d is the level: the angle psi in [0, pi/2] has density proportional to sin^(n-1)(2 psi),
    // n = 2^(level-1); in t = psi - pi/4 that is cos^(n-1)(2t) on [-pi/4, pi/4], whose standard
    // deviation is about 1/(2 sqrt(n)) for large n (and below pi/12 for every n >= 2).
    case kPolar: {
      const double n = std::ldexp(1.0, d - 1);
      q = solve([n](double t) { return (n - 1) * std::log(std::cos(2 * t)); }, std::min(M_PI / 12, 0.5 / std::sqrt(n)),
                M_PI / 4, bits);
      for (float& l : q.levels) l += float(M_PI / 4);
      break;
    }
  }
  return cache.emplace(key, std::move(q)).first->second;
}

void check_bits(int bits) {
  VQ_CHECK(bits >= 1 && bits <= 8, fmt::format("Lloyd-Max: bits = {} is out of range [1, 8]", bits));
}

}  // namespace

const LloydMax& lloyd_max_sphere(int d, int bits) {
  VQ_CHECK(d >= 3 && d <= 65536 && bits >= 1 && bits <= 8,
           fmt::format("Lloyd-Max: d = {} and bits = {} are out of range", d, bits));
  return cached(kSphere, d, bits);
}

const LloydMax& lloyd_max_gaussian(int bits) {
  check_bits(bits);
  return cached(kGaussian, 0, bits);
}

const LloydMax& lloyd_max_laplace(int bits) {
  check_bits(bits);
  return cached(kLaplace, 0, bits);
}

const LloydMax& lloyd_max_polar_angle(int level, int bits) {
  check_bits(bits);
  VQ_CHECK(level >= 2 && level <= 16, fmt::format("Lloyd-Max: polar angle level {} is out of range [2, 16]", level));
  return cached(kPolar, level, bits);
}

}  // namespace vq::kv
