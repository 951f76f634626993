// Streaming attention over a LayerCache: one pass over sinks, blocks and window with an online
// softmax; keys scored and values accumulated from their stored form (packed codes for blocks,
// fp16 for sinks and window). No full-length fp16 K or V is ever built.
//
// Work is split into items (KV head x block of query rows x chunk of positions) whose
// boundaries depend only on the problem's shape, and chunk partials are merged in a fixed
// order, so the result is the same at any thread count.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "src/core/threads.h"
#include "src/kv/kernels/f16_kernels.h"
#include "src/kv/kernels/softmax.h"
#include "src/kv/stream.h"
#include "veloxquant/error.h"
#include "veloxquant/kv/cache.h"

namespace vq::kv {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int kRowBlock = 256;         // query rows per work item
constexpr int64_t kChunkTokens = 4096;  // positions per work item when there is one row block

// The online-softmax state of a block of query rows over part of the context.
struct Partial {
  std::vector<float> m, l, acc_codec, acc_half;
  void init(int rows, size_t a, int d) {
    m.assign(size_t(rows), kNegInf);
    l.assign(size_t(rows), 0.0f);
    acc_codec.assign(size_t(rows) * a, 0.0f);
    acc_half.assign(size_t(rows) * size_t(d), 0.0f);
  }
};

struct HeadView {
  std::vector<Segment> keys, values;
};

// At least n floats of a per-thread scratch buffer (grown, never shrunk; contents unspecified).
float* scratch(std::vector<float>& buf, size_t n) {
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

}  // namespace

void LayerCache::attend(const float* q, int n_q, int n_q_heads, const int64_t* q_pos, float scale,
                        float* out) const {
  const int H = config_.n_kv_heads, d = config_.head_dim;
  VQ_CHECK(n_q_heads > 0 && n_q_heads % H == 0,
           fmt::format("attend: {} query heads is not a multiple of {} KV heads", n_q_heads, H));
  if (n_q <= 0) return;
  if (observer_) observer_->on_attend(config_.layer_index, q, n_q, n_q_heads, q_pos, scale);
  const int G = n_q_heads / H;
  const int rows_total = n_q * G;
  const int n_row_blocks = (rows_total + kRowBlock - 1) / kRowBlock;
  // Per-head codecs (when the method has them) share their shapes: S and A are those of head 0.
  const size_t S = key_codec(0).query_state_floats(), A = value_codec(0).accum_floats();
  const int64_t window = config_.sliding_window;
  const float softcap = config_.logit_softcap;

  // Visible range of each query token.
  std::vector<int64_t> lo(static_cast<size_t>(n_q)), hi(static_cast<size_t>(n_q));
  int64_t pos_min = std::numeric_limits<int64_t>::max(), pos_max = -1;
  for (int i = 0; i < n_q; ++i) {
    hi[i] = std::min(q_pos[i], n_tokens_ - 1);
    lo[i] = window > 0 ? std::max<int64_t>(0, q_pos[i] - window + 1) : 0;
    pos_min = std::min(pos_min, lo[i]);
    pos_max = std::max(pos_max, hi[i]);
  }

  // Once per step: each head's segments, scaled queries (for fp16 parts) and the codec's
  // prepared query states.
  // The query buffers are the calling thread's scratch, kept across decode steps: at VecInfer's
  // 8 KB of state a row they are 264 KB for 32 query heads, and allocating and zeroing that afresh
  // for every step and layer was 20 us of a 2.4 ms layer. Each row's state is zeroed below, so a
  // codec that leaves padding unwritten still reads the same bytes every time. Prefill's larger
  // buffers are let go at the end (see the bottom), not kept for the rest of the thread's life.
  std::vector<HeadView> views(static_cast<size_t>(H));
  thread_local std::vector<float> scratch_qs, scratch_states;
  float* const qs = scratch(scratch_qs, size_t(H) * rows_total * d);
  float* const states = scratch(scratch_states, size_t(H) * rows_total * S);
  parallel_for(int64_t(H) * n_row_blocks, [&](int64_t job) {
    const int h = int(job / n_row_blocks), rb = int(job % n_row_blocks);
    if (rb == 0) {
      keys_[h]->segments(&views[h].keys);
      values_[h]->segments(&views[h].values);
    }
    const int r_end = std::min(rows_total, (rb + 1) * kRowBlock);
    for (int r = rb * kRowBlock; r < r_end; ++r) {
      const int qi = r / G, g = r % G;
      const float* src = q + (size_t(qi) * n_q_heads + size_t(h) * G + g) * d;
      float* dst = qs + (size_t(h) * rows_total + r) * d;
      for (int j = 0; j < d; ++j) dst[j] = src[j] * scale;
      float* const state = states + (size_t(h) * rows_total + r) * S;
      std::fill_n(state, S, 0.0f);
      key_codec(h).prepare_query(dst, state);
    }
  });

  // Position chunks: split the context only when there is a single row block (decode).
  int64_t chunk_len = pos_max + 1;
  if (n_row_blocks == 1) chunk_len = kChunkTokens;
  const int64_t first_chunk = chunk_len > 0 ? pos_min / chunk_len : 0;
  const int64_t n_chunks = pos_max < pos_min ? 0 : pos_max / chunk_len - first_chunk + 1;
  const int64_t n_items = int64_t(H) * n_row_blocks * n_chunks;
  std::vector<Partial> partials(static_cast<size_t>(n_items));

  // Items are few and long (a decode step has KV heads x chunks of 4096 positions): one at a time.
  parallel_for(n_items, [&](int64_t item) {
    const int64_t c = item % n_chunks;
    const int rb = int((item / n_chunks) % n_row_blocks);
    const int h = int(item / n_chunks / n_row_blocks);
    const int r_begin = rb * kRowBlock, r_end = std::min(rows_total, r_begin + kRowBlock);
    const int rows = r_end - r_begin;
    Partial& P = partials[size_t(item)];
    P.init(rows, A, d);
    const int64_t c_begin = (first_chunk + c) * chunk_len;
    const int64_t c_end = std::min(c_begin + chunk_len, pos_max + 1);
    const int64_t T = rows <= 16 ? std::max<int64_t>(256, value_codec(h).preferred_run_tokens()) : 64;
    // The thread's scratch, kept across items and steps (a decode step would otherwise allocate
    // and free each item's tiles, and big ones are mapped and faulted in afresh every time).
    // Scores are written before they are read and stay uninitialized (this tile is 64 KB for a
    // 4096-token run of four rows, and zeroing it was a tenth of a fast codec's attention time).
    // A thread keeps the largest item's tiles it has met.
    thread_local std::vector<float> scratch_scores, scratch_rescale;
    float* const sc = scratch(scratch_scores, size_t(rows) * size_t(T));
    float* const rescale = scratch(scratch_rescale, size_t(rows));
    float* const acc = P.acc_codec.data();
    const float* qh = qs + (size_t(h) * rows_total + r_begin) * d;
    const float* st = states + (size_t(h) * rows_total + r_begin) * S;
    const HeadView& view = views[size_t(h)];
    const KeyCodec& kc = key_codec(h);
    const ValueCodec& vc = value_codec(h);
    size_t vseg = 0;
    for (const Segment& ks : view.keys) {
      const int64_t s_begin = std::max(ks.pos_begin, c_begin), s_end = std::min(ks.pos_end, c_end);
      for (int64_t a = s_begin; a < s_end; a += T) {
        const int64_t b = std::min(a + T, s_end), n = b - a;
        // Rows that see any of [a, b).
        int r0 = rows, r1 = 0;
        for (int r = 0; r < rows; ++r) {
          const int qi = (r_begin + r) / G;
          if (lo[qi] < b && hi[qi] >= a) {
            r0 = std::min(r0, r);
            r1 = r + 1;
          }
        }
        if (r0 >= r1) continue;
        const int nr = r1 - r0;
        float* s0 = sc + size_t(r0) * T;
        if (ks.compressed) {
          kc.scores(st + size_t(r0) * S, nr, ks.blocks, ks.run_pos0, a - ks.run_pos0,
                    b - ks.run_pos0, s0, size_t(T));
        } else {
          half_scores(HalfKind::kF16, qh + size_t(r0) * d, nr, size_t(d),
                      ks.half + size_t(a - ks.pos_begin) * d, size_t(d), n, d, s0, size_t(T));
        }
        if (softcap > 0.0f) {
          // As ggml: scale by 1/c, tanh, scale by c.
          const float inv = 1.0f / softcap;
          for (int r = r0; r < r1; ++r) {
            float* row = sc + size_t(r) * T;
            for (int64_t t = 0; t < n; ++t) row[t] = std::tanh(row[t] * inv) * softcap;
          }
        }
        for (int r = r0; r < r1; ++r) {
          const int qi = (r_begin + r) / G;
          if (lo[qi] <= a && hi[qi] >= b - 1) continue;
          float* row = sc + size_t(r) * T;
          for (int64_t t = 0; t < n; ++t) {
            if (a + t < lo[qi] || a + t > hi[qi]) row[t] = kNegInf;
          }
        }
        online_softmax_tile(s0, size_t(T), nr, n, P.m.data() + r0, P.l.data() + r0, rescale + r0);
        for (int r = r0; r < r1; ++r) {
          const float f = rescale[size_t(r)];
          if (f == 1.0f) continue;
          for (size_t j = 0; j < A; ++j) acc[size_t(r) * A + j] *= f;
          for (int j = 0; j < d; ++j) P.acc_half[size_t(r) * d + j] *= f;
        }
        // Values of [a, b), from whichever value segments cover it.
        while (vseg < view.values.size() && view.values[vseg].pos_end <= a) ++vseg;
        for (size_t vi = vseg; vi < view.values.size() && view.values[vi].pos_begin < b; ++vi) {
          const Segment& vs = view.values[vi];
          const int64_t x = std::max(a, vs.pos_begin), y = std::min(b, vs.pos_end);
          if (x >= y) continue;
          const float* w = s0 + (x - a);
          if (vs.compressed) {
            vc.accumulate(w, size_t(T), nr, vs.blocks, vs.run_pos0, x - vs.run_pos0,
                          y - vs.run_pos0, acc + size_t(r0) * A);
          } else {
            half_accumulate(HalfKind::kF16, w, size_t(T), nr,
                            vs.half + size_t(x - vs.pos_begin) * d, size_t(d), y - x, d,
                            P.acc_half.data() + size_t(r0) * d, size_t(d));
          }
        }
      }
    }
  }, 1);

  // Merge chunks in order, map the codec accumulator back, normalize.
  parallel_for(int64_t(H) * n_row_blocks, [&](int64_t job) {
    const int h = int(job / n_row_blocks), rb = int(job % n_row_blocks);
    const int r_begin = rb * kRowBlock, r_end = std::min(rows_total, r_begin + kRowBlock);
    const int rows = r_end - r_begin;
    const size_t base = size_t(job) * size_t(n_chunks);
    Partial total;
    total.init(rows, A, d);
    for (int64_t c = 0; c < n_chunks; ++c) {
      const Partial& P = partials[base + size_t(c)];
      for (int r = 0; r < rows; ++r) {
        if (P.m[r] == kNegInf) continue;
        const float m_new = std::max(total.m[r], P.m[r]);
        const float ft = total.m[r] == kNegInf ? 0.0f : std::exp(total.m[r] - m_new);
        const float fp = std::exp(P.m[r] - m_new);
        total.l[r] = total.l[r] * ft + P.l[r] * fp;
        for (size_t j = 0; j < A; ++j) {
          float& t = total.acc_codec[size_t(r) * A + j];
          t = t * ft + P.acc_codec[size_t(r) * A + j] * fp;
        }
        for (int j = 0; j < d; ++j) {
          float& t = total.acc_half[size_t(r) * d + j];
          t = t * ft + P.acc_half[size_t(r) * d + j] * fp;
        }
        total.m[r] = m_new;
      }
    }
    std::vector<float> fin(size_t(rows) * d);
    value_codec(h).finalize(total.acc_codec.data(), rows, fin.data());
    for (int r = 0; r < rows; ++r) {
      const int qi = (r_begin + r) / G, g = (r_begin + r) % G;
      float* dst = out + (size_t(qi) * n_q_heads + size_t(h) * G + g) * d;
      const float inv = total.l[r] > 0 ? 1.0f / total.l[r] : 0.0f;
      for (int j = 0; j < d; ++j) {
        dst[j] = (fin[size_t(r) * d + j] + total.acc_half[size_t(r) * d + j]) * inv;
      }
    }
  });
  constexpr size_t kKeptScratchFloats = size_t(1) << 20;  // 4 MB
  if (scratch_states.size() > kKeptScratchFloats) scratch_states = {};
  if (scratch_qs.size() > kKeptScratchFloats) scratch_qs = {};
}

}  // namespace vq::kv
