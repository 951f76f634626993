// Qwen 3 (dense): Qwen 2's layer without QKV biases and with a per-head RMSNorm of q and k before
// RoPE. ref: llama.cpp src/models/qwen3.cpp (llm_build_qwen3).
#include "src/engine/model.h"

namespace vq::engine {
namespace {

class Qwen3 final : public Model {
 public:
  explicit Qwen3(std::unique_ptr<GgufFile> f) : Model(std::move(f)) {
    load_common();
    require_layers({.qk_norm = true});
  }

  void run_layers(int n, const CacheBatch& batch, Activations& a) const override {
    for (int l = 0; l < cfg_.n_layer; ++l) pre_norm_layer(cfg_, layers_[size_t(l)], l, batch, n, a);
  }
};

}  // namespace

std::unique_ptr<Model> make_qwen3(std::unique_ptr<GgufFile> f) { return std::make_unique<Qwen3>(std::move(f)); }

}  // namespace vq::engine
