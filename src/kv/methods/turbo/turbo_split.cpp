// TurboQuant's fractional bit widths. The paper (section 4.3) reaches 2.5 and 3.5 bits by
// splitting the channels into an outlier set and the rest and running two independent instances
// of TurboQuant, the outliers at one bit more; it follows QJL's outlier handling, whose
// reference code picks, in each group of tokens, the channels with the largest norm over the
// group. So here, per group of `group` tokens:
//
//   - the `outliers` (N) channels of largest norm over the group are marked in a d-bit mask;
//   - each token's outlier part (N channels, ascending) and the rest (d - N) are each a
//     TurboQuant-MSE row: own fp16 norm, own seeded rotation (randomized Hadamard for a
//     power-of-two part, a dense Haar matrix otherwise), Lloyd–Max codes of the sphere of the
//     part's dimension, at bits + 1 and bits.
//
// Code bits per element are bits + N / d: N = d / 2 gives the paper's x.5 settings (its text
// counts 32 of 128 channels at 3 bits as 2.5 bits; that split is 2.25, and `outliers=32` gives
// it). The two norms and the mask count too:
//   bits + N / d + 32 / d + 1 / group.
//
// Layout: the group's mask, then the outlier parts of its tokens as blocks of 16 tokens of
// TurboQuant-MSE's own codec at N dimensions (turbo_lanes.h: tokens in the vector lanes when N is
// a multiple of 32, rows otherwise), then the rest as blocks of the d - N codec; the same bytes
// as a row per token. So `group` is a multiple of 16.
//
// Scores: the query is cut along each group's mask and its two parts rotated (once per group
// and query, not per key; a rotation of the whole query cannot serve, since the parts change
// from group to group), then each part's codec scores the group's tokens with its fused kernel
// and the two scores add. Values accumulate in the rotated parts per group through the parts'
// fused kernels and go back to channels once per group.
//
// With more query rows than tokens in a call (prefill), rotating every row per group costs more
// than turning the group's tokens back once: such calls decode the group's tokens to channels
// into the workspace (a tile of group x d floats, as other codecs' tiles) and score and
// accumulate them with the float kernels. The cache holds only the packed group either way.
//
// Tokens of a group share its mask, so they are encoded together when the group is full; until
// then they wait in the cache's fp16 window.
//
// pick=first (an ablation, not the paper) marks the first N channels in every group instead: the
// same bits and layout without the choice of channels, to measure what the choice is worth.
#include "src/kv/methods/turbo/turbo_split.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "src/core/random_rotation.h"
#include "src/kv/kernels/f16_kernels.h"
#include "src/kv/kernels/lut_kernels.h"
#include "src/kv/methods/turbo/turbo_lanes.h"
#include "src/kv/methods/turbo/turbo_split_kernels.h"
#include "src/kv/outlier_channels.h"
#include "src/kv/registry.h"
#include "veloxquant/error.h"

namespace vq::kv {
namespace {

uint64_t part_seed(uint64_t seed, int part) {
  return (seed ^ 0x9E3779B97F4A7C15ull) * 0xBF58476D1CE4E5B9ull + uint64_t(part);
}

// The channels of a group with a damaged mask, ascending: the outliers, then the rest. (An intact
// mask moves rows through turbo_split_kernels.h without lists.)
struct Channels {
  std::vector<int> hi, lo;
  std::vector<uint8_t> in_hi;  // scratch: channel c is in hi
};

// What the key and the value codec share: the channel mask, the two rotations and the two part
// codecs (Part: KeyCodec or ValueCodec), and moving a token between channel space and the parts.
template <typename Part>
class TurboSplit {
 public:
  TurboSplit(const TurboSplitShape& s, uint64_t seed, std::unique_ptr<Part> hi, std::unique_ptr<Part> lo)
      : s_(s), n_(s.outliers), hi_(std::move(hi)), lo_(std::move(lo)), rot_hi_(size_t(s.outliers), part_seed(seed, 0)),
        rot_lo_(size_t(s.d - s.outliers), part_seed(seed, 1)), mask_bytes_(plane_bytes(s.d)),
        subs_(s.group / kTurboBlockTokens) {}

  int d() const { return s_.d; }
  int n() const { return n_; }
  int group() const { return s_.group; }
  const Part& hi() const { return *hi_; }
  const Part& lo() const { return *lo_; }
  size_t block_bytes() const { return mask_bytes_ + size_t(subs_) * (hi_->block_bytes() + lo_->block_bytes()); }
  size_t param_bytes() const { return hi_->param_bytes() + lo_->param_bytes() + rot_hi_.bytes() + rot_lo_.bytes(); }
  // The group's blocks of each part (subs_ of them, 16 tokens each) after its mask.
  const uint8_t* hi_blocks(const uint8_t* block) const { return block + mask_bytes_; }
  const uint8_t* lo_blocks(const uint8_t* block) const {
    return block + mask_bytes_ + size_t(subs_) * hi_->block_bytes();
  }

  void encode(const float* x, uint8_t* block) const {
    std::memset(block, 0, mask_bytes_);
    if (s_.pick_by_norm) {
      for (int c : top_norm_channels(x, s_.group, s_.d, n_)) block[c / 8] |= uint8_t(1u << (c % 8));
    } else {
      for (int c = 0; c < n_; ++c) block[c / 8] |= uint8_t(1u << (c % 8));
    }
    std::vector<float> yh(part_floats(s_.group, n_)), yl(part_floats(s_.group, s_.d - n_));
    to_parts(block, x, size_t(s_.d), s_.group, yh.data(), yl.data());
    uint8_t* hb = block + mask_bytes_;
    uint8_t* lb = hb + size_t(subs_) * hi_->block_bytes();
    for (int j = 0; j < subs_; ++j) {
      hi_->encode(yh.data() + size_t(j) * kTurboBlockTokens * n_, 0, hb + size_t(j) * hi_->block_bytes());
      lo_->encode(yl.data() + size_t(j) * kTurboBlockTokens * (s_.d - n_), 0, lb + size_t(j) * lo_->block_bytes());
    }
  }
  void decode(const uint8_t* block, float* x) const {
    std::vector<float> yh(part_floats(s_.group, n_)), yl(part_floats(s_.group, s_.d - n_));
    decode(block, x, yh.data(), yl.data());
  }
  // The same with the parts' scratch given (yh, yl: part_floats of the group's rows each).
  void decode(const uint8_t* block, float* x, float* yh, float* yl) const {
    const int rest = s_.d - n_;
    for (int j = 0; j < subs_; ++j) {
      hi_->decode(hi_blocks(block) + size_t(j) * hi_->block_bytes(), 0, yh + size_t(j) * kTurboBlockTokens * n_);
      lo_->decode(lo_blocks(block) + size_t(j) * lo_->block_bytes(), 0, yl + size_t(j) * kTurboBlockTokens * rest);
    }
    std::fill_n(x, size_t(s_.group) * s_.d, 0.0f);
    add_from_parts(block, yh, yl, s_.group, x, size_t(s_.d));
  }
  // The group's tokens decoded to channels into the workspace (group x d floats): what the
  // many-row path of scores and values reads. Uses kCodec0..2, which the part codecs' decode
  // does not touch.
  const float* decode_tile(const uint8_t* block, Workspace& ws) const {
    float* x = ws.get<float>(Workspace::kCodec0, size_t(s_.group) * size_t(s_.d));
    float* yh = ws.get<float>(Workspace::kCodec1, part_floats(s_.group, n_));
    float* yl = ws.get<float>(Workspace::kCodec2, part_floats(s_.group, s_.d - n_));
    decode(block, x, yh, yl);
    return x;
  }
  // Whether a call for n_q query rows over n tokens of a group takes the many-row path: the
  // per-row path rotates each row's two parts (and, for values, turns them back) once per group,
  // the many-row path each token once, so it is cheaper when rows outnumber the tokens. Prefill
  // takes it; decode, with a few rows per KV head, does not.
  static bool many_rows(int n_q, int n) { return n_q >= n; }

  // Floats of a buffer of `rows` part rows of `dim` floats, with the movers' slack.
  static size_t part_floats(int rows, int dim) { return size_t(rows) * size_t(dim) + turbo_split::kPartSlack; }
  // rows of x (channel space, x_stride apart) -> hi rows R_hi x_hi (n floats apart) and lo rows
  // R_lo x_lo (d - n apart); hi and lo hold part_floats.
  void to_parts(const uint8_t* mask, const float* x, size_t x_stride, int rows, float* hi, float* lo) const {
    const int rest = s_.d - n_;
    if (!turbo_split::gather_parts(x, x_stride, rows, mask, s_.d, n_, hi, lo)) {
      Channels ch;
      channels(mask, &ch);
      for (int r = 0; r < rows; ++r) {
        const float* xr = x + size_t(r) * x_stride;
        for (int j = 0; j < n_; ++j) hi[size_t(r) * n_ + j] = xr[ch.hi[size_t(j)]];
        for (int j = 0; j < rest; ++j) lo[size_t(r) * rest + j] = xr[ch.lo[size_t(j)]];
      }
    }
    rot_hi_.forward_rows(hi, size_t(rows), size_t(n_));
    rot_lo_.forward_rows(lo, size_t(rows), size_t(rest));
  }
  // acc rows (acc_stride apart) += the channel-space vectors whose rotated parts are the rows of
  // hi and lo (laid out as to_parts writes them; both are overwritten).
  void add_from_parts(const uint8_t* mask, float* hi, float* lo, int rows, float* acc, size_t acc_stride) const {
    const int rest = s_.d - n_;
    rot_hi_.inverse_rows(hi, size_t(rows), size_t(n_));
    rot_lo_.inverse_rows(lo, size_t(rows), size_t(rest));
    if (turbo_split::scatter_add_parts(hi, lo, rows, mask, s_.d, n_, acc, acc_stride)) return;
    Channels ch;
    channels(mask, &ch);
    for (int r = 0; r < rows; ++r) {
      float* a = acc + size_t(r) * acc_stride;
      for (int j = 0; j < n_; ++j) a[ch.hi[size_t(j)]] += hi[size_t(r) * n_ + j];
      for (int j = 0; j < rest; ++j) a[ch.lo[size_t(j)]] += lo[size_t(r) * rest + j];
    }
  }

  // The channels of a damaged mask (a saved cache's, with other than N channels marked): the first
  // N marked ones, completed by the first unmarked ones, ascending, and the rest.
  void channels(const uint8_t* block, Channels* ch) const {
    ch->hi.clear();
    ch->lo.clear();
    ch->in_hi.assign(size_t(s_.d), 0);
    for (int c = 0; c < s_.d && int(ch->hi.size()) < n_; ++c) {
      if ((block[c / 8] >> (c % 8)) & 1) ch->hi.push_back(c), ch->in_hi[size_t(c)] = 1;
    }
    for (int c = 0; c < s_.d && int(ch->hi.size()) < n_; ++c) {
      if (!ch->in_hi[size_t(c)]) ch->hi.push_back(c), ch->in_hi[size_t(c)] = 1;
    }
    std::sort(ch->hi.begin(), ch->hi.end());
    for (int c = 0; c < s_.d; ++c) {
      if (!ch->in_hi[size_t(c)]) ch->lo.push_back(c);
    }
  }

  // fn(block, first token of the block in [i0, i1), its slot in the block, how many) for the
  // blocks that tokens [i0, i1) of a run touch.
  template <typename Fn>
  void for_blocks(const uint8_t* blocks, int64_t i0, int64_t i1, Fn fn) const {
    const int64_t G = s_.group;
    for (int64_t b = i0 / G; b * G < i1; ++b) {
      const int64_t a = std::max(i0, b * G), e = std::min(i1, (b + 1) * G);
      fn(blocks + size_t(b) * block_bytes(), a, int(a - b * G), int(e - a));
    }
  }

 private:
  TurboSplitShape s_;
  int n_;
  std::unique_ptr<Part> hi_, lo_;
  RandomRotation rot_hi_, rot_lo_;
  size_t mask_bytes_;
  int subs_;
};

template <typename Base>
class TurboSplitCodec : public Base {
 public:
  TurboSplitCodec(const TurboSplitShape& s, uint64_t seed, std::unique_ptr<Base> hi, std::unique_ptr<Base> lo)
      : split_(s, seed, std::move(hi), std::move(lo)) {}
  int head_dim() const override { return split_.d(); }
  int block_tokens() const override { return split_.group(); }
  size_t block_bytes() const override { return split_.block_bytes(); }
  size_t param_bytes() const override { return split_.param_bytes(); }
  void encode(const float* x, int64_t, uint8_t* block) const override { split_.encode(x, block); }
  void decode(const uint8_t* block, int64_t, float* x) const override { split_.decode(block, x); }

 protected:
  const TurboSplit<Base>& split() const { return split_; }

 private:
  TurboSplit<Base> split_;
};

// Scores: per group and query row the query's two rotated parts are prepared for the part codecs
// (a copy, or at one bit its nibble tables), then each part scores the group's tokens with its
// fused kernel and the two scores add.
class TurboSplitKeyCodec final : public TurboSplitCodec<KeyCodec> {
 public:
  using TurboSplitCodec::TurboSplitCodec;
  size_t query_state_floats() const override { return size_t(head_dim()); }
  void prepare_query(const float* q, float* state, Workspace&) const override { std::copy_n(q, head_dim(), state); }
  // The part codecs take the workspace's slots, so this codec's own buffers are its own vectors.
  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1, float* out,
              size_t out_stride, Workspace& ws) const override {
    const TurboSplit<KeyCodec>& sp = split();
    const int d = head_dim(), G = sp.group(), N = sp.n();
    const size_t sh = sp.hi().query_state_floats(), sl = sp.lo().query_state_floats();
    std::vector<float> yh, yl, st_hi, st_lo, lo;  // the per-row path's, sized when it is first taken
    sp.for_blocks(blocks, i0, i1, [&](const uint8_t* block, int64_t a, int t0, int n) {
      float* dst = out + (a - i0);
      if (sp.many_rows(n_q, n)) {
        const float* x = sp.decode_tile(block, ws);
        float_scores(states, n_q, size_t(d), x + size_t(t0) * d, size_t(d), n, d, dst, out_stride);
        return;
      }
      if (yh.empty()) {
        yh.resize(sp.part_floats(n_q, N)), yl.resize(sp.part_floats(n_q, d - N));
        st_hi.resize(size_t(n_q) * sh), st_lo.resize(size_t(n_q) * sl), lo.resize(size_t(n_q) * G);
      }
      sp.to_parts(block, states, size_t(d), n_q, yh.data(), yl.data());
      for (int r = 0; r < n_q; ++r) {
        sp.hi().prepare_query(yh.data() + size_t(r) * N, st_hi.data() + size_t(r) * sh, ws);
        sp.lo().prepare_query(yl.data() + size_t(r) * (d - N), st_lo.data() + size_t(r) * sl, ws);
      }
      sp.hi().scores(st_hi.data(), n_q, sp.hi_blocks(block), 0, t0, t0 + n, dst, out_stride, ws);
      sp.lo().scores(st_lo.data(), n_q, sp.lo_blocks(block), 0, t0, t0 + n, lo.data(), size_t(G), ws);
      for (int r = 0; r < n_q; ++r) {
        for (int t = 0; t < n; ++t) dst[size_t(r) * out_stride + size_t(t)] += lo[size_t(r) * G + size_t(t)];
      }
    });
  }
};

// Values: per group each part accumulates its tokens in its rotated space with its fused kernel;
// the parts are finalized, rotated back and added to the channels once per group and query row.
class TurboSplitValueCodec final : public TurboSplitCodec<ValueCodec> {
 public:
  using TurboSplitCodec::TurboSplitCodec;
  size_t accum_floats() const override { return size_t(head_dim()); }
  void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1,
                  float* acc, Workspace& ws) const override {
    const TurboSplit<ValueCodec>& sp = split();
    const int d = head_dim(), N = sp.n();
    const size_t ah = sp.hi().accum_floats(), al = sp.lo().accum_floats();
    std::vector<float> acc_hi, acc_lo, fin_hi, fin_lo;  // the per-row path's, sized when it is first taken
    sp.for_blocks(blocks, i0, i1, [&](const uint8_t* block, int64_t a, int t0, int n) {
      if (sp.many_rows(n_q, n)) {
        const float* x = sp.decode_tile(block, ws);
        float_accumulate(w + (a - i0), w_stride, n_q, x + size_t(t0) * d, size_t(d), n, d, acc, size_t(d));
        return;
      }
      if (fin_hi.empty()) {
        fin_hi.resize(sp.part_floats(n_q, N)), fin_lo.resize(sp.part_floats(n_q, d - N));
        acc_hi.resize(size_t(n_q) * ah), acc_lo.resize(size_t(n_q) * al);
      }
      std::fill(acc_hi.begin(), acc_hi.end(), 0.0f);
      std::fill(acc_lo.begin(), acc_lo.end(), 0.0f);
      sp.hi().accumulate(w + (a - i0), w_stride, n_q, sp.hi_blocks(block), 0, t0, t0 + n, acc_hi.data(), ws);
      sp.lo().accumulate(w + (a - i0), w_stride, n_q, sp.lo_blocks(block), 0, t0, t0 + n, acc_lo.data(), ws);
      sp.hi().finalize(acc_hi.data(), n_q, fin_hi.data());
      sp.lo().finalize(acc_lo.data(), n_q, fin_lo.data());
      sp.add_from_parts(block, fin_hi.data(), fin_lo.data(), n_q, acc, size_t(d));
    });
  }
  void finalize(const float* acc, int n_q, float* out) const override {
    std::copy_n(acc, size_t(n_q) * head_dim(), out);
  }
};

}  // namespace

void check_turbo_split(const TurboSplitShape& s) {
  const int rest = s.d - s.outliers;
  VQ_CHECK(s.outliers >= 4 && rest >= 4,
           fmt::format("turbo: outliers={} must leave at least 4 channels on each side of head_dim {}", s.outliers, s.d));
  for (int n : {s.outliers, rest}) {
    VQ_CHECK(rotatable_dim(n),
             fmt::format("turbo: a part of {} channels is too large for a dense rotation (outliers={}, head_dim {})", n,
                         s.outliers, s.d));
  }
  VQ_CHECK(s.bits + 1 <= 4, fmt::format("turbo: outliers need bits <= 3 (the outlier channels take bits + 1), got bits={}", s.bits));
  VQ_CHECK(s.group % kTurboBlockTokens == 0,
           fmt::format("turbo: group={} must be a multiple of {} (each part keeps blocks of {} tokens)", s.group,
                       kTurboBlockTokens, kTurboBlockTokens));
}

size_t turbo_split_block_bytes(const TurboSplitShape& s) {
  const size_t row = 2 + size_t(s.bits + 1) * plane_bytes(s.outliers) + 2 + size_t(s.bits) * plane_bytes(s.d - s.outliers);
  return plane_bytes(s.d) + size_t(s.group) * row;
}

double turbo_split_bits(const TurboSplitShape& s) {
  return 8.0 * double(turbo_split_block_bytes(s)) / (double(s.group) * s.d);
}

std::unique_ptr<KeyCodec> turbo_split_keys(const TurboSplitShape& s, uint64_t seed) {
  check_turbo_split(s);
  // The parts' queries are prepared per group of tokens: float scores (no fixed-point conversion).
  return std::make_unique<TurboSplitKeyCodec>(s, seed,
                                              make_turbo_key_codec(sphere_rows(s.outliers, s.bits + 1, s.norm), false),
                                              make_turbo_key_codec(sphere_rows(s.d - s.outliers, s.bits, s.norm), false));
}
std::unique_ptr<ValueCodec> turbo_split_values(const TurboSplitShape& s, uint64_t seed) {
  check_turbo_split(s);
  // The parts' sums run a group of tokens at a time: float (no fixed-point weights per call).
  return std::make_unique<TurboSplitValueCodec>(
      s, seed, make_turbo_value_codec(sphere_rows(s.outliers, s.bits + 1, s.norm), false),
      make_turbo_value_codec(sphere_rows(s.d - s.outliers, s.bits, s.norm), false));
}

}  // namespace vq::kv
