// Median/min/max and a plain aligned table.
#include "tools/veloxquant/cli_util.h"

#include <fmt/format.h>

#include <algorithm>

namespace vq::cli {

Stats stats_of(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  s.min = v.front();
  s.max = v.back();
  return s;
}

void print_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& r : rows) {
    if (width.size() < r.size()) width.resize(r.size(), 0);
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  for (size_t k = 0; k < rows.size(); ++k) {
    std::string line;
    for (size_t i = 0; i < rows[k].size(); ++i) {
      if (i == 0) {
        line += fmt::format("{:<{}}", rows[k][i], width[i]);
      } else {
        line += fmt::format("  {:>{}}", rows[k][i], width[i]);
      }
    }
    fmt::print("{}\n", line);
    if (k == 0) {
      size_t total = 0;
      for (size_t i = 0; i < width.size(); ++i) total += width[i] + (i ? 2 : 0);
      fmt::print("{}\n", std::string(total, '-'));
    }
  }
}

}  // namespace vq::cli
