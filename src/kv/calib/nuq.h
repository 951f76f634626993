// Non-uniform quantization datatypes (KVQuant's nuqB): 2^B levels learned by sensitivity-weighted
// k-means on normalized activations, the nearest-level rule, and Q-Norm.
#pragma once

#include <cstdint>
#include <vector>

namespace vq::kv {

struct WeightedSample {
  float x;
  float w;
};

// Weighted 1-D k-means (Lloyd's algorithm, run to a fixed point or max_iter rounds): k levels,
// ascending, minimizing sum w (x - level(x))^2. Starts from the weighted quantiles (i + 1/2)/k, so
// the result depends on the data only. Consumes `samples` (sorted in place).
std::vector<float> weighted_kmeans_1d(std::vector<WeightedSample>& samples, int k, int max_iter = 200);

// Q-Norm: levels shifted and scaled so that the dequantized samples have the mean and standard
// deviation of the samples themselves (unweighted).
std::vector<float> qnorm_levels(const std::vector<float>& levels, const std::vector<WeightedSample>& samples);

// Index of the level nearest x: the number of midpoints between adjacent levels that x exceeds
// (ties go up, NaN to 0).
inline int nearest_level(const float* mids, int n_mids, float x) {
  int c = 0;
  for (int i = 0; i < n_mids; ++i) c += x > mids[i] ? 1 : 0;
  return c;
}
std::vector<float> level_midpoints(const std::vector<float>& levels);

}  // namespace vq::kv
