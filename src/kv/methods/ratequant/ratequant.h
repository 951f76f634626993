// RateQuant's pieces beyond the method itself, for its probe (run by `veloxquant calibrate`,
// which owns the model) and for tests: the candidate widths, the exact budget, the probe's
// one-unit methods, and the calibration that holds a probe table and its allocation.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "veloxquant/kv/calibration.h"
#include "veloxquant/kv/method.h"

namespace vq::kv {

// A probe table: probe[layer][side] holds the mean KL with that one unit compressed at each width of
// ratequant_widths, [head][width] with unit=head (one head per layer otherwise).
using RateProbe = std::vector<std::array<std::vector<double>, 2>>;

// Whether `m` is a ratequant spec.
bool is_ratequant(const Method& m);
// Its candidate widths lo, lo+1, ..., hi. Throws vq::Error (kUsage) when m is not ratequant.
std::vector<int> ratequant_widths(const Method& m);
// Whether m allocates per KV head (unit=head) rather than per layer.
bool ratequant_per_head(const Method& m);
// The units per layer and side on a model of n_kv_heads KV heads: one, or with unit=head one per
// KV head (probe rows hold [head][width] over these).
int ratequant_unit_heads(const Method& m, int n_kv_heads);
// Its units on a model of n_layers layers of n_kv_heads KV heads: (layer, side), or with unit=head
// (layer, side, KV head).
int ratequant_units(const Method& m, int n_layers, int n_kv_heads);
// The budget over `units` units (ratequant_units), as a total of widths: avg * units, refused (kUsage,
// one line) when that is not a whole number of bits; with ctx set, the largest total whose bits
// everything counted at ctx tokens (for heads of head_dim) stay within avg, refused when even all
// units at lo spend more.
int ratequant_budget(const Method& m, int units, int head_dim = 0);

// Whether m's base learns a datatype per width (kvquant): then the probe and the allocation need
// the base's calibration at every candidate width.
bool ratequant_learns_per_width(const Method& m);
// m's base method at `bits`, every other parameter at its default (what `calibrate` learns per
// width when ratequant_learns_per_width(m)).
Method ratequant_base_method(const Method& m, int bits);

// The probe's method: m's base method at `bits` on the keys (side 0) or values (side 1) of
// `layer` of an n_layers model (with unit=head, of its KV head `head` only), and fp16 everywhere
// else (exactly what an fp16 cache holds). A base that learns per width takes `base_calib`, its
// calibration at `bits`.
Method ratequant_probe_method(const Method& m, int n_layers, int layer, int side, int bits,
                              std::shared_ptr<const Calibration> base_calib = nullptr, int head = -1);

// The probe's reference: every unit fp16, with the base's fp16 sinks and windows, exactly what
// the probe's cache holds outside its one unit. (Against a plain fp16 cache, the sinks and
// windows alone, which hold the same fp16 numbers and change only the order of float sums, move
// the next-token KL of Gemma 3 270M Q4_K_M by a few 1e-3: fp16:sink=1 against fp16 is 0.004 on
// 1024 tokens, as large as a 4-bit KVQuant unit's own effect.)
Method ratequant_probe_reference(const Method& m, int n_layers);

// probe[layer][side][h * W + i]: the probe's mean KL with that unit alone at width widths[i] (h = 0
// unless unit=head). Returns the calibration holding the table (as float, the allocation is
// computed from the stored values so that a file's allocation follows from its own table) and the
// exact allocation; for a base that learns per width, also each unit's datatypes at its allocated
// width, from base_calibs[i] (the base's calibration at widths[i]).
Calibration ratequant_calibration(const Method& m, const ModelIdentity& model, const std::string& source,
                                  int64_t tokens, const RateProbe& probe,
                                  const std::vector<std::shared_ptr<const Calibration>>& base_calibs = {});

// For benchmarks on synthetic data, with no model to probe: the budget spread as evenly as whole
// widths allow over its units (both sides and all depths and heads get their share), a
// probe table of zeros, and the base's datatypes from base_calibs as above.
Calibration ratequant_even_calibration(const Method& m, const ModelIdentity& model, const std::string& source,
                                       const std::vector<std::shared_ptr<const Calibration>>& base_calibs = {});

}  // namespace vq::kv
