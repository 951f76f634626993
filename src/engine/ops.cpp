// Per-token operations. Cheap next to the matmuls, so written plainly.
#include "src/engine/ops.h"

#include <cmath>
#include <utility>

#include "src/core/fp16.h"

namespace vq::engine {

void rms_norm(const float* x, const float* w, int64_t n, int64_t d, float eps, float* y) {
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    double sum = 0.0;
    for (int64_t i = 0; i < d; ++i) sum += double(xr[i] * xr[i]);
    const float mean = float(sum / double(d));
    const float scale = 1.0f / std::sqrt(mean + eps);
    for (int64_t i = 0; i < d; ++i) yr[i] = w ? (xr[i] * scale) * w[i] : xr[i] * scale;
  }
}

namespace {
// cos and sin of pos * freq_scale * base^(-2i/head_dim) / factors[i] for i < head_dim/2, the
// angle built by repeated multiplication as ggml_rope_cache_init does.
void rope_angles(int head_dim, int64_t pos, float base, float freq_scale, const float* factors, float* cs,
                 float* sn) {
  const float theta_scale = std::pow(base, -2.0f / float(head_dim));
  float theta = float(pos);
  for (int i = 0; i < head_dim / 2; ++i) {
    const float t = freq_scale * (factors ? theta / factors[i] : theta);
    cs[i] = std::cos(t);
    sn[i] = std::sin(t);
    theta *= theta_scale;
  }
}

// Rotates pairs (a(i), b(i)) of each head by the angles.
template <typename Pair>
void rotate(float* x, int n_heads, int head_dim, const float* cs, const float* sn, Pair pair) {
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + int64_t(h) * head_dim;
    for (int i = 0; i < head_dim / 2; ++i) {
      const auto [a, b] = pair(i);
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * cs[i] - x1 * sn[i];
      v[b] = x0 * sn[i] + x1 * cs[i];
    }
  }
}
}  // namespace

void rope_neox(float* x, int n_heads, int head_dim, int64_t pos, float base, float freq_scale,
               const float* factors) {
  float cs[512], sn[512];
  rope_angles(head_dim, pos, base, freq_scale, factors, cs, sn);
  const int half = head_dim / 2;
  rotate(x, n_heads, head_dim, cs, sn, [half](int i) { return std::pair<int, int>(i, i + half); });
}

void rope_norm(float* x, int n_heads, int head_dim, int64_t pos, float base, float freq_scale,
               const float* factors) {
  float cs[512], sn[512];
  rope_angles(head_dim, pos, base, freq_scale, factors, cs, sn);
  rotate(x, n_heads, head_dim, cs, sn, [](int i) { return std::pair<int, int>(2 * i, 2 * i + 1); });
}

void silu_mul(const float* gate, const float* up, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

float gelu_of_half(float xh) {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  constexpr float kCoefA = 0.044715f;
  const float g = 0.5f * xh * (1.0f + std::tanh(kSqrt2OverPi * xh * (1.0f + kCoefA * xh * xh)));
  return f16_to_f32(f32_to_f16(g));
}

float gelu_ggml(float x) {
  if (x <= -10.0f) return 0.0f;
  if (x >= 10.0f) return x;
  return gelu_of_half(f16_to_f32(f32_to_f16(x)));
}

}  // namespace vq::engine
