// Model-agnostic per-token operations (RMSNorm, RoPE, GELU), with the arithmetic of ggml's CPU
// reference so that activations follow llama.cpp's closely.
#pragma once

#include <cstdint>

namespace vq::engine {

// Each of n rows of x (length d): y = x / sqrt(mean(x^2) + eps) * w  (w may be null: no scale).
// The sum of squares is accumulated in double, as ggml does.
void rms_norm(const float* x, const float* w, int64_t n, int64_t d, float eps, float* y);

// NEOX-style rotary embedding of n_heads heads of head_dim at position pos, in place: dimension
// pairs (i, i + head_dim/2) rotated by pos * freq_scale * base^(-2i/head_dim) / factors[i], the
// angle built by repeated multiplication as ggml_rope_cache_init does. factors (head_dim/2
// frequency divisors, Llama 3's rope_freqs) may be null: all 1.
void rope_neox(float* x, int n_heads, int head_dim, int64_t pos, float base, float freq_scale,
               const float* factors = nullptr);

// Original (GPT-J / "NORM") rotary embedding: adjacent pairs (2i, 2i+1), as llama's rope type.
void rope_norm(float* x, int n_heads, int head_dim, int64_t pos, float base, float freq_scale,
               const float* factors = nullptr);

// y[i] = silu(gate[i]) * up[i], silu(x) = x / (1 + exp(-x)).
void silu_mul(const float* gate, const float* up, int64_t n, float* y);

// GELU (tanh approximation) as ggml's CPU path computes it: input and output rounded to fp16
// inside (-10, 10) (GGML_GELU_FP16, a lookup table there), identity above 10, 0 below -10.
float gelu_ggml(float x);

// The tanh formula on a value already rounded to fp16, its result rounded to fp16: ggml's table
// entry for that value (ggml_table_gelu_f16 holds it for every fp16 value, ±10 included, which
// x just inside (-10, 10) rounds to).
float gelu_of_half(float xh);

// y[i] = gelu(gate[i]) * up[i].
void gelu_mul(const float* gate, const float* up, int64_t n, float* y);

}  // namespace vq::engine
