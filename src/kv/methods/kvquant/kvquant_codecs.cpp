// KVQuant's key and value codecs: pre-RoPE keys normalized per channel, values per token, both
// coded with the layer's calibrated levels and dense-and-sparse outliers (kvquant.cpp describes
// the method; kvquant_rows.h the row layouts).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>
#include <vector>

#include "src/kv/kernels/f16_kernels.h"
#include "src/kv/methods/kvquant/kvquant_rows.h"
#include "src/kv/rope_table.h"
#include "veloxquant/error.h"
#include "veloxquant/kv/calibration.h"

namespace vq::kv::kvquant {

namespace {

// The split that narrows the range most, given the channels in sorted order at both ends:
// low[j] = order[j] and high[j] = order[d - 1 - j] for j <= S.
TokenSplit best_split(const float* x, int S, const int* low, const int* high) {
  TokenSplit best{x[low[0]], x[high[0]], 0};
  float best_range = INFINITY;
  for (int j = 0; j <= S; ++j) {
    const float lo = x[low[j]], hi = x[high[S - j]];
    if (hi - lo < best_range) {
      best_range = hi - lo;
      best = {lo, hi, j};
    }
  }
  return best;
}

// The S + 1 first and S + 1 last channels of a stable sort by value (ties: the lower channel
// first), found in one pass without sorting the rest: low[j] = order[j], high[j] = order[d - 1 -
// j]. Each value token of the cache needs only these, and a full sort of d channels was the
// largest part of encoding one.
void order_ends(const float* x, int d, int S, int* low, int* high) {
  const int n = std::min(S + 1, d);
  int nl = 0, nh = 0;
  for (int c = 0; c < d; ++c) {
    // c comes after every channel seen, so it goes below an equal value in low's order and above
    // it in high's.
    if (nl < n || x[c] < x[low[nl - 1]]) {
      int k = std::min(nl, n - 1);
      while (k > 0 && x[c] < x[low[k - 1]]) low[k] = low[k - 1], --k;
      low[k] = c;
      nl = std::min(nl + 1, n);
    }
    if (nh < n || x[c] >= x[high[nh - 1]]) {
      int k = std::min(nh, n - 1);
      while (k > 0 && x[c] >= x[high[k - 1]]) high[k] = high[k - 1], --k;
      high[k] = c;
      nh = std::min(nh + 1, n);
    }
  }
}

}  // namespace

TokenSplit split_token(const float* x, int d, int S, std::vector<int>* order) {
  order->resize(size_t(d));
  std::iota(order->begin(), order->end(), 0);
  std::stable_sort(order->begin(), order->end(), [x](int a, int b) { return x[a] < x[b]; });
  std::vector<int> high(order->rbegin(), order->rbegin() + std::min(S + 1, d));
  return best_split(x, S, order->data(), high.data());
}

int quantize_key(const float* pre, int d, int S, const Datatype& type, const float* mid, const float* half,
                 uint8_t* codes, SparseSlot* slots) {
  std::vector<std::pair<float, int>> out;  // (how far out, channel)
  for (int c = 0; c < d; ++c) {
    const float m = mid[c], h = half[c], x = pre[c];
    const float u = h > 0.0f ? (x - m) / h : 0.0f;
    codes[c] = type.code(u);
    if (S > 0 && std::fabs(x - m) > h) out.emplace_back(h > 0.0f ? (std::fabs(x - m) - h) / h : INFINITY, c);
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  if (int(out.size()) > S) out.resize(size_t(std::max(S, 0)));
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  for (int i = 0; i < S; ++i) slots[i] = SparseSlot{};
  for (size_t i = 0; i < out.size(); ++i) {
    const int c = out[i].second;
    slots[i] = {to_f16(pre[c] - (mid[c] + half[c] * type.levels[codes[c]])), c};
  }
  return int(out.size());
}

void quantize_value(const float* x, int d, int S, const Datatype& type, uint16_t* scale, uint16_t* zero,
                    uint8_t* codes, SparseSlot* slots) {
  int low[kMaxHeadDim / 2 + 1], high[kMaxHeadDim / 2 + 1], outl[kMaxHeadDim / 2];
  order_ends(x, d, S, low, high);
  const TokenSplit sp = best_split(x, S, low, high);
  *scale = to_f16(0.5f * (sp.hi - sp.lo));
  *zero = to_f16(0.5f * (sp.hi + sp.lo));
  const float s = f16_to_f32(*scale), z = f16_to_f32(*zero);
  for (int c = 0; c < d; ++c) codes[c] = type.code(s > 0.0f ? (x[c] - z) / s : 0.0f);
  int n = 0;
  for (int j = 0; j < sp.n_low; ++j) outl[n++] = low[j];
  for (int j = 0; j < S - sp.n_low; ++j) outl[n++] = high[j];
  std::sort(outl, outl + n);
  for (int i = 0; i < S; ++i) {
    const int c = outl[i];
    slots[i] = {to_f16(x[c] - (z + s * type.levels[codes[c]])), c};
  }
}

namespace {

class KvqKeyCodec final : public KeyCodec {
 public:
  KvqKeyCodec(const CodecContext& ctx, const Settings& s)
      : d_(ctx.head_dim), s_(s), S_(outlier_slots(s.outliers, d_)), ib_(index_bytes(d_)), cb_(code_bytes(d_, s.bits)),
        row_(key_row_bytes(d_, s)), rope_(d_, ctx.rope), type_(ctx.calib->key_levels) {
    mid_.resize(size_t(d_));
    half_.resize(size_t(d_));
    for (int c = 0; c < d_; ++c) {
      mid_[size_t(c)] = 0.5f * (ctx.calib->key_lo[size_t(c)] + ctx.calib->key_hi[size_t(c)]);
      half_[size_t(c)] = 0.5f * (ctx.calib->key_hi[size_t(c)] - ctx.calib->key_lo[size_t(c)]);
    }
  }
  int head_dim() const override { return d_; }
  int block_tokens() const override { return kBlockTokens; }
  size_t block_bytes() const override { return kBlockTokens * row_; }
  size_t param_bytes() const override {
    return (mid_.size() + half_.size() + type_.levels.size() + type_.mids.size()) * sizeof(float) + rope_.bytes();
  }

  void encode(const float* keys, int64_t pos0, uint8_t* block) const override {
    for (int t = 0; t < kBlockTokens; ++t) encode_token(keys + size_t(t) * d_, pos0 + t, t, block);
  }
  bool encodes_single_tokens() const override { return true; }
  void encode_token(const float* key, int64_t pos, int slot, uint8_t* block) const override {
    uint8_t* row = block + size_t(slot) * row_;
    std::vector<float> pre(key, key + d_);
    rope_.rotate(pre.data(), pos, /*inverse=*/true);
    std::vector<uint8_t> codes(static_cast<size_t>(d_));
    std::vector<SparseSlot> slots(static_cast<size_t>(S_));
    const int n = quantize_key(pre.data(), d_, S_, type_, mid_.data(), half_.data(), codes.data(), slots.data());
    pack_planes(codes.data(), d_, s_.bits, row);
    if (S_ == 0) return;
    row[cb_] = uint8_t(n);
    const Sparse sp = sparse(row);
    for (int i = 0; i < S_; ++i) {
      put_u16(sp.values + 2 * i, slots[size_t(i)].value);
      put_index(sp.indices + size_t(i) * ib_, ib_, slots[size_t(i)].channel);
    }
  }

  void decode(const uint8_t* block, int64_t pos0, float* keys) const override {
    for (int t = 0; t < kBlockTokens; ++t) decode_row(block + size_t(t) * row_, pos0 + t, keys + size_t(t) * d_);
  }

  size_t query_state_floats() const override { return size_t(d_); }
  void prepare_query(const float* q, float* state, Workspace&) const override { std::copy_n(q, d_, state); }

  // RoPE on the fly from the stored pre-RoPE codes, split as R(p) = R(256 a) R(b): within one
  // segment of 256 positions the query rows are turned back by R(256 a) once, and the tokens are
  // dequantized (levels, ranges, outliers) and turned by R(b) straight from the table into a
  // scratch, then scored by the shared float kernel. No full-length key cache is built;
  // q . R(p) k is the same number as (R(256 a)^T q) . (R(b) k) up to rounding. Rows go kRun at
  // a time (tokens' rows are contiguous across blocks) through all three steps, so the scratch
  // stays in L1; kRun is a multiple of the float kernel's tokens per tile, so tokens are grouped
  // as in one call per segment and the scores have the same bits.
  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t pos0, int64_t i0, int64_t i1, float* out,
              size_t out_stride, Workspace& ws) const override {
    constexpr int64_t kSeg = RopeTable::kSegment;
    float* const tile = ws.get<float>(Workspace::kCodec0, size_t(kRun) * d_);
    float* const qrot = ws.get<float>(Workspace::kCodec1, size_t(n_q) * d_);
    const int half = d_ / 2;
    for (int64_t a = i0; a < i1;) {
      const int64_t p = pos0 + a;
      const int64_t b = std::min(i1, a + (kSeg - p % kSeg));
      const float* q = states;
      if (!rope_.identity()) {
        const float* hs = rope_.segment(p / kSeg);
        std::copy_n(states, size_t(n_q) * d_, qrot);
        for (int r = 0; r < n_q; ++r) rope_.rotate_by(qrot + size_t(r) * d_, hs, hs + half, /*inverse=*/true);
        q = qrot;
      }
      for (int64_t i = a; i < b; i += kRun) {
        const int n = int(std::min<int64_t>(kRun, b - i));
        decode_pre_rows(blocks + size_t(i) * row_, n, tile);
        rope_.rotate_low_rows(tile, size_t(d_), n, int((pos0 + i) % kSeg), /*inverse=*/false);
        float_scores(q, n_q, size_t(d_), tile, size_t(d_), n, d_, out + (i - i0), out_stride);
      }
      a = b;
    }
  }

 private:
  Sparse sparse(uint8_t* row) const { return {row + cb_ + 1, row + cb_ + 1 + 2 * S_}; }

  void decode_row(const uint8_t* row, int64_t pos, float* x) const {
    decode_pre(row, x);
    rope_.rotate(x, pos, /*inverse=*/false);
  }

  // The key before RoPE: levels scaled into each channel's range, outliers patched in.
  void decode_pre(const uint8_t* row, float* x) const { decode_pre_rows(row, 1, x); }
  // The same for n consecutive rows (rows + r * row_) into x + r * d.
  void decode_pre_rows(const uint8_t* rows, int n, float* x) const {
    lut_affine_planes_channels_rows(rows, row_, n, d_, s_.bits, type_.levels.data(), mid_.data(), half_.data(), x,
                                    size_t(d_));
    if (S_ == 0) return;
    for (int r = 0; r < n; ++r) {
      const uint8_t* row = rows + size_t(r) * row_;
      const uint8_t* slots = row + cb_ + 1;
      add_outliers(slots, slots + 2 * S_, 1, std::min<int>(row[cb_], S_), ib_, d_, x + size_t(r) * d_);
    }
  }

  int d_;
  Settings s_;
  int S_, ib_;
  size_t cb_, row_;
  RopeTable rope_;
  Datatype type_;
  std::vector<float> mid_, half_;
};

class KvqValueCodec final : public ValueCodec {
 public:
  KvqValueCodec(const CodecContext& ctx, const Settings& s)
      : d_(ctx.head_dim), s_(s), S_(outlier_slots(s.outliers, d_)), ib_(index_bytes(d_)), cb_(code_bytes(d_, s.bits)),
        row_(value_row_bytes(d_, s)), type_(ctx.calib->value_levels) {}
  int head_dim() const override { return d_; }
  int block_tokens() const override { return kBlockTokens; }
  size_t block_bytes() const override { return kBlockTokens * row_; }
  size_t param_bytes() const override { return (type_.levels.size() + type_.mids.size()) * sizeof(float); }

  void encode(const float* values, int64_t pos0, uint8_t* block) const override {
    for (int t = 0; t < kBlockTokens; ++t) encode_token(values + size_t(t) * d_, pos0 + t, t, block);
  }
  bool encodes_single_tokens() const override { return true; }
  void encode_token(const float* x, int64_t, int slot, uint8_t* block) const override {
    uint8_t* row = block + size_t(slot) * row_;
    std::vector<uint8_t> codes(static_cast<size_t>(d_));
    std::vector<SparseSlot> slots(static_cast<size_t>(S_));
    uint16_t hs, hz;
    quantize_value(x, d_, S_, type_, &hs, &hz, codes.data(), slots.data());
    put_u16(row, hs);
    put_u16(row + 2, hz);
    pack_planes(codes.data(), d_, s_.bits, row + 4);
    uint8_t* vals = row + 4 + cb_;
    uint8_t* idx = vals + 2 * S_;
    for (int i = 0; i < S_; ++i) {
      put_u16(vals + 2 * i, slots[size_t(i)].value);
      put_index(idx + size_t(i) * ib_, ib_, slots[size_t(i)].channel);
    }
  }

  void decode(const uint8_t* block, int64_t, float* values) const override {
    for (int t = 0; t < kBlockTokens; ++t) decode_row(block + size_t(t) * row_, values + size_t(t) * d_);
  }

  size_t accum_floats() const override { return size_t(d_); }
  // Tokens are dequantized (levels, scale and zero, outliers) kRun rows at a time into a scratch
  // that stays in L1 and accumulated by the shared float kernel (each accumulator still adds
  // the tokens in order, so the bits are those of one call).
  void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1,
                  float* acc, Workspace& ws) const override {
    float* const tile = ws.get<float>(Workspace::kCodec0, size_t(kRun) * d_);
    for (int64_t i = i0; i < i1; i += kRun) {
      const int n = int(std::min<int64_t>(kRun, i1 - i));
      decode_rows(blocks + size_t(i) * row_, n, tile);
      float_accumulate(w + (i - i0), w_stride, n_q, tile, size_t(d_), n, d_, acc, size_t(d_));
    }
  }
  void finalize(const float* acc, int n_q, float* out) const override { std::copy_n(acc, size_t(n_q) * d_, out); }

 private:
  void decode_row(const uint8_t* row, float* x) const { decode_rows(row, 1, x); }
  // n consecutive rows (rows + r * row_) into x + r * d.
  void decode_rows(const uint8_t* rows, int n, float* x) const {
    float zero[kRun], scale[kRun];
    VQ_CHECK(n <= kRun, "kvquant: more rows than one run");
    for (int r = 0; r < n; ++r) {
      const uint8_t* row = rows + size_t(r) * row_;
      scale[r] = f16_to_f32(get_u16(row));
      zero[r] = f16_to_f32(get_u16(row + 2));
    }
    lut_affine_planes_rows(rows + 4, row_, n, d_, s_.bits, type_.levels.data(), zero, scale, x, size_t(d_));
    for (int r = 0; r < n; ++r) {
      const uint8_t* slots = rows + size_t(r) * row_ + 4 + cb_;
      add_outliers(slots, slots + 2 * S_, 1, S_, ib_, d_, x + size_t(r) * d_);
    }
  }

  int d_;
  Settings s_;
  int S_, ib_;
  size_t cb_, row_;
  Datatype type_;
};

}  // namespace

std::unique_ptr<KeyCodec> make_key_codec(const CodecContext& ctx, const Settings& s) {
  if (key_lanes_apply(ctx.head_dim, ctx.rope)) return make_lane_key_codec(ctx, s);
  return std::make_unique<KvqKeyCodec>(ctx, s);
}
std::unique_ptr<ValueCodec> make_value_codec(const CodecContext& ctx, const Settings& s) {
  if (value_lanes_apply(ctx.head_dim)) return make_lane_value_codec(ctx, s);
  return std::make_unique<KvqValueCodec>(ctx, s);
}

}  // namespace vq::kv::kvquant
