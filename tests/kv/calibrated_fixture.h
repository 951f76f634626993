// The fixture of the calibrated methods' tests (KVQuant, VecInfer): a method calibrated on
// outlier-heavy synthetic tokens of one layer with one KV head, the keys rotated by RoPE at their
// positions as a model's keys are.
#pragma once

#include <memory>
#include <string>

#include "src/kv/calib/calibrate.h"
#include "src/kv/rope_table.h"
#include "tests/kv/codec_harness.h"
#include "veloxquant/kv/cache.h"
#include "veloxquant/kv/calibration.h"

namespace vq::kv::testing {

inline RopeSpec neox() {
  RopeSpec r;
  r.style = RopeSpec::Style::kNeox;
  return r;
}

struct Calibrated {
  Method method;
  std::shared_ptr<const Calibration> calib;
  CodecContext ctx(int seed = 3) const {
    return CodecContext{calib->layers[0].head_dim, 0, uint64_t(seed), neox(), &calib->layers[0]};
  }
};

inline Calibrated calibrated_on_synthetic(const std::string& spec, int d, int n_tokens, RopeSpec rope = neox()) {
  const Method m = parse_method(spec);
  auto k = make_data(Data::kOutliers, n_tokens, d, 7), v = make_data(Data::kOutliers, n_tokens, d, 8);
  const RopeTable table(d, rope);
  for (int t = 0; t < n_tokens; ++t) table.rotate(k.data() + size_t(t) * d, t, false);
  const LayerConfig cfg(1, d, 0, 0, rope);
  auto c = std::make_shared<Calibration>(calibrate(m, {unweighted_samples(cfg, k.data(), v.data(), n_tokens, 0)},
                                                   ModelIdentity{"test", "none", 0, 1, 1, d}, "synthetic"));
  return {m.with_calibration(c), c};
}

}  // namespace vq::kv::testing
