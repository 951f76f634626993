// The building blocks every architecture's forward pass is composed of (as llama.cpp's
// build_norm / build_qkv / build_attn / build_ffn): the weights of a decoder layer, the
// activation buffers a forward pass reuses, and the steps over them. Attention goes through the
// KV cache's contract only (append, then attend); the model never touches cache storage.
#pragma once

#include <cstdint>
#include <vector>

#include "src/core/aligned_buffer.h"

#include "src/engine/hparams.h"
#include "src/engine/matmul.h"
#include "veloxquant/kv/cache.h"

namespace vq::engine {

// One decoder layer's tensors; an absent optional tensor is null (vectors) or has no data
// (matrices). wqkv (fused Q, K, V rows, Phi-3) replaces wq/wk/wv; gate_up (fused gate then up
// rows, Phi-3) replaces gate/up.
struct LayerWeights {
  const float* attn_norm = nullptr;
  const float* attn_post_norm = nullptr;  // Gemma: norm of the attention output
  const float* ffn_norm = nullptr;
  const float* ffn_post_norm = nullptr;   // Gemma: norm of the FFN output
  const float* q_norm = nullptr;          // per-head RMSNorm of q and k (Gemma 3, Qwen 3)
  const float* k_norm = nullptr;
  Weight wqkv, wq, wk, wv, wo;
  const float *bqkv = nullptr, *bq = nullptr, *bk = nullptr, *bv = nullptr, *bo = nullptr;
  Weight gate_up, gate, up, down;
};

// Activation buffers of a forward pass over n tokens, grown to the largest batch seen and kept
// across calls (a decode step would otherwise allocate and free a dozen vectors per token).
// Shapes: x, h, o, sa [n][n_embd]; q, att [n][n_head * head_dim]; k, v [n][n_head_kv * head_dim];
// qkv [n][(n_head + 2 n_head_kv) * head_dim]; g, u [n][n_ff] (g is [n][2 n_ff] for a fused gate_up).
// attend: the scratch of the cache's attention, kept across layers and steps likewise.
struct Activations {
  // Aligned: the weight kernels stream rows against these, a cache line at a time.
  AlignedVector<float> x, h, o, sa, q, k, v, att, qkv, g, u, rows;
  std::vector<int64_t> pos;
  kv::AttendWorkspace attend;
  void reserve(const ModelConfig& c, int n);
};

// The sequences of one forward pass: tokens [begin, begin + n) of the pass belong to `cache`, at
// positions pos0 .. pos0 + n - 1. Slices lie in order and cover the pass. Each slice's keys and
// values enter its own cache and its queries attend to that cache only; every other step works on
// each token's row alone, so a token's result does not depend on the other slices.
struct CacheSlice {
  kv::KvCache* cache = nullptr;
  int begin = 0, n = 0;
  int64_t pos0 = 0;
};
using CacheBatch = std::vector<CacheSlice>;

// x[i] = embedding row of tokens[i] times c.embd_scale, and a.pos from the slices; refuses ids
// outside the vocabulary.
void embed_tokens(const ModelConfig& c, const Weight& embd, const int32_t* tokens, const CacheBatch& batch, int n,
                  Activations& a);

// Self-attention of layer l over its cache: in a.h (normed input), out a.o ([n][n_embd]).
// Q, K, V projections (fused or not, with their biases), per-head q/k norms, RoPE of the layer's
// kind, the attention scale, then the cache takes the keys and values and attends.
void attention(const ModelConfig& c, const LayerWeights& L, int l, const CacheBatch& batch, int n, Activations& a);

// Gated feed-forward network: in a.h, out a.o. act(gate) * up, then down.
void feed_forward(const ModelConfig& c, const LayerWeights& L, int n, Activations& a);

// y[i] += x[i], i < n.
void add_rows(const float* x, float* y, int64_t n);

// A pre-norm decoder layer on a.x (Llama, Qwen, Phi-3):
//   x += attention(norm(x)); x += ffn(norm(x)).
void pre_norm_layer(const ModelConfig& c, const LayerWeights& L, int l, const CacheBatch& batch, int n,
                    Activations& a);

// Gemma's layer, with a norm before and after each sub-block:
//   sa = post_norm(attention(norm(x))) + x; x = post_norm(ffn(norm(sa))) + sa.
void sandwich_norm_layer(const ModelConfig& c, const LayerWeights& L, int l, const CacheBatch& batch, int n,
                         Activations& a);

// Final norm and output projection of the rows of a.x whose want flag is set, in order, to logits
// (with the final logit soft-cap where the model has one). want or logits null: nothing.
void output_logits(const ModelConfig& c, const float* out_norm, const Weight& out, int n, const uint8_t* want,
                   Activations& a, float* logits);

}  // namespace vq::engine
