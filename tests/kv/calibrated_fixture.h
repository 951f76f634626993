// The fixture of the calibrated methods' tests (KVQuant, VecInfer, SpectralQuant, CommVQ): a
// method calibrated on outlier-heavy synthetic tokens of one layer with one KV head, the keys
// rotated by RoPE at their positions as a model's keys are.
#pragma once

#include <memory>
#include <string>
#include <vector>

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
  CodecContext ctx() const {
    return CodecContext{calib->layers[0].head_dim, 0, neox(), &calib->layers[0]};
  }
};

inline Calibrated calibrated_on_synthetic(const std::string& spec, int d, int n_tokens, RopeSpec rope = neox()) {
  const Method m = parse_method(spec);
  auto k = make_data(Data::kOutliers, n_tokens, d, 7), v = make_data(Data::kOutliers, n_tokens, d, 8);
  const RopeTable table(d, rope);
  for (int t = 0; t < n_tokens; ++t) table.rotate(k.data() + size_t(t) * d, t, false);
  auto c = calibrate_on_synthetic(m, LayerConfig(1, d, 0, 0, rope), k.data(), v.data(), n_tokens, 1, "test");
  return {m.with_calibration(c), c};
}

// Every check of codec_harness.h that a calibrated codec must pass, at each head dim: fused
// scores and accumulation equal the reference on every kind of data, the block bytes match the
// formula, and one-token encoding matches whole blocks. Seeds start at seed_base.
inline void check_calibrated_codec(const std::string& spec, const std::vector<int>& dims, uint64_t seed_base,
                                   int calib_tokens = 1024, const ScoreSlack& score_slack = nullptr,
                                   double rel_tol = 1e-5, double acc_rel_tol = -1) {
  for (int d : dims) {
    SCOPED_TRACE(spec + " at head_dim " + std::to_string(d));
    const Calibrated c = calibrated_on_synthetic(spec, d, calib_tokens);
    for (Data kind : {Data::kGaussian, Data::kOutliers, Data::kZeros, Data::kConstant, Data::kHuge}) {
      check_fused_equals_reference(c.method, c.ctx(), kind, seed_base + uint64_t(d) + uint64_t(kind), 80, 5,
                                   rel_tol, acc_rel_tol, score_slack);
    }
    check_block_bytes_match_formula(c.method, c.ctx());
    check_single_token_encode(c.method, c.ctx());
  }
}

}  // namespace vq::kv::testing
