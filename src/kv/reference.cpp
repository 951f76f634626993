// The plain path: decode every stored token to floats, then ordinary softmax attention in
// double precision. Slow on purpose; it is the oracle for the fused path.
#include <algorithm>
#include <cmath>
#include <vector>

#include "src/core/fp16.h"
#include "src/kv/stream.h"
#include "veloxquant/kv/cache.h"

namespace vq::kv {
namespace {

// Decodes a stream into rows and positions, in position order.
template <typename Codec>
void decode_stream(const TokenStream& s, const Codec& codec, int d, std::vector<float>* rows,
                   std::vector<int64_t>* pos) {
  std::vector<Segment> segs;
  s.segments(&segs);
  rows->clear();
  pos->clear();
  const int B = codec.block_tokens();
  std::vector<float> block(size_t(B) * d);
  for (const Segment& g : segs) {
    for (int64_t p = g.pos_begin; p < g.pos_end; ++p) {
      const size_t at = rows->size();
      rows->resize(at + size_t(d));
      if (g.compressed) {
        const int64_t i = p - g.run_pos0;
        const int64_t b = i / B;
        codec.decode(g.blocks + size_t(b) * codec.block_bytes(), g.run_pos0 + b * B, block.data());
        std::copy_n(block.data() + size_t(i % B) * d, d, rows->data() + at);
      } else {
        f16_to_f32(g.half + size_t(p - g.pos_begin) * d, rows->data() + at, size_t(d));
      }
      pos->push_back(p);
    }
  }
}

}  // namespace

void LayerCache::decode_head(int head, std::vector<float>* keys, std::vector<float>* values,
                             std::vector<int64_t>* positions) const {
  const int d = config_.head_dim;
  std::vector<float> k, v;
  std::vector<int64_t> kp, vp;
  decode_stream(*keys_[size_t(head)], key_codec(head), d, &k, &kp);
  decode_stream(*values_[size_t(head)], value_codec(head), d, &v, &vp);
  // Keys and values may have dropped different pages: keep the positions both still hold.
  keys->clear();
  values->clear();
  positions->clear();
  size_t i = 0, j = 0;
  while (i < kp.size() && j < vp.size()) {
    if (kp[i] < vp[j]) {
      ++i;
    } else if (vp[j] < kp[i]) {
      ++j;
    } else {
      keys->insert(keys->end(), k.begin() + i * d, k.begin() + (i + 1) * d);
      values->insert(values->end(), v.begin() + j * d, v.begin() + (j + 1) * d);
      positions->push_back(kp[i]);
      ++i;
      ++j;
    }
  }
}

void LayerCache::attend_reference(const float* q, int n_q, int n_q_heads, const int64_t* q_pos,
                                  float scale, float* out) const {
  const int H = config_.n_kv_heads, d = config_.head_dim, G = n_q_heads / H;
  const int64_t window = config_.sliding_window;
  const double cap = config_.logit_softcap;
  for (int h = 0; h < H; ++h) {
    std::vector<float> k, v;
    std::vector<int64_t> pos;
    decode_head(h, &k, &v, &pos);
    for (int i = 0; i < n_q; ++i) {
      for (int g = 0; g < G; ++g) {
        const float* qv = q + (size_t(i) * n_q_heads + size_t(h) * G + g) * d;
        float* o = out + (size_t(i) * n_q_heads + size_t(h) * G + g) * d;
        std::vector<double> s(pos.size(), -INFINITY);
        double mx = -INFINITY;
        for (size_t t = 0; t < pos.size(); ++t) {
          if (pos[t] > q_pos[i] || (window > 0 && pos[t] <= q_pos[i] - window)) continue;
          double dot = 0;
          for (int j = 0; j < d; ++j) dot += double(qv[j] * scale) * k[t * d + j];
          if (cap > 0) dot = cap * std::tanh(dot / cap);
          s[t] = dot;
          mx = std::max(mx, dot);
        }
        std::vector<double> acc(size_t(d), 0.0);
        double sum = 0;
        for (size_t t = 0; t < pos.size(); ++t) {
          if (s[t] == -INFINITY) continue;
          const double w = std::exp(s[t] - mx);
          sum += w;
          for (int j = 0; j < d; ++j) acc[j] += w * v[t * d + j];
        }
        for (int j = 0; j < d; ++j) o[j] = sum > 0 ? float(acc[j] / sum) : 0.0f;
      }
    }
  }
}

}  // namespace vq::kv
