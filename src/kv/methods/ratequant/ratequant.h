// RateQuant's pieces beyond the method itself, for its probe (run by `veloxquant calibrate`,
// which owns the model) and for tests: the candidate widths, the exact budget, the probe's
// one-unit methods, and the calibration that holds a probe table and its allocation.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "veloxquant/kv/calibration.h"
#include "veloxquant/kv/method.h"

namespace vq::kv {

// Whether `m` is a ratequant spec.
bool is_ratequant(const Method& m);
// Its candidate widths lo, lo+1, ..., hi. Throws vq::Error (kUsage) when m is not ratequant.
std::vector<int> ratequant_widths(const Method& m);
// The budget over `units` (layer, side) units, avg * units bits; refused (kUsage, one line) when
// that is not a whole number of bits.
int ratequant_budget(const Method& m, int units);

// The probe's method: m's base method at `bits` on the keys (side 0) or values (side 1) of
// `layer` of an n_layers model, and fp16 everywhere else (exactly what an fp16 cache holds).
Method ratequant_probe_method(const Method& m, int n_layers, int layer, int side, int bits);

// probe[layer][side][i]: the probe's mean KL with that unit alone at width widths[i]. Returns the
// calibration holding the table (as float, the allocation is computed from the stored values so
// that a file's allocation follows from its own table) and the exact allocation.
Calibration ratequant_calibration(const Method& m, const ModelIdentity& model, const std::string& source,
                                  int64_t tokens, const std::vector<std::array<std::vector<double>, 2>>& probe);

}  // namespace vq::kv
