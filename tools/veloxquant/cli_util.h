// Small helpers shared by the subcommands: timing statistics and table output.
#pragma once

#include <string>
#include <vector>

namespace vq::cli {

struct Stats {
  double median = 0, min = 0, max = 0;
};
Stats stats_of(std::vector<double> v);

// Prints rows as an aligned text table; the first row is the header.
void print_table(const std::vector<std::vector<std::string>>& rows);

}  // namespace vq::cli
