// KVQuant's codecs with tokens in the vector lanes: the same quantizer, levels, outliers and
// bits per element as the row codecs (kvquant_codecs.cpp), with the codes moved into the token-lane
// words of TurboQuant's layout (lane_words.h), so that attention reads them without decoding
// tokens to floats.
//
// Block layouts (16 tokens):
//   key:   code words (2 bits d bytes) | 16 counts | S x 16 fp16 values | S x 16 indices
//   value: 16 fp16 scales | code words (TurboLanePart's value part) | 16 fp16 zeros |
//          S x 16 fp16 values | S x 16 indices
// Every byte is per token, as in the rows: 16 key rows or value rows of kvquant_rows.h. The
// outlier slots are slot-major, so that one slot of 16 tokens is a vector.
//
// Keys: q . R(p) k_pre with p = 256 a + b is (R(256 a)^T q) . (R(b) k_pre): the query rows are
// turned back once per segment of 256 positions, and the kernel (kvquant_lane_kernels.cpp) turns
// each vector of 16 tokens' pre-RoPE channel pair by its tokens' own angles, read from a table of
// a pair's angles at consecutive b (RopeTable::angle_columns, 272 columns so that a block that
// starts at b <= 255 stays inside it), and adds the two channels' products for each query row.
// An outlier channel c of token t adds its sparse value (kvquant_rows.h: the value minus its dense
// decode) times the turned query's component for c; a slot of 16 tokens at a time, the angles
// and query components gathered by channel.
//
// Values: the turbo lane kernel gives sum_t (w_t scale_t) level(code_tc) per channel; the zeros
// add sum_t w_t zero_t to every channel (one more accumulator float, added in finalize), and an
// outlier adds w_t times its sparse value to its channel (value_extras).
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "src/core/fp16.h"
#include "src/kv/methods/kvquant/kvquant_lane_kernels.h"
#include "src/kv/methods/kvquant/kvquant_rows.h"
#include "src/kv/methods/turbo/lane_words.h"
#include "src/kv/methods/turbo/turbo_lanes.h"
#include "src/kv/rope_table.h"
#include "veloxquant/kv/calibration.h"

namespace vq::kv::kvquant {
namespace {

constexpr int kSub = LaneWords::kTokens;
constexpr int kAngleColumns = int(kvquant_lanes::kAngleColumns);
static_assert(kAngleColumns >= RopeTable::kSegment + kSub, "a block that starts in a segment must end in its columns");

class KvqLaneKeyCodec final : public KeyCodec {
 public:
  KvqLaneKeyCodec(const CodecContext& ctx, const Settings& s)
      : d_(ctx.head_dim), s_(s), S_(outlier_slots(s.outliers, d_)), ib_(index_bytes(d_)),
        slot_bytes_(S_ > 0 ? 1 + size_t(S_) * (2 + ib_) : 0), words_(d_, s.bits), rope_(d_, ctx.rope),
        type_(ctx.calib->key_levels) {
    mid_.resize(size_t(d_));
    half_.resize(size_t(d_));
    for (int c = 0; c < d_; ++c) {
      mid_[size_t(c)] = 0.5f * (ctx.calib->key_lo[size_t(c)] + ctx.calib->key_hi[size_t(c)]);
      half_[size_t(c)] = 0.5f * (ctx.calib->key_hi[size_t(c)] - ctx.calib->key_lo[size_t(c)]);
    }
    // Pair-major, as the kernel reads them: the tables of both channels of a pair (the same float
    // expression as dense(), so that the kernel's keys are the reference's), then its angles.
    const int pairs = d_ / 2;
    const bool neox = ctx.rope.style == RopeSpec::Style::kNeox;
    tables_.resize(size_t(pairs) * 32);
    for (int j = 0; j < pairs; ++j) {
      for (int e = 0; e < 2; ++e) {
        const int c = neox ? j + e * pairs : 2 * j + e;
        for (int i = 0; i < 16; ++i) tables_[size_t(j) * 32 + size_t(e) * 16 + size_t(i)] = dense(c, i % int(type_.levels.size()));
      }
    }
    std::vector<float> cs(size_t(pairs) * kAngleColumns), sn(cs.size());
    rope_.angle_columns(kAngleColumns, cs.data(), sn.data());
    angles_.resize(size_t(pairs) * 2 * kAngleColumns);
    for (int j = 0; j < pairs; ++j) {
      std::copy_n(cs.data() + size_t(j) * kAngleColumns, kAngleColumns, angles_.data() + size_t(j) * 2 * kAngleColumns);
      std::copy_n(sn.data() + size_t(j) * kAngleColumns, kAngleColumns,
                  angles_.data() + size_t(j) * 2 * kAngleColumns + kAngleColumns);
    }
    keys_.d = d_;
    keys_.bits = s.bits;
    keys_.neox = neox;
    keys_.tables = tables_.data();
    keys_.angles = angles_.data();
    keys_.cols = kAngleColumns;
    keys_.words_bytes = words_.bytes();
    keys_.S = S_;
    keys_.ib = ib_;
  }
  int head_dim() const override { return d_; }
  int block_tokens() const override { return kSub; }
  size_t block_bytes() const override { return words_.bytes() + kSub * slot_bytes_; }
  size_t param_bytes() const override {
    return (mid_.size() + half_.size() + type_.levels.size() + type_.mids.size() + tables_.size() + angles_.size()) *
               sizeof(float) +
           rope_.bytes();
  }

  void encode(const float* keys, int64_t pos0, uint8_t* block) const override {
    for (int t = 0; t < kSub; ++t) encode_token(keys + size_t(t) * d_, pos0 + t, t, block);
  }
  bool encodes_single_tokens() const override { return true; }
  void encode_token(const float* key, int64_t pos, int slot, uint8_t* block) const override {
    std::vector<float> pre(key, key + d_);
    rope_.rotate(pre.data(), pos, /*inverse=*/true);
    std::vector<uint8_t> codes(static_cast<size_t>(d_));
    std::vector<SparseSlot> slots(static_cast<size_t>(S_));
    const int n = quantize_key(pre.data(), d_, S_, type_, mid_.data(), half_.data(), codes.data(), slots.data());
    words_.put(codes.data(), slot, block);
    if (S_ == 0) return;
    block[words_.bytes() + size_t(slot)] = uint8_t(n);
    for (int i = 0; i < S_; ++i) {
      put_u16(value_at(block, i, slot), slots[size_t(i)].value);
      put_index(index_at(block, i, slot), ib_, slots[size_t(i)].channel);
    }
  }

  // The plain reference: each channel's level in its range, the outliers in place, then RoPE.
  void decode(const uint8_t* block, int64_t pos0, float* keys) const override {
    for (int t = 0; t < kSub; ++t) {
      float* x = keys + size_t(t) * d_;
      for (int c = 0; c < d_; ++c) x[c] = inlier(block, t, c);
      const int n = S_ > 0 ? std::min<int>(block[words_.bytes() + size_t(t)], S_) : 0;
      add_outliers(value_at(block, 0, t), index_at(block, 0, t), kSub, n, ib_, d_, x);
      rope_.rotate(x, pos0 + t, /*inverse=*/false);
    }
  }

  size_t query_state_floats() const override { return size_t(d_); }
  void prepare_query(const float* q, float* state, Workspace&) const override { std::copy_n(q, d_, state); }

  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t pos0, int64_t i0, int64_t i1, float* out,
              size_t out_stride, Workspace& ws) const override {
    constexpr int64_t kSeg = RopeTable::kSegment;
    float* const qrot = ws.get<float>(Workspace::kCodec0, size_t(n_q) * d_);
    const int half = d_ / 2;
    const size_t bb = block_bytes();
    for (int64_t i = i0; i < i1;) {
      // The blocks whose first token lies in segment a share one turn of the query rows.
      const int64_t first = pos0 + kSub * (i / kSub);
      const int64_t a = first / kSeg;
      const int64_t end_block = (kSeg * (a + 1) - pos0 + kSub - 1) / kSub;
      const int64_t e = std::min(i1, kSub * end_block);
      std::copy_n(states, size_t(n_q) * d_, qrot);
      if (!rope_.identity()) {
        const float* hs = rope_.segment(a);
        for (int r = 0; r < n_q; ++r) rope_.rotate_by(qrot + size_t(r) * d_, hs, hs + half, /*inverse=*/true);
      }
      const int64_t col0 = first - kSeg * a;
      kvquant_lanes::rope_scores(keys_, qrot, n_q, size_t(d_), blocks, bb, i, e, col0, out + (i - i0), out_stride);
      i = e;
    }
  }

 private:
  // Slot i of token t: its fp16 value and its channel index (the 16 counts come first).
  template <typename B>
  B* value_at(B* block, int i, int t) const {
    return block + words_.bytes() + kSub + 2 * (size_t(i) * kSub + size_t(t));
  }
  template <typename B>
  B* index_at(B* block, int i, int t) const {
    return block + words_.bytes() + kSub + 2 * size_t(S_) * kSub + size_t(ib_) * (size_t(i) * kSub + size_t(t));
  }
  float inlier(const uint8_t* block, int t, int c) const { return dense(c, words_.code(block, t, c)); }
  float dense(int c, int code) const { return mid_[size_t(c)] + half_[size_t(c)] * type_.levels[size_t(code)]; }

  int d_;
  Settings s_;
  int S_, ib_;
  size_t slot_bytes_;
  LaneWords words_;
  RopeTable rope_;
  Datatype type_;
  std::vector<float> mid_, half_, tables_, angles_;
  kvquant_lanes::RopeKeys keys_;
};

class KvqLaneValueCodec final : public ValueCodec {
 public:
  KvqLaneValueCodec(const CodecContext& ctx, const Settings& s)
      : d_(ctx.head_dim), s_(s), S_(outlier_slots(s.outliers, d_)), ib_(index_bytes(d_)),
        slot_bytes_(size_t(S_) * (2 + ib_)), type_(ctx.calib->value_levels),
        // Float sums: TurboQuant's fixed-point sums would move this method's outputs (KL 0.0736 ->
        // 0.0751 on 2 chunks of Gemma 3 270M) for a small gain (docs/performance.md).
        part_(d_, s.bits, type_.levels, /*values=*/true, /*fixed_point=*/false) {
    extras_.d = d_;
    extras_.zeros_at = part_.bytes();
    extras_.S = S_;
    extras_.ib = ib_;
  }
  int head_dim() const override { return d_; }
  int block_tokens() const override { return kSub; }
  size_t block_bytes() const override { return part_.bytes() + 2 * kSub + kSub * slot_bytes_; }
  size_t param_bytes() const override { return (type_.levels.size() + type_.mids.size()) * sizeof(float); }

  void encode(const float* values, int64_t pos0, uint8_t* block) const override {
    for (int t = 0; t < kSub; ++t) encode_token(values + size_t(t) * d_, pos0 + t, t, block);
  }
  bool encodes_single_tokens() const override { return true; }
  void encode_token(const float* x, int64_t, int slot, uint8_t* block) const override {
    std::vector<uint8_t> codes(static_cast<size_t>(d_));
    std::vector<SparseSlot> slots(static_cast<size_t>(S_));
    uint16_t hs, hz;
    quantize_value(x, d_, S_, type_, &hs, &hz, codes.data(), slots.data());
    part_.put(codes.data(), hs, slot, block);
    put_u16(block + part_.bytes() + 2 * slot, hz);
    for (int i = 0; i < S_; ++i) {
      put_u16(value_at(block, i, slot), slots[size_t(i)].value);
      put_index(index_at(block, i, slot), ib_, slots[size_t(i)].channel);
    }
  }

  // The plain reference: zero + scale * level, the outliers in place.
  void decode(const uint8_t* block, int64_t, float* values) const override {
    for (int t = 0; t < kSub; ++t) {
      float* x = values + size_t(t) * d_;
      for (int c = 0; c < d_; ++c) x[c] = inlier(block, t, c);
      add_outliers(value_at(block, 0, t), index_at(block, 0, t), kSub, S_, ib_, d_, x);
    }
  }

  // The channels' sums, then the sum of w_t zero_t, which every channel gets in finalize.
  size_t accum_floats() const override { return size_t(d_) + 1; }
  void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1,
                  float* acc, Workspace&) const override {
    const size_t A = accum_floats(), bb = block_bytes();
    part_.accumulate(w, w_stride, n_q, blocks, bb, i0, i1, acc, A);
    kvquant_lanes::value_extras(extras_, w, w_stride, n_q, blocks, bb, i0, i1, acc, A);
  }
  void finalize(const float* acc, int n_q, float* out) const override {
    const size_t A = accum_floats();
    for (int r = 0; r < n_q; ++r) {
      const float* a = acc + size_t(r) * A;
      for (int c = 0; c < d_; ++c) out[size_t(r) * d_ + size_t(c)] = a[c] + a[d_];
    }
  }

 private:
  template <typename B>
  B* value_at(B* block, int i, int t) const {
    return block + part_.bytes() + 2 * kSub + 2 * (size_t(i) * kSub + size_t(t));
  }
  template <typename B>
  B* index_at(B* block, int i, int t) const {
    return block + part_.bytes() + 2 * kSub + 2 * size_t(S_) * kSub + size_t(ib_) * (size_t(i) * kSub + size_t(t));
  }
  float zero_of(const uint8_t* block, int t) const { return f16_to_f32(get_u16(block + part_.bytes() + 2 * t)); }
  float scale_of(const uint8_t* block, int t) const { return f16_to_f32(get_u16(block + 2 * t)); }
  float inlier(const uint8_t* block, int t, int c) const {
    return zero_of(block, t) + scale_of(block, t) * type_.levels[size_t(part_.code(block, t, c))];
  }

  int d_;
  Settings s_;
  int S_, ib_;
  size_t slot_bytes_;
  Datatype type_;
  TurboLanePart part_;
  kvquant_lanes::LaneValues extras_;
};

}  // namespace

bool value_lanes_apply(int d) { return d > 0 && d % LaneWords::kGroup == 0 && d <= 4096; }
bool key_lanes_apply(int d, const RopeSpec& rope) {
  return value_lanes_apply(d) && (rope.style != RopeSpec::Style::kNeox || d % (2 * LaneWords::kGroup) == 0);
}

std::unique_ptr<KeyCodec> make_lane_key_codec(const CodecContext& ctx, const Settings& s) {
  return std::make_unique<KvqLaneKeyCodec>(ctx, s);
}
std::unique_ptr<ValueCodec> make_lane_value_codec(const CodecContext& ctx, const Settings& s) {
  return std::make_unique<KvqLaneValueCodec>(ctx, s);
}

}  // namespace vq::kv::kvquant
