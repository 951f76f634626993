// Outlier channels of a group of tokens, as QJL's reference code picks them and TurboQuant's
// fractional settings reuse: the k channels with the largest norm over the group's tokens.
#pragma once

#include <algorithm>
#include <numeric>
#include <vector>

namespace vq::kv {

// The k channels of largest sum of squares over tokens x[t * d + c], t < n, by decreasing norm
// (ties to the lower channel, so the choice is deterministic).
inline std::vector<int> top_norm_channels(const float* x, int n, int d, int k) {
  std::vector<double> ss(static_cast<size_t>(d), 0.0);
  for (int t = 0; t < n; ++t) {
    for (int c = 0; c < d; ++c) ss[size_t(c)] += double(x[size_t(t) * d + c]) * x[size_t(t) * d + c];
  }
  std::vector<int> order(static_cast<size_t>(d));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
    return ss[size_t(a)] != ss[size_t(b)] ? ss[size_t(a)] > ss[size_t(b)] : a < b;
  });
  order.resize(size_t(k));
  return order;
}

}  // namespace vq::kv
