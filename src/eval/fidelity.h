// What a cache method does to one layer's real activations: reconstruction of keys and values,
// and what that costs attention (q.k scores, attention weights, the attention output), measured
// against the activations captured from an fp16 run of the model; per method, the mean over
// layers and the worst layer.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "src/engine/model.h"
#include "src/eval/seed_sweep.h"
#include "veloxquant/kv/cache.h"
#include "veloxquant/kv/method.h"

namespace vq::eval {

// One layer's activations as the model produced them ([n][heads][head_dim], floats).
struct LayerCapture {
  kv::LayerConfig config;
  int n_q_heads = 0;
  float scale = 1.0f;
  std::vector<float> k, v, q;
  std::vector<int64_t> q_pos;
  int64_t n_tokens() const;
};

struct LayerFidelity {
  double key_rel_mse = 0, key_cos = 0, value_rel_mse = 0, value_cos = 0;
  double score_rel_err = 0;  // ||s - s'|| / ||s|| over every (query row, visible key)
  double out_rel_err = 0;    // ||o - o'|| / ||o||, the method's fused attention against fp16
  double mass_moved = 0;     // mean over query rows of half the L1 distance between softmaxes
};

// Stores the capture with `method`, then compares: keys and values over every token kept, and
// attention for the last `n_queries` query tokens.
LayerFidelity measure_layer(const kv::Method& method, const LayerCapture& cap, int n_queries);

// A CacheObserver that records every layer's keys, values and queries.
class CaptureObserver final : public kv::CacheObserver {
 public:
  explicit CaptureObserver(const std::vector<kv::LayerConfig>& layout);
  void on_append(int layer, const float* k, const float* v, int n, int64_t pos0) override;
  void on_attend(int layer, const float* q, int n_q, int n_q_heads, const int64_t* q_pos, float scale) override;
  const std::vector<LayerCapture>& layers() const { return layers_; }
  std::vector<LayerCapture> take() { return std::move(layers_); }

 private:
  std::vector<LayerCapture> layers_;
};

// Runs `tokens` through the model with an fp16 cache and returns every layer's capture.
std::vector<LayerCapture> capture_layers(const engine::Model& model, const std::vector<int32_t>& tokens);

// One method over every layer: each layer's metrics, their mean (each metric summed as
// metric / layers, in layer order), the layer with the largest out_rel_err and the one with the
// largest key_rel_mse (each the first of equals; layer 0 with 0 if none is above 0).
struct MethodFidelity {
  std::vector<LayerFidelity> layers;
  LayerFidelity mean;
  double worst_out_rel_err = 0;
  int worst_layer = 0;
  double worst_key_rel_mse = 0;
  int worst_key_layer = 0;
};
MethodFidelity measure_method(const kv::Method& method, const std::vector<LayerCapture>& caps, int n_queries);
// The same summary of per-layer metrics (as measure_method gives it).
MethodFidelity summarize_layers(std::vector<LayerFidelity> layers);

// One spec over the seeds of a sweep (seed_variants): `mean` holds per layer the mean over seeds
// of each metric, summarized as measure_method does; `worst_key` is the spread over seeds of
// each seed's worst-layer key_rel_mse.
struct SeedFidelity {
  std::vector<MethodFidelity> runs;
  MethodFidelity mean;
  Spread worst_key;
};
// runs: one per seed, in seed order, over the same layers (not empty).
SeedFidelity summarize_seeds(const std::vector<MethodFidelity>& runs);

}  // namespace vq::eval
