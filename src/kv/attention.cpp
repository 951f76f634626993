// Streaming attention over a LayerCache: one pass over sinks, blocks and window with an online
// softmax; keys scored and values accumulated from their stored form (packed codes for blocks,
// fp16 for sinks and window). No full-length fp16 K or V is ever built.
//
// The steps, each a function below: the visible range of every query (plan), the segments of
// each head and the prepared queries (prepare_queries), then per work item and tile of positions
// the scores (score_tile), the online softmax (softmax_tile), the values (accumulate_tile), and
// at the end the merge of the items' partial results (merge_and_write).
//
// Work is split into items (KV head x block of query rows x chunk of positions) whose
// boundaries depend only on the problem's shape, and chunk partials are merged in a fixed
// order, so the result is the same at any thread count.
#include <fmt/format.h>
#include <omp.h>

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
// Query rows per work item. A codec that decodes tiles for many rows (the TurboQuant split, whose
// tokens turn back through a dense rotation) decodes each tile once per item, so larger items
// pay less for it. At 1024 rows the other codecs' prefill measured slower (performance.md).
constexpr int kRowBlock = 512;
constexpr int64_t kChunkTokens = 4096;  // positions per work item when there is one row block
// The step's query buffers are kept from call to call while they are at most this size or at most
// twice what the call needs: the layers of one prefill reuse them (fresh pages are faulted in and
// zeroed by the kernel: a fifth of VecInfer's prefill, whose states are large, when each layer
// mapped its own), and the first smaller call after a long prefill frees them.
constexpr size_t kKeptStepBytes = size_t(4) << 20;

// The shape of one call: who sees what, and how the work is cut.
struct Plan {
  int H = 0, d = 0, G = 0;    // KV heads, head size, query heads per KV head
  int n_q_heads = 0;
  int rows_total = 0;         // query rows per KV head: n_q * G, row r is token r / G
  int n_row_blocks = 0;
  // Per KV head: its key codec's query-state floats per row (per-head codecs may differ) and where
  // its states start. (Each item's accumulators take its value codec's own width.)
  std::vector<size_t> S, state_at;
  float softcap = 0.0f;
  std::vector<int64_t> lo, hi;  // visible positions [lo, hi] of each query token
  int64_t pos_min = 0, pos_max = -1;
  int64_t chunk_len = 0, first_chunk = 0, n_chunks = 0;

  int64_t n_items() const { return int64_t(H) * n_row_blocks * n_chunks; }
  int row_begin(int rb) const { return rb * kRowBlock; }
  int row_end(int rb) const { return std::min(rows_total, (rb + 1) * kRowBlock); }
};

// The online-softmax state of a block of query rows over part of the context: running maxima m,
// sums l, and the accumulators (the value codec's, A floats a row, and head_dim floats for the fp16
// parts).
struct Partial {
  std::vector<float> m, l, acc_codec, acc_half;
  size_t A = 0;
  void init(int rows, size_t a, int d) {
    A = a;
    m.assign(size_t(rows), kNegInf);
    l.assign(size_t(rows), 0.0f);
    acc_codec.assign(size_t(rows) * a, 0.0f);
    acc_half.assign(size_t(rows) * size_t(d), 0.0f);
  }
};

struct HeadView {
  std::vector<Segment> keys, values;
};

// The query-side inputs of one work item.
struct ItemQueries {
  const float* scaled;  // rows x d, the scaled queries (for the fp16 parts)
  const float* states;  // rows x S, the key codec's prepared states
  size_t S;
  int r_begin, rows;
};

// A tile of positions [a, b) and the rows [r0, r1) of the item that see any of it.
struct Tile {
  int64_t a, b;
  int r0, r1;
  float* scores;  // row r0's scores; row r at scores + (r - r0) * stride
  size_t stride;
};

Plan make_plan(const LayerConfig& config, int n_q, int n_q_heads, const int64_t* q_pos, int64_t n_tokens,
               std::vector<size_t> S) {
  Plan p;
  p.H = config.n_kv_heads;
  p.d = config.head_dim;
  p.n_q_heads = n_q_heads;
  p.G = n_q_heads / p.H;
  p.rows_total = n_q * p.G;
  p.n_row_blocks = (p.rows_total + kRowBlock - 1) / kRowBlock;
  p.S = std::move(S);
  size_t at = 0;
  for (int h = 0; h < p.H; ++h) {
    p.state_at.push_back(at);
    at += size_t(p.rows_total) * p.S[size_t(h)];
  }
  p.state_at.push_back(at);  // all heads' states
  p.softcap = config.logit_softcap;
  const int64_t window = config.sliding_window;
  p.lo.resize(size_t(n_q));
  p.hi.resize(size_t(n_q));
  p.pos_min = std::numeric_limits<int64_t>::max();
  for (int i = 0; i < n_q; ++i) {
    p.hi[i] = std::min(q_pos[i], n_tokens - 1);
    p.lo[i] = window > 0 ? std::max<int64_t>(0, q_pos[i] - window + 1) : 0;
    p.pos_min = std::min(p.pos_min, p.lo[i]);
    p.pos_max = std::max(p.pos_max, p.hi[i]);
  }
  // Position chunks: split the context only when there is a single row block (decode).
  p.chunk_len = p.n_row_blocks == 1 ? kChunkTokens : p.pos_max + 1;
  p.first_chunk = p.chunk_len > 0 ? p.pos_min / p.chunk_len : 0;
  p.n_chunks = p.pos_max < p.pos_min ? 0 : p.pos_max / p.chunk_len - p.first_chunk + 1;
  return p;
}

// Scores of the tile: from the packed codes or the fp16 rows, then the soft-cap and the mask of
// positions a row does not see.
void score_tile(const Plan& p, const ItemQueries& iq, const Segment& ks, const KeyCodec& kc, const Tile& t,
                Workspace& ws) {
  const int nr = t.r1 - t.r0;
  const int64_t n = t.b - t.a;
  if (ks.compressed) {
    kc.scores(iq.states + size_t(t.r0) * iq.S, nr, ks.blocks, ks.run_pos0, t.a - ks.run_pos0, t.b - ks.run_pos0,
              t.scores, t.stride, ws);
  } else {
    half_scores(HalfKind::kF16, iq.scaled + size_t(t.r0) * p.d, nr, size_t(p.d),
                ks.half + size_t(t.a - ks.pos_begin) * p.d, size_t(p.d), n, p.d, t.scores, t.stride);
  }
  if (p.softcap > 0.0f) {
    // As ggml: scale by 1/c, tanh, scale by c.
    const float inv = 1.0f / p.softcap;
    for (int r = 0; r < nr; ++r) {
      float* row = t.scores + size_t(r) * t.stride;
      for (int64_t i = 0; i < n; ++i) row[i] = std::tanh(row[i] * inv) * p.softcap;
    }
  }
  for (int r = t.r0; r < t.r1; ++r) {
    const int qi = (iq.r_begin + r) / p.G;
    if (p.lo[qi] <= t.a && p.hi[qi] >= t.b - 1) continue;
    float* row = t.scores + size_t(r - t.r0) * t.stride;
    for (int64_t i = 0; i < n; ++i) {
      if (t.a + i < p.lo[qi] || t.a + i > p.hi[qi]) row[i] = kNegInf;
    }
  }
}

// Scores become weights; the rows' accumulators are rescaled to the new running maxima.
void softmax_tile(const Plan& p, const Tile& t, Partial& P, float* rescale) {
  const int nr = t.r1 - t.r0;
  online_softmax_tile(t.scores, t.stride, nr, t.b - t.a, P.m.data() + t.r0, P.l.data() + t.r0, rescale + t.r0);
  for (int r = t.r0; r < t.r1; ++r) {
    const float f = rescale[size_t(r)];
    if (f == 1.0f) continue;
    for (size_t j = 0; j < P.A; ++j) P.acc_codec[size_t(r) * P.A + j] *= f;
    for (int j = 0; j < p.d; ++j) P.acc_half[size_t(r) * p.d + j] *= f;
  }
}

// The weighted values of [a, b), from whichever value segments cover it (value blocks may be cut
// differently from key blocks). vseg: the first value segment that may still be needed.
void accumulate_tile(const Plan& p, const std::vector<Segment>& values, size_t* vseg, const ValueCodec& vc,
                     const Tile& t, Partial& P, Workspace& ws) {
  const int nr = t.r1 - t.r0;
  while (*vseg < values.size() && values[*vseg].pos_end <= t.a) ++*vseg;
  for (size_t vi = *vseg; vi < values.size() && values[vi].pos_begin < t.b; ++vi) {
    const Segment& vs = values[vi];
    const int64_t x = std::max(t.a, vs.pos_begin), y = std::min(t.b, vs.pos_end);
    if (x >= y) continue;
    const float* w = t.scores + (x - t.a);
    if (vs.compressed) {
      vc.accumulate(w, t.stride, nr, vs.blocks, vs.run_pos0, x - vs.run_pos0, y - vs.run_pos0,
                    P.acc_codec.data() + size_t(t.r0) * P.A, ws);
    } else {
      half_accumulate(HalfKind::kF16, w, t.stride, nr, vs.half + size_t(x - vs.pos_begin) * p.d, size_t(p.d), y - x,
                      p.d, P.acc_half.data() + size_t(t.r0) * p.d, size_t(p.d));
    }
  }
}

// One work item: a block of query rows of one KV head over one chunk of positions, a tile at a
// time. A codec call never crosses a page: the tiles are cut inside each key segment, and a value
// call is clipped to one value segment, each segment being at most one page of back-to-back
// blocks (TokenStream::segments), so every call's [i0, i1) lies within the one run it is given.
void run_item(const Plan& p, const HeadView& view, const KeyCodec& kc, const ValueCodec& vc, const ItemQueries& iq,
              int64_t c_begin, int64_t c_end, Partial& P, Workspace& ws) {
  const int rows = iq.rows;
  P.init(rows, vc.accum_floats(), p.d);
  const int64_t T = rows <= 16 ? std::max<int64_t>(256, vc.preferred_run_tokens()) : 64;
  // Scores are written before they are read, so the tile is not zeroed (it is 64 KB for a
  // 4096-token run of four rows, and zeroing it was a tenth of a fast codec's attention time).
  float* const sc = ws.get<float>(Workspace::kAttendScores, size_t(rows) * size_t(T));
  float* const rescale = ws.get<float>(Workspace::kAttendRescale, size_t(rows));
  size_t vseg = 0;
  for (const Segment& ks : view.keys) {
    const int64_t s_begin = std::max(ks.pos_begin, c_begin), s_end = std::min(ks.pos_end, c_end);
    for (int64_t a = s_begin; a < s_end; a += T) {
      const int64_t b = std::min(a + T, s_end);
      // Rows that see any of [a, b).
      int r0 = rows, r1 = 0;
      for (int r = 0; r < rows; ++r) {
        const int qi = (iq.r_begin + r) / p.G;
        if (p.lo[qi] < b && p.hi[qi] >= a) {
          r0 = std::min(r0, r);
          r1 = r + 1;
        }
      }
      if (r0 >= r1) continue;
      const Tile t{a, b, r0, r1, sc + size_t(r0) * T, size_t(T)};
      score_tile(p, iq, ks, kc, t, ws);
      softmax_tile(p, t, P, rescale);
      accumulate_tile(p, view.values, &vseg, vc, t, P, ws);
    }
  }
}

// Merges one row block's chunk partials in chunk order, maps the codec accumulator back to
// head_dim values, normalizes and writes the rows to out.
void merge_and_write(const Plan& p, const Partial* chunks, const ValueCodec& vc, int h, int rb, float* out) {
  const int r_begin = p.row_begin(rb), rows = p.row_end(rb) - r_begin;
  const size_t A = vc.accum_floats();
  const int d = p.d;
  Partial total;
  total.init(rows, A, d);
  for (int64_t c = 0; c < p.n_chunks; ++c) {
    const Partial& P = chunks[c];
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
  vc.finalize(total.acc_codec.data(), rows, fin.data());
  for (int r = 0; r < rows; ++r) {
    const int qi = (r_begin + r) / p.G, g = (r_begin + r) % p.G;
    float* dst = out + (size_t(qi) * p.n_q_heads + size_t(h) * p.G + g) * d;
    const float inv = total.l[r] > 0 ? 1.0f / total.l[r] : 0.0f;
    for (int j = 0; j < d; ++j) dst[j] = (fin[size_t(r) * d + j] + total.acc_half[size_t(r) * d + j]) * inv;
  }
}

}  // namespace

AttendWorkspace::AttendWorkspace() = default;
AttendWorkspace::~AttendWorkspace() = default;
AttendWorkspace::AttendWorkspace(AttendWorkspace&&) noexcept = default;
AttendWorkspace& AttendWorkspace::operator=(AttendWorkspace&&) noexcept = default;

void AttendWorkspace::reserve(int n_threads) {
  while (workers_.size() < size_t(std::max(1, n_threads))) workers_.push_back(std::make_unique<Workspace>());
}

void LayerCache::attend(const float* q, int n_q, int n_q_heads, const int64_t* q_pos, float scale,
                        float* out) const {
  AttendWorkspace ws;
  attend(q, n_q, n_q_heads, q_pos, scale, out, ws);
}

void LayerCache::attend(const float* q, int n_q, int n_q_heads, const int64_t* q_pos, float scale, float* out,
                        AttendWorkspace& aw) const {
  const int H = config_.n_kv_heads, d = config_.head_dim;
  VQ_CHECK(n_q_heads > 0 && n_q_heads % H == 0,
           fmt::format("attend: {} query heads is not a multiple of {} KV heads", n_q_heads, H));
  if (n_q <= 0) return;
  if (observer_) observer_->on_attend(config_.layer_index, q, n_q, n_q_heads, q_pos, scale);
  std::vector<size_t> S;
  for (int h = 0; h < H; ++h) S.push_back(key_codec(h).query_state_floats());
  const Plan p = make_plan(config_, n_q, n_q_heads, q_pos, n_tokens_, std::move(S));
  aw.reserve(omp_get_max_threads());

  // Once per step: each head's segments, scaled queries (for fp16 parts) and the codec's
  // prepared query states. Each row's state is zeroed first, so a codec that leaves padding
  // unwritten still reads the same bytes every time.
  std::vector<HeadView> views(static_cast<size_t>(H));
  Workspace& step = aw.step();
  const size_t qs_floats = size_t(H) * p.rows_total * d, states_floats = p.state_at.back();
  float* const qs = step.get_fitted<float>(Workspace::kAttendQueries, qs_floats, kKeptStepBytes);
  float* const states = step.get_fitted<float>(Workspace::kAttendStates, states_floats, kKeptStepBytes);
  parallel_for(int64_t(H) * p.n_row_blocks, [&](int64_t job) {
    Workspace& ws = aw.worker(omp_get_thread_num());
    const int h = int(job / p.n_row_blocks), rb = int(job % p.n_row_blocks);
    if (rb == 0) {
      keys_[h]->segments(&views[h].keys);
      values_[h]->segments(&views[h].values);
    }
    const int r0 = p.row_begin(rb), r1 = p.row_end(rb);
    for (int r = r0; r < r1; ++r) {
      const int qi = r / p.G, g = r % p.G;
      const float* src = q + (size_t(qi) * n_q_heads + size_t(h) * p.G + g) * d;
      float* dst = qs + (size_t(h) * p.rows_total + r) * d;
      for (int j = 0; j < d; ++j) dst[j] = src[j] * scale;
    }
    const size_t S_h = p.S[size_t(h)];
    float* const block_states = states + p.state_at[size_t(h)] + size_t(r0) * S_h;
    std::fill_n(block_states, size_t(r1 - r0) * S_h, 0.0f);
    key_codec(h).prepare_queries(qs + (size_t(h) * p.rows_total + r0) * d, size_t(d), r1 - r0, block_states, S_h, ws);
  });

  // Items are few and long (a decode step has KV heads x chunks of 4096 positions): one at a time.
  std::vector<Partial> partials(static_cast<size_t>(p.n_items()));
  parallel_for(p.n_items(), [&](int64_t item) {
    const int64_t c = item % p.n_chunks;
    const int rb = int((item / p.n_chunks) % p.n_row_blocks);
    const int h = int(item / p.n_chunks / p.n_row_blocks);
    const int r_begin = p.row_begin(rb);
    const ItemQueries iq{qs + (size_t(h) * p.rows_total + r_begin) * d,
                         states + p.state_at[size_t(h)] + size_t(r_begin) * p.S[size_t(h)], p.S[size_t(h)], r_begin,
                         p.row_end(rb) - r_begin};
    const int64_t c_begin = (p.first_chunk + c) * p.chunk_len;
    const int64_t c_end = std::min(c_begin + p.chunk_len, p.pos_max + 1);
    run_item(p, views[size_t(h)], key_codec(h), value_codec(h), iq, c_begin, c_end, partials[size_t(item)],
             aw.worker(omp_get_thread_num()));
  }, 1);

  parallel_for(int64_t(H) * p.n_row_blocks, [&](int64_t job) {
    const int h = int(job / p.n_row_blocks), rb = int(job % p.n_row_blocks);
    merge_and_write(p, partials.data() + size_t(job) * size_t(p.n_chunks), value_codec(h), h, rb, out);
  });
}

}  // namespace vq::kv
