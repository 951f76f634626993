// Gemma 3: sliding-window (local) and global layers with a RoPE base each, per-head q/k RMSNorm,
// a norm before and after each sub-block, GELU-tanh gated FFN, embeddings scaled by
// sqrt(n_embd), output tied to the embeddings. ref: llama.cpp src/models/gemma3.cpp.
#include "src/engine/model.h"

namespace vq::engine {
namespace {

class Gemma3 final : public Model {
 public:
  explicit Gemma3(std::unique_ptr<GgufFile> f) : Model(std::move(f)) {
    load_common();
    require_layers({.qk_norm = true, .post_norms = true});
  }

  void run_layers(int n, const CacheBatch& batch, Activations& a) const override {
    for (int l = 0; l < cfg_.n_layer; ++l) sandwich_norm_layer(cfg_, layers_[size_t(l)], l, batch, n, a);
  }
};

}  // namespace

std::unique_ptr<Model> make_gemma3(std::unique_ptr<GgufFile> f) { return std::make_unique<Gemma3>(std::move(f)); }

}  // namespace vq::engine
