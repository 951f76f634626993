#include "src/kv/calib/rate_allocation.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "veloxquant/error.h"

namespace vq::kv {

std::vector<int> allocate_bits(const std::vector<std::vector<double>>& loss, int lo, int total) {
  const int U = int(loss.size());
  VQ_CHECK(U > 0 && !loss[0].empty(), "allocate_bits: no units or no widths");
  const int W = int(loss[0].size());
  for (const auto& l : loss) {
    VQ_CHECK(int(l.size()) == W, "allocate_bits: units with different numbers of widths");
    for (double x : l) VQ_CHECK(std::isfinite(x), "allocate_bits: a loss that is not finite");
  }
  const int extra = total - lo * U, max_extra = (W - 1) * U;
  if (extra < 0 || extra > max_extra) {
    throw_error(ErrorKind::kUsage, fmt::format("a budget of {} bits over {} units is outside [{}, {}]", total, U,
                                               lo * U, (lo + W - 1) * U));
  }
  // best[u][e]: least loss of units [u, U) spending e bits above lo in all; pick[u][e] the
  // extra bits unit u takes there. Filled from the last unit back, so the forward walk below
  // reads the choice directly; among equal losses the larger share for the earlier unit wins.
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(static_cast<size_t>(U) + 1,
                                        std::vector<double>(static_cast<size_t>(extra) + 1, kInf));
  std::vector<std::vector<int>> pick(static_cast<size_t>(U), std::vector<int>(static_cast<size_t>(extra) + 1, -1));
  best[size_t(U)][0] = 0.0;
  for (int u = U - 1; u >= 0; --u) {
    for (int e = 0; e <= extra; ++e) {
      for (int i = std::min(W - 1, e); i >= 0; --i) {
        const double rest = best[size_t(u) + 1][size_t(e - i)];
        if (rest == kInf) continue;
        const double v = loss[size_t(u)][size_t(i)] + rest;
        if (v < best[size_t(u)][size_t(e)]) {
          best[size_t(u)][size_t(e)] = v;
          pick[size_t(u)][size_t(e)] = i;
        }
      }
    }
  }
  std::vector<int> widths(static_cast<size_t>(U));
  int e = extra;
  for (int u = 0; u < U; ++u) {
    const int i = pick[size_t(u)][size_t(e)];
    VQ_CHECK(i >= 0, "allocate_bits: no allocation meets the budget");  // cannot happen: extra is in range
    widths[size_t(u)] = lo + i;
    e -= i;
  }
  return widths;
}

std::vector<int> water_fill(const std::vector<std::vector<double>>& loss, int lo, double lambda) {
  std::vector<int> widths;
  for (const auto& l : loss) {
    int best = 0;
    for (int i = 1; i < int(l.size()); ++i) {
      if (l[size_t(i)] + lambda * i < l[size_t(best)] + lambda * best) best = i;
    }
    widths.push_back(lo + best);
  }
  return widths;
}

}  // namespace vq::kv
