// The exact search of Extended RaBitQ: the best grid vector is the rounding y(t) of t|u| for some
// rescaling factor t > 0 (the paper's lemma), and y(t) only changes at the critical factors
// t = m / |u_i| where a coordinate crosses to its next level. Those are visited in increasing
// order (a min-heap, one pending crossing per coordinate), the cosine is updated in O(1) per
// crossing, and the best state is replayed. d (2^(B-1) - 1) crossings in all: at most 1792 for
// d = 256 and B = 4, once per token at encode time. (The paper's faster variant prunes the range of
// t; the exact search visits all of it, so it can only find an equal or better code.)
#include "src/kv/methods/rabitq/rabitq_codes.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <queue>
#include <utility>
#include <vector>

namespace vq::kv::rabitq {

GridCode best_grid_code(const float* u, int d, int bits, uint8_t* codes) {
  // Magnitudes only: the grid is symmetric, so each y_i takes the sign of u_i and a level
  // k_i + 1/2 with k_i in [0, L).
  const int L = 1 << (bits - 1);
  std::vector<int> k(static_cast<size_t>(d), 0);
  double ip = 0, sq = 0.25 * d;
  for (int i = 0; i < d; ++i) ip += 0.5 * std::fabs(double(u[i]));
  double best = sq > 0 ? ip / std::sqrt(sq) : 0.0;
  size_t best_steps = 0;

  using Event = std::pair<double, int>;  // (critical t, coordinate): ties go to the lower index
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> heap;
  if (L > 1) {
    for (int i = 0; i < d; ++i) {
      if (u[i] != 0.0f) heap.push({1.0 / std::fabs(double(u[i])), i});
    }
  }
  std::vector<int> order;  // coordinates in the order they step up
  while (!heap.empty()) {
    const int i = heap.top().second;
    heap.pop();
    const double a = std::fabs(double(u[i]));
    ++k[i];
    ip += a;
    sq += 2.0 * k[i];  // (k + 1/2)^2 - (k - 1/2)^2
    order.push_back(i);
    const double c = ip / std::sqrt(sq);
    if (c > best) {
      best = c;
      best_steps = order.size();
    }
    if (k[i] + 1 < L) heap.push({double(k[i] + 1) / a, i});
  }

  std::fill(k.begin(), k.end(), 0);
  for (size_t s = 0; s < best_steps; ++s) ++k[order[s]];
  GridCode g{0.0, 0.0};
  for (int i = 0; i < d; ++i) {
    const double level = k[i] + 0.5;
    g.ip += level * std::fabs(double(u[i]));
    g.ynorm += level * level;
    codes[i] = uint8_t(u[i] >= 0.0f ? L + k[i] : L - 1 - k[i]);
  }
  g.ynorm = std::sqrt(g.ynorm);
  return g;
}

}  // namespace vq::kv::rabitq
