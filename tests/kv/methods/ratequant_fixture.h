// What RateQuant's tests share: the base's calibration at each candidate width, learned on
// synthetic tokens as `calibrate` learns them on a model's samples.
#pragma once

#include <memory>
#include <vector>

#include "src/kv/calib/calibrate.h"
#include "src/kv/methods/ratequant/ratequant.h"
#include "src/kv/rope_table.h"
#include "tests/kv/calibrated_fixture.h"
#include "tests/kv/codec_harness.h"

namespace vq::kv::testing {

// KVQuant at each of m's widths, learned on the same synthetic tokens (one layer's calibration
// repeated over L layers).
inline std::vector<std::shared_ptr<const Calibration>> kvquant_at_each_width(const Method& m, int L, int d) {
  std::vector<std::shared_ptr<const Calibration>> out;
  auto k = make_data(Data::kOutliers, 1024, d, 7), v = make_data(Data::kOutliers, 1024, d, 8);
  const RopeTable table(d, neox());
  for (int t = 0; t < 1024; ++t) table.rotate(k.data() + size_t(t) * d, t, false);
  for (int w : ratequant_widths(m)) {
    out.push_back(calibrate_on_synthetic(ratequant_base_method(m, w), LayerConfig(1, d, 0, 0, neox()), k.data(), v.data(),
                                         1024, L, "test"));
  }
  return out;
}

}  // namespace vq::kv::testing
