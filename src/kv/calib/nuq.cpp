#include "src/kv/calib/nuq.h"

#include <algorithm>
#include <cmath>

#include "veloxquant/error.h"

namespace vq::kv {

std::vector<float> weighted_kmeans_1d(std::vector<WeightedSample>& s, int k, int max_iter) {
  VQ_CHECK(k >= 2 && !s.empty(), "k-means: needs k >= 2 and some samples");
  std::sort(s.begin(), s.end(), [](const WeightedSample& a, const WeightedSample& b) { return a.x < b.x; });
  const size_t n = s.size();
  // Prefix sums of w and w x (double) give each contiguous cluster's weighted mean in O(1).
  std::vector<double> W(n + 1, 0.0), WX(n + 1, 0.0);
  for (size_t i = 0; i < n; ++i) {
    const double w = std::max(0.0f, s[i].w);
    W[i + 1] = W[i] + w;
    WX[i + 1] = WX[i] + w * s[i].x;
  }
  std::vector<double> c(static_cast<size_t>(k));
  if (W[n] <= 0.0) {  // no weight anywhere: fall back to equal weights
    for (size_t i = 0; i < n; ++i) {
      W[i + 1] = W[i] + 1.0;
      WX[i + 1] = WX[i] + s[i].x;
    }
  }
  for (int j = 0; j < k; ++j) {  // weighted quantiles
    const double target = (j + 0.5) / k * W[n];
    const size_t i = size_t(std::lower_bound(W.begin() + 1, W.end(), target) - W.begin()) - 1;
    c[size_t(j)] = s[std::min(i, n - 1)].x;
  }
  const auto upper = [&](double t) {  // first sample index with x > t
    return size_t(std::upper_bound(s.begin(), s.end(), t, [](double v, const WeightedSample& a) { return v < a.x; }) -
                  s.begin());
  };
  for (int it = 0; it < max_iter; ++it) {
    std::sort(c.begin(), c.end());
    std::vector<double> next = c;
    size_t lo = 0;
    for (int j = 0; j < k; ++j) {
      const size_t hi = j + 1 < k ? upper(0.5 * (c[size_t(j)] + c[size_t(j) + 1])) : n;
      const double w = W[hi] - W[std::min(lo, hi)];
      if (hi > lo && w > 0.0) next[size_t(j)] = (WX[hi] - WX[lo]) / w;  // an empty cluster keeps its level
      lo = std::max(lo, hi);
    }
    if (next == c) break;
    c = next;
  }
  std::sort(c.begin(), c.end());
  std::vector<float> levels;
  for (double v : c) {
    const float f = float(v);
    if (levels.empty() || f > levels.back()) {
      levels.push_back(f);
    } else {  // coincident levels (too few distinct samples): keep them strictly ascending
      levels.push_back(std::nextafter(levels.back(), 1e30f));
    }
  }
  return levels;
}

std::vector<float> level_midpoints(const std::vector<float>& levels) {
  std::vector<float> m;
  for (size_t i = 0; i + 1 < levels.size(); ++i) m.push_back(0.5f * (levels[i] + levels[i + 1]));
  return m;
}

std::vector<float> qnorm_levels(const std::vector<float>& levels, const std::vector<WeightedSample>& s) {
  const std::vector<float> mids = level_midpoints(levels);
  double m1 = 0, q1 = 0, m2 = 0, q2 = 0;
  for (const WeightedSample& x : s) {
    const double y = levels[size_t(nearest_level(mids.data(), int(mids.size()), x.x))];
    m1 += x.x;
    q1 += double(x.x) * x.x;
    m2 += y;
    q2 += y * y;
  }
  const double n = double(s.size());
  m1 /= n;
  m2 /= n;
  const double sd1 = std::sqrt(std::max(0.0, q1 / n - m1 * m1)), sd2 = std::sqrt(std::max(0.0, q2 / n - m2 * m2));
  if (!(sd2 > 0.0)) return levels;
  std::vector<float> out;
  for (float l : levels) out.push_back(float((l - m2) * sd1 / sd2 + m1));
  return out;
}

}  // namespace vq::kv
