// RateQuant's bit allocation: given, for each unit (a layer's keys or its values), the loss its
// sensitivity probe measured at each candidate width lo, lo+1, ..., choose one width per unit so
// that the widths sum to a budget exactly and the summed loss is least.
//
// Reverse water-filling is the Lagrangian form of this problem: at water level lambda every unit
// takes the width that minimizes loss(b) + lambda * b, and raising lambda drains bits from the
// units whose loss rises least. When every unit's loss is convex in b, each budget that some
// lambda meets is met optimally that way; but with discrete widths a budget can fall between two
// levels (several units change width at the same lambda), and probe losses measured on a little
// text need not be convex. So the allocation itself is an exact dynamic program over units and
// spent bits (units x budget x widths: 36 x 72 x 3 for Gemma 3 270M), and water-filling is kept
// for what it explains (tests hold the two to agree where the Lagrangian meets the budget).
#pragma once

#include <vector>

namespace vq::kv {

// loss[u][i]: the loss of unit u at width lo + i (every unit has the same number of widths).
// Returns one width per unit, summing to `total`, minimizing the summed loss; ties go to the
// allocation that gives bits to earlier units. Throws vq::Error (kUsage) when `total` lies outside
// [lo * units, (lo + widths - 1) * units].
std::vector<int> allocate_bits(const std::vector<std::vector<double>>& loss, int lo, int total);

// Water level lambda: each unit's width minimizing loss(b) + lambda * b (ties to fewer bits).
std::vector<int> water_fill(const std::vector<std::vector<double>>& loss, int lo, double lambda);

}  // namespace vq::kv
