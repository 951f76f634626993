// Seed sweeps: a method that draws a random rotation or sketch from its `seed` parameter is run
// with several consecutive seeds, so that a figure can be reported as the mean over draws with
// its spread instead of the luck of one draw. Which specs draw is read from the registry's
// parameter tables: a side draws when its method has a `seed` parameter and, if it also has a
// `rot` switch (the baselines' optional rotation), the switch is on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vq::eval {

// The most seeds a sweep takes (--seeds).
inline constexpr int kMaxSeeds = 1000;

// One run of a sweep: its canonical spec, and the seed of its first drawing side (the key
// side's for `k=SPEC,v=SPEC` when both draw); -1 when the spec draws nothing.
struct SeedVariant {
  std::string spec;
  int64_t seed = -1;
};

// The runs of an n_seeds sweep of `spec`. A spec that draws gives n_seeds runs: in run i every
// drawing side has the seed s + i, s being that side's own seed (explicit in the spec, else the
// method's default), so run 0 is the spec itself. A spec that draws nothing gives one run.
// Refuses (vq::Error, kUsage) a spec that does not parse, n_seeds outside [1, kMaxSeeds], and a
// sweep whose last seed is above the parameter's range.
std::vector<SeedVariant> seed_variants(const std::string& spec, int n_seeds);

// The smallest value, the mean (summed in order) and the largest value of v (not empty).
struct Spread {
  double min = 0, mean = 0, max = 0;
};
Spread spread_of(const std::vector<double>& v);

}  // namespace vq::eval
