// TurboQuant with tokens in the vector lanes: the layout (turbo_lanes.h), TurboLanePart and the
// lane codecs, which call the kernels of turbo_lane_kernels.cpp.
#include "src/kv/methods/turbo/turbo_lanes.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "src/core/fp16.h"
#include "src/kv/methods/turbo/lane_words.h"
#include "src/kv/methods/turbo/turbo_lane_kernels.h"
#include "veloxquant/error.h"

namespace vq::kv {
namespace {

constexpr int kSub = 16;
constexpr int kGroup = LaneWords::kGroup;
constexpr size_t kScaleBytes = kSub * 2;
constexpr int kMaxPartDim = 4096;  // a part's channels (its query state is prepared on the stack)

// The block layout, scalar: the encoder and the plain reference decode. The 16 fp16 scales,
// then the code words.
class LaneLayout {
 public:
  LaneLayout(int d, int bits) : words_(d, bits) {}
  size_t bytes() const { return kScaleBytes + words_.bytes(); }

  void put(const uint8_t* codes, uint16_t scale, int t, uint8_t* block) const {
    std::memcpy(block + 2 * t, &scale, 2);
    words_.put(codes, t, block + kScaleBytes);
  }
  int code(const uint8_t* block, int t, int c) const { return words_.code(block + kScaleBytes, t, c); }
  float scale(const uint8_t* block, int t) const {
    uint16_t h;
    std::memcpy(&h, block + 2 * t, 2);
    return f16_to_f32(h);
  }

 private:
  LaneWords words_;
};

}  // namespace

TurboLanePart::TurboLanePart(int d, int bits, std::vector<float> levels, bool values, bool fixed_point)
    : d_(d), bits_(bits), signs_(values && sign_lanes::apply(d, bits)),
      tables_(!values && bits == 1 && d <= kTurboLaneTableDim),
      fixed_(fixed_point && turbo_lanes::fixed_scores_apply(d, bits)), levels_(std::move(levels)) {
  VQ_CHECK(turbo_lane_part_applies(d, bits), fmt::format("turbo lanes: no lane part of {} channels at {} bits", d, bits));
  for (int i = 0; i < 16; ++i) table16_[size_t(i)] = levels_[size_t(i) % levels_.size()];
  if (fixed_) {
    float top = 0.0f;
    for (float l : levels_) top = std::max(top, std::fabs(l));
    fixed_level_unit_ = top / float(turbo_lanes::kFixedLevel);
    for (int i = 0; i < 32; ++i) {
      const float l = levels_[size_t(i) % levels_.size()];
      fixed_levels_[size_t(i)] = top > 0.0f ? int16_t(std::lrint(l / fixed_level_unit_)) : int16_t(0);
    }
  }
  if (signs_) sign_lanes::make_patterns(levels_[0], levels_[1], patterns_.data());
}

size_t TurboLanePart::bytes() const { return signs_ ? sign_lanes::block_bytes(d_) : LaneLayout(d_, bits_).bytes(); }

void TurboLanePart::put(const uint8_t* codes, uint16_t scale, int t, uint8_t* part) const {
  if (signs_) {
    sign_lanes::put(codes, scale, t, d_, part);
  } else {
    LaneLayout(d_, bits_).put(codes, scale, t, part);
  }
}

int TurboLanePart::code(const uint8_t* part, int t, int c) const {
  return signs_ ? sign_lanes::code(part, t, c) : LaneLayout(d_, bits_).code(part, t, c);
}

// A key part's whole groups come from each token's words read once (LaneWords::group_codes; the
// many-row paths decode every tile they score); the tail and the value planes code by code.
void TurboLanePart::decode(const uint8_t* part, float* x) const {
  const LaneLayout layout(d_, bits_);
  const LaneWords words(d_, bits_);
  const int whole = signs_ ? 0 : d_ / kGroup * kGroup;
  uint8_t codes[kMaxPartDim];
  for (int tok = 0; tok < kSub; ++tok) {
    const float s = layout.scale(part, tok);  // the scales come first in both layouts
    float* xt = x + size_t(tok) * d_;
    if (whole > 0) words.group_codes(part + kScaleBytes, tok, codes);
    for (int c = 0; c < whole; ++c) xt[c] = 0.0f + s * levels_[codes[c]];
    for (int c = whole; c < d_; ++c) xt[c] = 0.0f + s * levels_[size_t(code(part, tok, c))];
  }
}

float TurboLanePart::scale(const uint8_t* part, int t) const { return LaneLayout(d_, bits_).scale(part, t); }

const uint8_t* TurboLanePart::words(const uint8_t* part) const { return part + kScaleBytes; }

size_t TurboLanePart::query_state_floats() const {
  return fixed_ ? size_t(d_) / 2 + 1 : size_t(d_) * (tables_ ? 4 : 1);
}

// At 1 bit (d up to kTurboLaneTableDim) the prepared query is its nibble tables: for nibble k
// (channels c0 = 4k ..), entry i = sum over those channels j, in order, of q[c0 + j] * level(bit j
// of i), each product and sum rounded in float as written. Otherwise the query itself, read a
// channel at a time. At 2 to 4 bits (fixed_) it is the query in fixed point: the pair words and
// the row's unit of turbo_lane_kernels.h. A query with a value that is not finite gets zero words
// and a NaN unit, so its scores are NaN, as the float kernel's would be.
void TurboLanePart::prepare_query(const float* q, float* state) const {
  if (fixed_) {
    const float top = turbo_lanes::abs_max_if_finite(q, d_);
    const bool finite = !std::isnan(top);
    const float to_fixed = finite && top > 0.0f ? float(turbo_lanes::kFixedQuery) / top : 0.0f;
    int16_t values[kMaxPartDim];
    if (finite) {
      turbo_lanes::to_fixed16(q, d_, to_fixed, values);
    } else {
      std::fill_n(values, d_, int16_t(0));
    }
    const auto fixed = [&](int c) { return uint32_t(uint16_t(values[c])); };
    for (int g = 0; g < d_ / kGroup; ++g) {
      for (int p = 0; p < kGroup / 2; ++p) {
        const uint32_t word = fixed(g * kGroup + turbo_lanes::pair_lo(bits_, p)) |
                              fixed(g * kGroup + turbo_lanes::pair_hi(bits_, p)) << 16;
        std::memcpy(state + size_t(g) * (kGroup / 2) + size_t(p), &word, 4);
      }
    }
    state[d_ / 2] = finite ? top / float(turbo_lanes::kFixedQuery) * fixed_level_unit_
                           : std::numeric_limits<float>::quiet_NaN();
    return;
  }
  if (!tables_) {
    std::copy_n(q, d_, state);
    return;
  }
  turbo_lanes::nibble_tables(q, d_, table16_.data(), state);
}

void TurboLanePart::scores(const float* states, size_t state_stride, int n_q, const uint8_t* blocks, size_t stride,
                           int64_t i0, int64_t i1, float* out, size_t out_stride) const {
  score(false, states, state_stride, n_q, blocks, stride, i0, i1, out, out_stride);
}

void TurboLanePart::add_scores(const float* states, size_t state_stride, int n_q, const uint8_t* blocks,
                               size_t stride, int64_t i0, int64_t i1, float* out, size_t out_stride) const {
  score(true, states, state_stride, n_q, blocks, stride, i0, i1, out, out_stride);
}

void TurboLanePart::score(bool add, const float* states, size_t state_stride, int n_q, const uint8_t* blocks,
                          size_t stride, int64_t i0, int64_t i1, float* out, size_t out_stride) const {
  if (tables_) {
    turbo_lanes::table_scores(add, states, n_q, state_stride, blocks, stride, d_ / kGroup, i0, i1, out, out_stride);
    return;
  }
  if (fixed_) {
    turbo_lanes::fixed_scores(bits_, add, states, n_q, state_stride, blocks, stride, d_, i0, i1,
                              fixed_levels_.data(), out, out_stride);
    return;
  }
  turbo_lanes::scores(bits_, add, states, n_q, state_stride, blocks, stride, d_, i0, i1, table16_.data(), out,
                      out_stride);
}

void TurboLanePart::accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, size_t stride,
                               int64_t i0, int64_t i1, float* acc, size_t acc_stride) const {
  if (signs_) {
    sign_lanes::accumulate(w, w_stride, n_q, blocks, stride, d_, i0, i1, patterns_.data(), acc, acc_stride);
    return;
  }
  if (fixed_) {
    turbo_lanes::fixed_accumulate(bits_, w, w_stride, n_q, blocks, stride, d_, i0, i1, fixed_levels_.data(),
                                  fixed_level_unit_, acc, acc_stride);
    return;
  }
  turbo_lanes::accumulate(bits_, w, w_stride, n_q, blocks, stride, d_, i0, i1, table16_.data(), acc,
                                             acc_stride);
}

namespace {

// A key or a value codec (Base) over blocks of one lane part: the rows' quantizer fills it.
template <typename Base>
class TurboLaneBlockCodec : public Base {
 public:
  TurboLaneBlockCodec(TurboRows rows, bool values, bool fixed_point)
      : rows_(std::move(rows)), part_(rows_.head_dim(), rows_.bits(), rows_.table(), values, fixed_point) {}
  int head_dim() const override { return rows_.head_dim(); }
  int block_tokens() const override { return kSub; }
  size_t block_bytes() const override { return part_.bytes(); }
  size_t param_bytes() const override { return rows_.param_bytes(); }
  void encode(const float* x, int64_t, uint8_t* block) const override {
    for (int t = 0; t < kSub; ++t) encode_token(x + size_t(t) * head_dim(), 0, t, block);
  }
  bool encodes_single_tokens() const override { return true; }
  void encode_token(const float* x, int64_t, int slot, uint8_t* block) const override {
    uint8_t codes[TurboRows::kMaxDim];
    part_.put(codes, rows_.quantize(x, codes), slot, block);
  }
  // x = scale * level(code), as the row layout decodes (lut_affine_planes with zero 0).
  void decode(const uint8_t* block, int64_t, float* x) const override { part_.decode(block, x); }

 protected:
  const TurboLanePart& part() const { return part_; }

 private:
  TurboRows rows_;
  TurboLanePart part_;
};

class TurboLaneKeyCodec final : public TurboLaneBlockCodec<KeyCodec> {
 public:
  TurboLaneKeyCodec(TurboRows rows, bool fixed_point)
      : TurboLaneBlockCodec<KeyCodec>(std::move(rows), false, fixed_point) {}
  size_t query_state_floats() const override { return part().query_state_floats(); }
  void prepare_query(const float* q, float* state, Workspace&) const override { part().prepare_query(q, state); }
  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1, float* out,
              size_t out_stride, Workspace&) const override {
    part().scores(states, query_state_floats(), n_q, blocks, block_bytes(), i0, i1, out, out_stride);
  }
};

class TurboLaneValueCodec final : public TurboLaneBlockCodec<ValueCodec> {
 public:
  TurboLaneValueCodec(TurboRows rows, bool fixed_point)
      : TurboLaneBlockCodec<ValueCodec>(std::move(rows), true, fixed_point) {}
  size_t accum_floats() const override { return size_t(head_dim()); }
  void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1,
                  float* acc, Workspace&) const override {
    part().accumulate(w, w_stride, n_q, blocks, block_bytes(), i0, i1, acc, size_t(head_dim()));
  }
  void finalize(const float* acc, int n_q, float* out) const override {
    std::copy_n(acc, size_t(n_q) * head_dim(), out);
  }
};

}  // namespace

bool turbo_lanes_apply(int d, int bits) {
  return bits >= 1 && bits <= 4 && d % kGroup == 0 && d > 0 && d <= kMaxPartDim;
}

bool turbo_lane_part_applies(int d, int bits) {
  return turbo_lanes_apply(d, bits) || (bits >= 2 && bits <= 4 && d > 0 && d <= kMaxPartDim);
}

std::unique_ptr<KeyCodec> make_turbo_key_codec(TurboRows rows, bool fixed_point) {
  if (turbo_lanes_apply(rows.head_dim(), rows.bits())) {
    return std::make_unique<TurboLaneKeyCodec>(std::move(rows), fixed_point);
  }
  return std::make_unique<TurboKeyCodec>(std::move(rows));
}

std::unique_ptr<ValueCodec> make_turbo_value_codec(TurboRows rows, bool fixed_point) {
  if (turbo_lanes_apply(rows.head_dim(), rows.bits())) {
    return std::make_unique<TurboLaneValueCodec>(std::move(rows), fixed_point);
  }
  return std::make_unique<TurboValueCodec>(std::move(rows));
}

}  // namespace vq::kv
