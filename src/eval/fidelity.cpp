#include "src/eval/fidelity.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "src/engine/session.h"
#include "veloxquant/error.h"

namespace vq::eval {

int64_t LayerCapture::n_tokens() const {
  return int64_t(k.size()) / (int64_t(config.n_kv_heads) * config.head_dim);
}

CaptureObserver::CaptureObserver(const std::vector<kv::LayerConfig>& layout) {
  for (const auto& c : layout) layers_.push_back(LayerCapture{c, 0, 1.0f, {}, {}, {}, {}});
}

void CaptureObserver::on_append(int layer, const float* k, const float* v, int n, int64_t) {
  LayerCapture& c = layers_.at(size_t(layer));
  const size_t row = size_t(c.config.n_kv_heads) * c.config.head_dim;
  c.k.insert(c.k.end(), k, k + size_t(n) * row);
  c.v.insert(c.v.end(), v, v + size_t(n) * row);
}

void CaptureObserver::on_attend(int layer, const float* q, int n_q, int n_q_heads, const int64_t* q_pos, float scale) {
  LayerCapture& c = layers_.at(size_t(layer));
  c.n_q_heads = n_q_heads;
  c.scale = scale;
  c.q.insert(c.q.end(), q, q + size_t(n_q) * n_q_heads * c.config.head_dim);
  c.q_pos.insert(c.q_pos.end(), q_pos, q_pos + n_q);
}

namespace {

double dot(const float* a, const float* b, int d) {
  double s = 0;
  for (int j = 0; j < d; ++j) s += double(a[j]) * b[j];
  return s;
}

void softmax(std::vector<double>& s) {
  const double m = *std::max_element(s.begin(), s.end());
  double z = 0;
  for (double& x : s) z += (x = std::exp(x - m));
  for (double& x : s) x /= z;
}

}  // namespace

LayerFidelity measure_layer(const kv::Method& method, const LayerCapture& cap, int n_queries) {
  const kv::LayerConfig& cfg = cap.config;
  const int H = cfg.n_kv_heads, d = cfg.head_dim, QH = cap.n_q_heads;
  VQ_CHECK(QH > 0 && QH % H == 0, "fidelity: no queries captured for a layer");
  const int64_t n = cap.n_tokens();
  kv::LayerCache lc(method, cfg), ref(kv::parse_method("fp16"), cfg);
  lc.append(cap.k.data(), cap.v.data(), int(n));
  ref.append(cap.k.data(), cap.v.data(), int(n));

  LayerFidelity f;
  // Keys and values: every token the cache still holds, per KV head.
  double kerr = 0, knorm = 0, verr = 0, vnorm = 0, kcos = 0, vcos = 0;
  int64_t rows = 0;
  std::vector<std::map<int64_t, size_t>> where(static_cast<size_t>(H));
  std::vector<std::vector<float>> dk(static_cast<size_t>(H)), dv(static_cast<size_t>(H));
  for (int h = 0; h < H; ++h) {
    std::vector<int64_t> pos;
    lc.decode_head(h, &dk[size_t(h)], &dv[size_t(h)], &pos);
    for (size_t i = 0; i < pos.size(); ++i) {
      where[size_t(h)][pos[i]] = i;
      const float* k0 = &cap.k[(size_t(pos[i]) * H + h) * d];
      const float* v0 = &cap.v[(size_t(pos[i]) * H + h) * d];
      const float* k1 = &dk[size_t(h)][i * d];
      const float* v1 = &dv[size_t(h)][i * d];
      for (int j = 0; j < d; ++j) {
        kerr += std::pow(double(k0[j]) - k1[j], 2);
        verr += std::pow(double(v0[j]) - v1[j], 2);
      }
      const double kk = dot(k0, k0, d), vv = dot(v0, v0, d);
      knorm += kk;
      vnorm += vv;
      kcos += dot(k0, k1, d) / std::max(1e-30, std::sqrt(kk * dot(k1, k1, d)));
      vcos += dot(v0, v1, d) / std::max(1e-30, std::sqrt(vv * dot(v1, v1, d)));
      ++rows;
    }
  }
  f.key_rel_mse = kerr / std::max(knorm, 1e-30);
  f.value_rel_mse = verr / std::max(vnorm, 1e-30);
  f.key_cos = rows ? kcos / double(rows) : 0;
  f.value_cos = rows ? vcos / double(rows) : 0;

  // Attention for the last query tokens.
  const int64_t nq_all = int64_t(cap.q_pos.size());
  const int64_t q0 = std::max<int64_t>(0, nq_all - n_queries), nq = nq_all - q0;
  const float* q = cap.q.data() + size_t(q0) * QH * d;
  const int64_t* qpos = cap.q_pos.data() + q0;
  std::vector<float> out(size_t(nq) * QH * d), out_ref(out.size());
  lc.attend(q, int(nq), QH, qpos, cap.scale, out.data());
  ref.attend(q, int(nq), QH, qpos, cap.scale, out_ref.data());
  double oerr = 0, onorm = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    oerr += std::pow(double(out[i]) - out_ref[i], 2);
    onorm += double(out_ref[i]) * out_ref[i];
  }
  f.out_rel_err = std::sqrt(oerr / std::max(onorm, 1e-30));
  double serr = 0, snorm = 0, moved = 0;
  int64_t qrows = 0;
  for (int64_t i = 0; i < nq; ++i) {
    const int64_t p = qpos[i];
    const int64_t lo = cfg.sliding_window > 0 ? std::max<int64_t>(0, p - cfg.sliding_window + 1) : 0;
    for (int qh = 0; qh < QH; ++qh) {
      const int h = qh / (QH / H);
      const float* qr = q + (size_t(i) * QH + qh) * d;
      std::vector<double> s, s1;
      for (int64_t t = lo; t <= p; ++t) {
        const auto it = where[size_t(h)].find(t);
        if (it == where[size_t(h)].end()) continue;  // not held (dropped by a sliding window)
        s.push_back(cap.scale * dot(qr, &cap.k[(size_t(t) * H + h) * d], d));
        s1.push_back(cap.scale * dot(qr, &dk[size_t(h)][it->second * d], d));
      }
      if (s.empty()) continue;
      for (size_t t = 0; t < s.size(); ++t) {
        serr += (s[t] - s1[t]) * (s[t] - s1[t]);
        snorm += s[t] * s[t];
      }
      softmax(s);
      softmax(s1);
      double l1 = 0;
      for (size_t t = 0; t < s.size(); ++t) l1 += std::fabs(s[t] - s1[t]);
      moved += 0.5 * l1;
      ++qrows;
    }
  }
  f.score_rel_err = std::sqrt(serr / std::max(snorm, 1e-30));
  f.mass_moved = qrows ? moved / double(qrows) : 0;
  return f;
}

std::vector<LayerCapture> capture_layers(const engine::Model& model, const std::vector<int32_t>& tokens) {
  CaptureObserver capture(model.cache_layout());
  {
    engine::Session session(model, kv::parse_method("fp16"), int64_t(tokens.size()));
    session.set_observer(&capture);
    session.feed(tokens, nullptr);
  }
  return capture.take();
}

namespace {

// mean += f / n, figure by figure: one term of a mean over n layers or n seeds.
void add_share(const LayerFidelity& f, double n, LayerFidelity* mean) {
  mean->key_rel_mse += f.key_rel_mse / n;
  mean->key_cos += f.key_cos / n;
  mean->value_rel_mse += f.value_rel_mse / n;
  mean->value_cos += f.value_cos / n;
  mean->score_rel_err += f.score_rel_err / n;
  mean->mass_moved += f.mass_moved / n;
  mean->out_rel_err += f.out_rel_err / n;
}

}  // namespace

MethodFidelity summarize_layers(std::vector<LayerFidelity> layers) {
  MethodFidelity m;
  LayerFidelity& mean = m.mean;
  const double n = double(layers.size());
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerFidelity& f = layers[l];
    add_share(f, n, &mean);
    if (f.out_rel_err > m.worst_out_rel_err) {
      m.worst_out_rel_err = f.out_rel_err;
      m.worst_layer = int(l);
    }
    if (f.key_rel_mse > m.worst_key_rel_mse) {
      m.worst_key_rel_mse = f.key_rel_mse;
      m.worst_key_layer = int(l);
    }
  }
  m.layers = std::move(layers);
  return m;
}

MethodFidelity measure_method(const kv::Method& method, const std::vector<LayerCapture>& caps, int n_queries) {
  std::vector<LayerFidelity> layers;
  for (const LayerCapture& cap : caps) layers.push_back(measure_layer(method, cap, n_queries));
  return summarize_layers(std::move(layers));
}

SeedFidelity summarize_seeds(const std::vector<MethodFidelity>& runs) {
  VQ_ASSERT(!runs.empty());
  const size_t n_layers = runs[0].layers.size();
  const double n = double(runs.size());
  std::vector<LayerFidelity> layers(n_layers);
  std::vector<double> worst_key;
  for (const MethodFidelity& r : runs) {
    VQ_ASSERT(r.layers.size() == n_layers);
    for (size_t l = 0; l < n_layers; ++l) {
      add_share(r.layers[l], n, &layers[l]);
    }
    worst_key.push_back(r.worst_key_rel_mse);
  }
  return SeedFidelity{runs, summarize_layers(std::move(layers)), spread_of(worst_key)};
}

}  // namespace vq::eval
