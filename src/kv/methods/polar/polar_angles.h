// PolarQuant's angle codes without an arc tangent (polar.cpp): an angle psi = atan2(v, u) of a
// point with u > 0, v >= 0 is at least theta exactly when v cos(theta) >= u sin(theta), so a code
// is a count of such comparisons against the cell edges. Taking atan2 of every pair was most of
// the cost of encoding a token.
#pragma once

#include <cmath>
#include <vector>

namespace vq::kv::polar {

struct Edge {
  double cos, sin;
};
inline Edge edge(double theta) { return {std::cos(theta), std::sin(theta)}; }

// Levels above 1 (u, v >= 0: two radii): how many edges (the codebook's midpoints, ascending)
// the angle of (u, v) exceeds; an angle on an edge stays below it, as the nearest-level rule's
// ties do. u = v = 0 is angle 0.
inline int edges_below(double u, double v, const std::vector<Edge>& e) {
  int c = 0;
  for (const Edge& x : e) c += v * x.cos > u * x.sin ? 1 : 0;
  return c;
}

// Level 1: the cell of atan2(b, a) taken on [0, 2 pi), of k uniform cells (k a power of two): the
// quadrant, then the place in it against e, the boundaries 2 pi j / k for 0 < j < k / 4 (empty
// for k < 4). An angle on a boundary goes to the cell above it. On the axes it follows atan2:
// (a, +-0) is 0 for a = +0 or a > 0 and pi otherwise, (+-0, b > 0) pi / 2, (+-0, b < 0) 3 pi / 2.
inline int circle_cell(double a, double b, int k, const std::vector<Edge>& e) {
  if (b == 0) return std::signbit(a) ? k / 2 : 0;
  int q;
  double u, v;  // the point turned back by q quarter turns: u > 0, v >= 0
  if (b > 0) {
    q = a > 0 ? 0 : 1;
    u = a > 0 ? a : b;
    v = a > 0 ? b : -a;
  } else {
    q = a < 0 ? 2 : 3;
    u = a < 0 ? -a : -b;
    v = a < 0 ? -b : a;
  }
  if (k < 4) return q * k / 4;
  int c = 0;
  for (const Edge& x : e) c += v * x.cos >= u * x.sin ? 1 : 0;
  return q * (k / 4) + c;
}

// The boundaries circle_cell takes for k cells.
inline std::vector<Edge> circle_edges(int k) {
  std::vector<Edge> e;
  for (int j = 1; 4 * j < k; ++j) e.push_back(edge(2 * M_PI * j / k));
  return e;
}

}  // namespace vq::kv::polar
