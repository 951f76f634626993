// Phi-3 (and Phi-4, which llama.cpp also runs as "phi3"): Llama's pre-norm layer with fused
// tensors, one QKV projection (attn_qkv) and one gate-and-up projection (ffn_up, gate rows
// first), and NEOX-style RoPE. Files with LongRoPE factors (the 128k-context variants) are
// refused: their factors depend on the context size a session asks for.
// ref: llama.cpp src/models/phi3.cpp (llm_build_phi3).
#include <fmt/format.h>

#include "src/engine/model.h"
#include "veloxquant/error.h"

namespace vq::engine {
namespace {

class Phi3 final : public Model {
 public:
  explicit Phi3(std::unique_ptr<GgufFile> f) : Model(std::move(f)) {
    const GgufFile& g = *file_;
    VQ_CHECK_DATA(!g.find_tensor("rope_factors_long.weight") && !g.find_tensor("blk.0.rope_factors_long.weight"),
                  fmt::format("{}: phi3 files with LongRoPE factors (128k-context variants) are not supported",
                              g.path()));
    load_common();
    require_layers({.separate_gate = false});
  }

  void run_layers(int n, const CacheBatch& batch, Activations& a) const override {
    for (int l = 0; l < cfg_.n_layer; ++l) pre_norm_layer(cfg_, layers_[size_t(l)], l, batch, n, a);
  }
};

}  // namespace

std::unique_ptr<Model> make_phi3(std::unique_ptr<GgufFile> f) { return std::make_unique<Phi3>(std::move(f)); }

}  // namespace vq::engine
