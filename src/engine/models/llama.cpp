// Llama (Llama 2 and 3.x, Mistral, and other files that say "llama"): RMSNorm pre-norm layers,
// grouped-query attention with NORM-style RoPE (Llama 3's rope_freqs frequency factors where the
// file has them), SwiGLU FFN, optional QKV and output biases, tied or separate output.
// Qwen 2 and 2.5 are the same graph with Q, K and V biases and NEOX-style RoPE, which the tensors
// and the hyperparameter table carry. ref: llama.cpp src/models/llama.cpp, src/models/qwen2.cpp.
#include "src/engine/model.h"

namespace vq::engine {
namespace {

class Llama final : public Model {
 public:
  explicit Llama(std::unique_ptr<GgufFile> f) : Model(std::move(f)) {
    load_common();
    require_layers({});
  }

  void run_layers(int n, const CacheBatch& batch, Activations& a) const override {
    for (int l = 0; l < cfg_.n_layer; ++l) pre_norm_layer(cfg_, layers_[size_t(l)], l, batch, n, a);
  }
};

}  // namespace

std::unique_ptr<Model> make_llama(std::unique_ptr<GgufFile> f) { return std::make_unique<Llama>(std::move(f)); }
std::unique_ptr<Model> make_qwen2(std::unique_ptr<GgufFile> f) { return std::make_unique<Llama>(std::move(f)); }

}  // namespace vq::engine
