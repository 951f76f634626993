// Building blocks of the forward passes. The arithmetic (order of operations included) follows
// ggml's CPU reference so that activations track llama.cpp's closely.
#include "src/engine/blocks.h"

#include <fmt/format.h>

#include <cmath>

#include "src/core/threads.h"
#include "src/engine/ops.h"
#include "veloxquant/error.h"

namespace vq::engine {
namespace {

template <typename T, typename A>
T* grown(std::vector<T, A>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

void add_bias(float* y, const float* b, int n, int64_t len) {
  if (!b) return;
  for (int i = 0; i < n; ++i) {
    for (int64_t j = 0; j < len; ++j) y[i * len + j] += b[j];
  }
}

// The columns [col0, col0 + len) of each of n rows of width `width`, to dst ([n][len]).
void copy_columns(const float* src, int n, int64_t width, int64_t col0, int64_t len, float* dst) {
  for (int i = 0; i < n; ++i) {
    const float* s = src + i * width + col0;
    std::copy(s, s + len, dst + i * len);
  }
}

}  // namespace

void Activations::reserve(const ModelConfig& c, int n) {
  const size_t E = size_t(n) * c.n_embd, F = size_t(n) * c.n_ff;
  const size_t QD = size_t(n) * c.n_head * c.head_dim, KD = size_t(n) * c.n_head_kv * c.head_dim;
  for (auto* v : {&x, &h, &o, &sa}) grown(*v, E);
  grown(q, QD);
  grown(att, QD);
  grown(k, KD);
  grown(v, KD);
  grown(g, 2 * F);
  grown(u, F);
  grown(pos, size_t(n));
}

void embed_tokens(const ModelConfig& c, const Weight& embd, const int32_t* tokens, const CacheBatch& batch, int n,
                  Activations& a) {
  for (int i = 0; i < n; ++i) {
    VQ_CHECK(tokens[i] >= 0 && tokens[i] < c.n_vocab, fmt::format("token id {} is outside the vocabulary", tokens[i]));
  }
  for (const CacheSlice& s : batch) {
    for (int i = 0; i < s.n; ++i) a.pos[size_t(s.begin + i)] = s.pos0 + i;
  }
  const int64_t E = c.n_embd;
  float* x = a.x.data();
  parallel_for(n, [&](int64_t i) {
    weight_row(embd, tokens[i], x + i * E);
    if (c.embd_scale != 1.0f) {
      for (int64_t j = 0; j < E; ++j) x[i * E + j] *= c.embd_scale;
    }
  });
}

void attention(const ModelConfig& c, const LayerWeights& L, int l, const CacheBatch& batch, int n, Activations& a) {
  const int64_t D = c.head_dim, QD = int64_t(c.n_head) * D, KD = int64_t(c.n_head_kv) * D;
  float *q = a.q.data(), *k = a.k.data(), *v = a.v.data();
  if (L.wqkv.data) {
    float* qkv = grown(a.qkv, size_t(n) * size_t(QD + 2 * KD));
    matmul(L.wqkv, a.h.data(), n, qkv);
    add_bias(qkv, L.bqkv, n, QD + 2 * KD);
    copy_columns(qkv, n, QD + 2 * KD, 0, QD, q);
    copy_columns(qkv, n, QD + 2 * KD, QD, KD, k);
    copy_columns(qkv, n, QD + 2 * KD, QD + KD, KD, v);
  } else {
    matmul_shared({{&L.wq, q}, {&L.wk, k}, {&L.wv, v}}, a.h.data(), n);
    add_bias(q, L.bq, n, QD);
    add_bias(k, L.bk, n, KD);
    add_bias(v, L.bv, n, KD);
  }
  const bool swa = c.swa_layer[size_t(l)];
  const float base = swa ? c.rope_base_swa : c.rope_base;
  const float fscale = swa ? c.rope_scale_swa : c.rope_scale;
  const float* factors = c.rope_freq_factors.empty() ? nullptr : c.rope_freq_factors.data();
  const auto rope = c.rope_neox ? rope_neox : rope_norm;
  parallel_for(n, [&](int64_t i) {
    float* qi = q + i * QD;
    float* ki = k + i * KD;
    if (L.q_norm) rms_norm(qi, L.q_norm, c.n_head, D, c.rms_eps, qi);
    if (L.k_norm) rms_norm(ki, L.k_norm, c.n_head_kv, D, c.rms_eps, ki);
    rope(qi, c.n_head, int(D), a.pos[size_t(i)], base, fscale, factors);
    rope(ki, c.n_head_kv, int(D), a.pos[size_t(i)], base, fscale, factors);
    for (int64_t j = 0; j < QD; ++j) qi[j] *= c.attn_scale;
  });
  for (const CacheSlice& s : batch) {
    kv::LayerCache& lc = s.cache->layer(size_t(l));
    VQ_CHECK(lc.n_tokens() == s.pos0, "forward: the cache does not end where this batch starts");
    lc.append(k + s.begin * KD, v + s.begin * KD, s.n);
    lc.attend(q + s.begin * QD, s.n, c.n_head, a.pos.data() + s.begin, 1.0f, a.att.data() + s.begin * QD, a.attend);
  }
  matmul(L.wo, a.att.data(), n, a.o.data());
  add_bias(a.o.data(), L.bo, n, c.n_embd);
}

void feed_forward(const ModelConfig& c, const LayerWeights& L, int n, Activations& a) {
  const int64_t F = c.n_ff;
  const auto act = c.ffn_act == FfnActivation::kSilu ? silu_mul : gelu_mul;
  float *g = a.g.data(), *u = a.u.data();
  if (L.gate_up.data) {
    matmul(L.gate_up, a.h.data(), n, g);
    parallel_for(n, [&](int64_t i) { act(g + i * 2 * F, g + i * 2 * F + F, F, u + i * F); });
    matmul(L.down, u, n, a.o.data());
    return;
  }
  matmul_shared({{&L.gate, g}, {&L.up, u}}, a.h.data(), n);
  parallel_for(n, [&](int64_t i) { act(g + i * F, u + i * F, F, g + i * F); });
  matmul(L.down, g, n, a.o.data());
}

void add_rows(const float* x, float* y, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] += x[j];
}

void pre_norm_layer(const ModelConfig& c, const LayerWeights& L, int l, const CacheBatch& batch, int n,
                    Activations& a) {
  const int64_t E = c.n_embd;
  rms_norm(a.x.data(), L.attn_norm, n, E, c.rms_eps, a.h.data());
  attention(c, L, l, batch, n, a);
  add_rows(a.o.data(), a.x.data(), n * E);
  rms_norm(a.x.data(), L.ffn_norm, n, E, c.rms_eps, a.h.data());
  feed_forward(c, L, n, a);
  add_rows(a.o.data(), a.x.data(), n * E);
}

void sandwich_norm_layer(const ModelConfig& c, const LayerWeights& L, int l, const CacheBatch& batch, int n,
                         Activations& a) {
  const int64_t E = c.n_embd;
  float *x = a.x.data(), *o = a.o.data(), *sa = a.sa.data();
  rms_norm(x, L.attn_norm, n, E, c.rms_eps, a.h.data());
  attention(c, L, l, batch, n, a);
  rms_norm(o, L.attn_post_norm, n, E, c.rms_eps, o);
  for (int64_t j = 0; j < n * E; ++j) sa[j] = o[j] + x[j];
  rms_norm(sa, L.ffn_norm, n, E, c.rms_eps, a.h.data());
  feed_forward(c, L, n, a);
  rms_norm(o, L.ffn_post_norm, n, E, c.rms_eps, o);
  for (int64_t j = 0; j < n * E; ++j) x[j] = o[j] + sa[j];
}

void output_logits(const ModelConfig& c, const float* out_norm, const Weight& out, int n, const uint8_t* want,
                   Activations& a, float* logits) {
  if (!want || !logits) return;
  const int64_t E = c.n_embd;
  int64_t n_out = 0;
  for (int i = 0; i < n; ++i) n_out += want[i] ? 1 : 0;
  float* rows = grown(a.rows, size_t(n_out * E));
  int64_t r = 0;
  for (int i = 0; i < n; ++i) {
    if (want[i]) std::copy(a.x.data() + i * E, a.x.data() + (i + 1) * E, rows + (r++) * E);
  }
  rms_norm(rows, out_norm, n_out, E, c.rms_eps, rows);
  matmul(out, rows, n_out, logits);
  if (c.final_softcap > 0.0f) {
    // As ggml: scale by 1/cap, tanh, scale by cap.
    const float inv = 1.0f / c.final_softcap;
    const int64_t total = n_out * c.n_vocab;
    for (int64_t j = 0; j < total; ++j) logits[j] = std::tanh(logits[j] * inv) * c.final_softcap;
  }
}

}  // namespace vq::engine
