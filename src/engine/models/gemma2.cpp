// Gemma 2: Gemma's sandwich-norm layers alternating sliding-window and global attention (the
// sliding window every other layer), attention scores soft-capped (c * tanh(s / c)) before the
// softmax and the output logits soft-capped too, GELU-tanh gated FFN, embeddings scaled by
// sqrt(n_embd), output tied to the embeddings. ref: llama.cpp src/models/gemma2-iswa.cpp.
#include "src/engine/model.h"

namespace vq::engine {
namespace {

class Gemma2 final : public Model {
 public:
  explicit Gemma2(std::unique_ptr<GgufFile> f) : Model(std::move(f)) {
    load_common();
    require_layers({.post_norms = true});
  }

  void run_layers(int n, const CacheBatch& batch, Activations& a) const override {
    for (int l = 0; l < cfg_.n_layer; ++l) sandwich_norm_layer(cfg_, layers_[size_t(l)], l, batch, n, a);
  }
};

}  // namespace

std::unique_ptr<Model> make_gemma2(std::unique_ptr<GgufFile> f) { return std::make_unique<Gemma2>(std::move(f)); }

}  // namespace vq::engine
