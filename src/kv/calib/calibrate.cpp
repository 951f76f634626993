#include "src/kv/calib/calibrate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "src/core/threads.h"
#include "src/kv/methods/ratequant/ratequant.h"
#include "src/kv/rope_table.h"
#include "veloxquant/error.h"

namespace vq::kv {

Calibration calibrate(const Method& method, const std::vector<LayerSamples>& layers, const ModelIdentity& model,
                      const std::string& source) {
  VQ_CHECK(method.needs_calibration(), fmt::format("'{}' learns nothing from calibration", method.spec()));
  Calibration c;
  c.spec = method.spec();
  c.model = model;
  c.source = source;
  c.layers.resize(layers.size());
  for (size_t l = 0; l < layers.size(); ++l) {
    VQ_CHECK(layers[l].n_tokens > 0, fmt::format("calibration: layer {} saw no tokens", l));
    c.layers[l].head_dim = layers[l].head_dim;
    method.keys().calibrate_keys(layers[l], &c.layers[l]);
    method.values().calibrate_values(layers[l], &c.layers[l]);
    c.tokens = layers[l].n_tokens;
  }
  return c;
}

LayerSamples unweighted_samples(const LayerConfig& config, const float* keys, const float* values, int64_t n,
                                int64_t pos0) {
  const int H = config.n_kv_heads, d = config.head_dim;
  LayerSamples s;
  s.n_kv_heads = H;
  s.head_dim = d;
  s.n_tokens = n;
  s.keys.assign(keys, keys + size_t(n) * H * d);
  s.values.assign(values, values + size_t(n) * H * d);
  s.rope = config.rope;
  for (int64_t t = 0; t < n; ++t) s.positions.push_back(pos0 + t);
  const RopeTable rope(d, config.rope);
  for (int64_t t = 0; t < n; ++t) {
    for (int h = 0; h < H; ++h) rope.rotate(s.keys.data() + (size_t(t) * H + h) * d, pos0 + t, /*inverse=*/true);
  }
  s.key_channel_weight.assign(size_t(d), 1.0);
  s.value_token_weight.assign(size_t(n) * H, 1.0);
  return s;
}

std::shared_ptr<const Calibration> calibrate_on_synthetic(const Method& method, const LayerConfig& config,
                                                          const float* keys, const float* values, int64_t n,
                                                          int n_layers, const std::string& tool) {
  VQ_CHECK(n_layers >= 1, "calibration on synthetic data: no layers");
  if (is_ratequant(method)) {
    std::vector<std::shared_ptr<const Calibration>> bases;
    if (ratequant_learns_per_width(method)) {
      for (int w : ratequant_widths(method)) {
        bases.push_back(calibrate_on_synthetic(ratequant_base_method(method, w), config, keys, values, n, n_layers, tool));
      }
    }
    return std::make_shared<Calibration>(ratequant_even_calibration(
        method, ModelIdentity{"synthetic", tool, 0, n_layers, config.n_kv_heads, config.head_dim},
        tool + " synthetic data", bases));
  }
  auto c = std::make_shared<Calibration>(
      calibrate(method, {unweighted_samples(config, keys, values, n, 0)},
                ModelIdentity{"synthetic", tool, 0, n_layers, config.n_kv_heads, config.head_dim},
                tool + " synthetic data"));
  c->layers.resize(size_t(n_layers), c->layers[0]);
  return c;
}

struct SampleCollector::Layer {
  LayerConfig config;
  std::unique_ptr<RopeTable> rope;
  LayerSamples s;
  int64_t chunk_base = 0;          // sample index of the current chunk's position 0
  std::vector<float> chunk_keys;   // the chunk's keys after RoPE, as attention sees them
  std::vector<double> cc, sc;      // prefix sums over positions of cos^2 and sin*cos per pair
  double key_pairs = 0;            // (query head, key) pairs summed into key_channel_weight

  void extend_prefix(int64_t n_pos) {
    const int half = config.head_dim / 2;
    std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
    while (int64_t(cc.size()) / half < n_pos + 1) {
      const int64_t p = int64_t(cc.size()) / half - 1;  // next position to add (p >= 0)
      if (cc.empty()) {
        cc.assign(size_t(half), 0.0);
        sc.assign(size_t(half), 0.0);
        continue;
      }
      if (rope->identity()) {
        std::fill(cs.begin(), cs.end(), 1.0f);
        std::fill(sn.begin(), sn.end(), 0.0f);
      } else {
        rope->angles(p, cs.data(), sn.data());
      }
      const size_t at = cc.size() - size_t(half);
      for (int i = 0; i < half; ++i) {
        cc.push_back(cc[at + size_t(i)] + double(cs[size_t(i)]) * cs[size_t(i)]);
        sc.push_back(sc[at + size_t(i)] + double(sn[size_t(i)]) * cs[size_t(i)]);
      }
    }
  }
};

SampleCollector::SampleCollector(const std::vector<LayerConfig>& layout) {
  for (const LayerConfig& c : layout) {
    Layer l;
    l.config = c;
    l.rope = std::make_unique<RopeTable>(c.head_dim, c.rope);
    l.s.n_kv_heads = c.n_kv_heads;
    l.s.head_dim = c.head_dim;
    l.s.rope = c.rope;
    l.s.key_channel_weight.assign(size_t(c.head_dim), 0.0);
    layers_.push_back(std::move(l));
  }
}

SampleCollector::~SampleCollector() = default;

void SampleCollector::on_append(int layer, const float* k, const float* v, int n, int64_t pos0) {
  Layer& L = layers_.at(size_t(layer));
  const int H = L.config.n_kv_heads, d = L.config.head_dim;
  const size_t row = size_t(H) * d;
  if (pos0 == 0) {
    L.chunk_base = L.s.n_tokens;
    L.chunk_keys.clear();
  }
  VQ_CHECK(int64_t(L.chunk_keys.size() / row) == pos0, "calibration: tokens must arrive in position order");
  L.chunk_keys.insert(L.chunk_keys.end(), k, k + size_t(n) * row);
  const size_t at = L.s.keys.size();
  L.s.keys.insert(L.s.keys.end(), k, k + size_t(n) * row);
  for (int t = 0; t < n; ++t) {
    for (int h = 0; h < H; ++h) L.rope->rotate(L.s.keys.data() + at + size_t(t) * row + size_t(h) * d, pos0 + t, true);
  }
  L.s.values.insert(L.s.values.end(), v, v + size_t(n) * row);
  for (int t = 0; t < n; ++t) L.s.positions.push_back(pos0 + t);
  L.s.value_token_weight.resize(L.s.value_token_weight.size() + size_t(n) * H, 0.0);
  L.s.n_tokens += n;
}

void SampleCollector::on_attend(int layer, const float* q, int n_q, int n_q_heads, const int64_t* q_pos, float scale) {
  Layer& L = layers_.at(size_t(layer));
  const int H = L.config.n_kv_heads, d = L.config.head_dim, half = d / 2, group = n_q_heads / H;
  const int64_t n_keys = int64_t(L.chunk_keys.size()) / (int64_t(H) * d);
  const int64_t W = L.config.sliding_window;
  int64_t max_pos = 0;
  for (int i = 0; i < n_q; ++i) {
    VQ_CHECK(q_pos[i] >= 0 && q_pos[i] < n_keys, "calibration: a query without its key");
    max_pos = std::max(max_pos, q_pos[i]);
  }
  L.extend_prefix(max_pos + 1);
  // Attention weights per (query token, query head) row, in parallel; summed in a fixed order.
  const int rows = n_q * n_q_heads;
  std::vector<std::vector<float>> probs(static_cast<size_t>(rows));
  std::vector<int64_t> first(static_cast<size_t>(rows));
  parallel_for(rows, [&](int64_t r) {
    const int i = int(r / n_q_heads), h = int(r % n_q_heads), g = h / group;
    const int64_t hi = q_pos[i], lo = W > 0 ? std::max<int64_t>(0, hi - W + 1) : 0;
    const float* qr = q + (size_t(i) * n_q_heads + size_t(h)) * d;
    std::vector<float>& p = probs[size_t(r)];
    p.resize(size_t(hi - lo + 1));
    float mx = -INFINITY;
    for (int64_t t = lo; t <= hi; ++t) {
      const float* kr = L.chunk_keys.data() + (size_t(t) * H + size_t(g)) * d;
      float s = 0.0f;
      for (int j = 0; j < d; ++j) s += qr[j] * kr[j];
      p[size_t(t - lo)] = s * scale;
      mx = std::max(mx, s * scale);
    }
    double z = 0;
    for (float& x : p) z += (x = std::exp(x - mx));
    for (float& x : p) x = float(x / z);
    first[size_t(r)] = lo;
  });
  for (int r = 0; r < rows; ++r) {
    const int i = r / n_q_heads, h = r % n_q_heads, g = h / group;
    const int64_t lo = first[size_t(r)], hi = q_pos[i], n = hi - lo + 1;
    const std::vector<float>& p = probs[size_t(r)];
    for (int64_t t = lo; t <= hi; ++t) {
      const double a = p[size_t(t - lo)];
      L.s.value_token_weight[size_t(L.chunk_base + t) * H + size_t(g)] += a * a;
    }
    // Keys: sum over the visible keys of (R(p_k)^T q)^2 per channel, in closed form per pair.
    const float* qr = q + (size_t(i) * n_q_heads + size_t(h)) * d;
    for (int j = 0; j < half; ++j) {
      const int a = L.rope->identity() ? j : L.rope->first(j), b = L.rope->identity() ? j + half : L.rope->second(j);
      const double Scc = L.cc[size_t(hi + 1) * half + size_t(j)] - L.cc[size_t(lo) * half + size_t(j)];
      const double Ssc = L.sc[size_t(hi + 1) * half + size_t(j)] - L.sc[size_t(lo) * half + size_t(j)];
      const double qa = qr[a], qb = qr[b];
      L.s.key_channel_weight[size_t(a)] += qa * qa * Scc + qb * qb * (double(n) - Scc) + 2 * qa * qb * Ssc;
      L.s.key_channel_weight[size_t(b)] += qa * qa * (double(n) - Scc) + qb * qb * Scc - 2 * qa * qb * Ssc;
    }
    L.key_pairs += double(n);
  }
}

std::vector<LayerSamples> SampleCollector::take() {
  std::vector<LayerSamples> out;
  for (Layer& L : layers_) {
    if (L.key_pairs > 0) {
      for (double& w : L.s.key_channel_weight) w /= L.key_pairs;
    }
    out.push_back(std::move(L.s));
  }
  layers_.clear();
  return out;
}

}  // namespace vq::kv
