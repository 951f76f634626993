// RateQuant's sensitivity probe: for every (layer, side, candidate width), and with unit=head every
// KV head of them, the model runs over
// the calibration chunks with only that unit compressed by the base method at that width
// (everything else fp16), and the mean KL of its next-token distributions against the probe's
// reference is recorded: every unit fp16, with the base's fp16 sinks and windows
// (kv::ratequant_probe_reference). Scored positions are the second half of each chunk, as perplexity scores.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "src/engine/model.h"
#include "veloxquant/kv/calibration.h"
#include "src/kv/methods/ratequant/ratequant.h"
#include "veloxquant/kv/method.h"

namespace vq::eval {

// probe[layer][side][h * W + i]: mean KL (nats per scored token) with that unit alone at width i of
// kv::ratequant_widths(method) (h: the KV head with unit=head, else 0). base_calibs[i]: the base's
// calibration at width i, for a base that learns per width (kv::ratequant_learns_per_width), else
// empty. progress(runs done, runs in all), if set, is called after each probe run.
kv::RateProbe run_rate_probe(const engine::Model& model, const kv::Method& method,
                             const std::vector<std::vector<int32_t>>& chunks,
                             const std::vector<std::shared_ptr<const kv::Calibration>>& base_calibs = {},
                             const std::function<void(int64_t, int64_t)>& progress = nullptr);

}  // namespace vq::eval
