// Calibration from activations: collecting a model's keys, values and sensitivities while it
// runs on calibration text (SampleCollector, a CacheObserver), and letting a method learn from
// them (calibrate).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "veloxquant/kv/cache.h"
#include "veloxquant/kv/calibration.h"
#include "veloxquant/kv/method.h"

namespace vq::kv {

// Each layer's calibration, learned by the method's key side and value side.
Calibration calibrate(const Method& method, const std::vector<LayerSamples>& layers, const ModelIdentity& model,
                      const std::string& source);

// Samples of keys (as the cache receives them, after RoPE: turned back here) and values at
// positions pos0.., with every sensitivity weight 1 (for synthetic data and tests).
LayerSamples unweighted_samples(const LayerConfig& config, const float* keys, const float* values, int64_t n,
                                int64_t pos0);

// A method calibrated on synthetic data rather than a model (benchmarks and tests): n tokens of
// keys (after RoPE, as `config` describes) and values at positions 0.., every weight 1, learned
// once and the same calibration given to each of n_layers layers. `tool` names the caller in
// the calibration's model identity and source. RateQuant, with no model to probe, gets its
// budget spread evenly over the units (ratequant_even_calibration).
std::shared_ptr<const Calibration> calibrate_on_synthetic(const Method& method, const LayerConfig& config,
                                                          const float* keys, const float* values, int64_t n,
                                                          int n_layers, const std::string& tool);

// Records what a model hands its cache during calibration: keys turned back to their pre-RoPE
// form, values, and the sensitivities of LayerSamples. Queries meet the keys of their own chunk
// (a chunk starts whenever a layer is appended at position 0), causally and inside the layer's
// sliding window. Results do not depend on the thread count.
class SampleCollector final : public CacheObserver {
 public:
  explicit SampleCollector(const std::vector<LayerConfig>& layout);
  ~SampleCollector() override;
  void on_append(int layer, const float* k, const float* v, int n, int64_t pos0) override;
  void on_attend(int layer, const float* q, int n_q, int n_q_heads, const int64_t* q_pos, float scale) override;
  // The samples, with the key weights normalized to means.
  std::vector<LayerSamples> take();

 private:
  struct Layer;
  std::vector<Layer> layers_;
};

}  // namespace vq::kv
