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
// Scores: the query is cut along each group's mask and its two parts rotated (once per group
// and query, not per key; a rotation of the whole query cannot serve, since the parts change
// from group to group), then dotted with the codes read through the level tables. Values
// accumulate in the rotated parts per group and go back to channels once per group.
//
// Tokens of a group share its mask, so they are encoded together when the group is full; until
// then they wait in the cache's fp16 window.
//
// pick=first (an ablation, not the paper) marks the first N channels in every group instead: the
// same bits and layout without the choice of channels, to measure what the choice is worth.
#include "src/kv/methods/turbo_split.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "src/core/random_rotation.h"
#include "src/kv/f16_kernels.h"
#include "src/kv/lut_kernels.h"
#include "src/kv/outlier_channels.h"
#include "src/kv/registry.h"
#include "veloxquant/error.h"

namespace vq::kv {
namespace {

uint64_t part_seed(uint64_t seed, int part) {
  return (seed ^ 0x9E3779B97F4A7C15ull) * 0xBF58476D1CE4E5B9ull + uint64_t(part);
}

// The channels of a group, ascending: the outliers, then the rest (refilled block after block,
// so a pass over a run allocates once).
struct Channels {
  std::vector<int> hi, lo;
  std::vector<uint8_t> in_hi;  // scratch: channel c is in hi
};

// What the key and the value codec share: the block layout and moving a token between channel
// space and the two rotated parts.
class TurboSplit {
 public:
  TurboSplit(const TurboSplitShape& s, uint64_t seed)
      : s_(s), n_(s.outliers), hi_(sphere_rows(s.outliers, s.bits + 1, s.norm)),
        lo_(sphere_rows(s.d - s.outliers, s.bits, s.norm)), rot_hi_(size_t(s.outliers), part_seed(seed, 0)),
        rot_lo_(size_t(s.d - s.outliers), part_seed(seed, 1)), mask_bytes_(plane_bytes(s.d)),
        row_(hi_.row_bytes() + lo_.row_bytes()) {}

  int d() const { return s_.d; }
  int group() const { return s_.group; }
  size_t block_bytes() const { return mask_bytes_ + size_t(s_.group) * row_; }
  size_t param_bytes() const { return hi_.param_bytes() + lo_.param_bytes() + rot_hi_.bytes() + rot_lo_.bytes(); }

  void encode(const float* x, uint8_t* block) const {
    std::memset(block, 0, mask_bytes_);
    if (s_.pick_by_norm) {
      for (int c : top_norm_channels(x, s_.group, s_.d, n_)) block[c / 8] |= uint8_t(1u << (c % 8));
    } else {
      for (int c = 0; c < n_; ++c) block[c / 8] |= uint8_t(1u << (c % 8));
    }
    Channels ch;
    channels(block, &ch);
    std::vector<float> y(size_t(s_.d));
    for (int t = 0; t < s_.group; ++t) {
      to_rotated(ch, x + size_t(t) * s_.d, y.data());
      uint8_t* r = row(block, t);
      hi_.encode(y.data(), r);
      lo_.encode(y.data() + n_, r + hi_.row_bytes());
    }
  }
  void decode(const uint8_t* block, float* x) const {
    Channels ch;
    channels(block, &ch);
    std::vector<float> y(size_t(s_.d));
    std::fill_n(x, size_t(s_.group) * s_.d, 0.0f);
    for (int t = 0; t < s_.group; ++t) {
      decode_rotated(block, t, y.data());
      add_from_rotated(ch, y.data(), x + size_t(t) * s_.d);
    }
  }

  // A mask with other than N channels marked (a damaged saved cache) still gives N and d - N
  // channels: the first N marked ones, completed by the first unmarked ones.
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
  // Token t of a block as [outlier part | rest], both still rotated.
  void decode_rotated(const uint8_t* block, int t, float* y) const {
    const uint8_t* r = row(block, t);
    hi_.decode(r, y);
    lo_.decode(r + hi_.row_bytes(), y + n_);
  }
  // x in channel space -> [R_hi x_hi | R_lo x_lo].
  void to_rotated(const Channels& ch, const float* x, float* y) const {
    for (int j = 0; j < n_; ++j) y[j] = x[ch.hi[size_t(j)]];
    for (int j = 0; j < s_.d - n_; ++j) y[n_ + j] = x[ch.lo[size_t(j)]];
    rot_hi_.forward(y);
    rot_lo_.forward(y + n_);
  }
  // acc += the channel-space vector whose rotated parts are y (y is overwritten).
  void add_from_rotated(const Channels& ch, float* y, float* acc) const {
    rot_hi_.inverse(y);
    rot_lo_.inverse(y + n_);
    for (int j = 0; j < n_; ++j) acc[ch.hi[size_t(j)]] += y[j];
    for (int j = 0; j < s_.d - n_; ++j) acc[ch.lo[size_t(j)]] += y[n_ + j];
  }

  // fn(block, first token of the block in [i0, i1), how many) for the blocks that tokens
  // [i0, i1) of a run touch.
  template <typename Fn>
  void for_blocks(const uint8_t* blocks, int64_t i0, int64_t i1, Fn fn) const {
    const int64_t G = s_.group;
    for (int64_t b = i0 / G; b * G < i1; ++b) {
      const int64_t a = std::max(i0, b * G), e = std::min(i1, (b + 1) * G);
      fn(blocks + size_t(b) * block_bytes(), a, int(a - b * G), int(e - a));
    }
  }

 private:
  uint8_t* row(uint8_t* block, int t) const { return block + mask_bytes_ + size_t(t) * row_; }
  const uint8_t* row(const uint8_t* block, int t) const { return block + mask_bytes_ + size_t(t) * row_; }

  TurboSplitShape s_;
  int n_;
  TurboRows hi_, lo_;
  RandomRotation rot_hi_, rot_lo_;
  size_t mask_bytes_, row_;
};

template <typename Base>
class TurboSplitCodec : public Base {
 public:
  TurboSplitCodec(const TurboSplitShape& s, uint64_t seed) : split_(s, seed) {}
  int head_dim() const override { return split_.d(); }
  int block_tokens() const override { return split_.group(); }
  size_t block_bytes() const override { return split_.block_bytes(); }
  size_t param_bytes() const override { return split_.param_bytes(); }
  void encode(const float* x, int64_t, uint8_t* block) const override { split_.encode(x, block); }
  void decode(const uint8_t* block, int64_t, float* x) const override { split_.decode(block, x); }

 protected:
  // The tokens [t0, t0 + n) of a block decoded into tile (n x d), rotated.
  void decode_tile(const uint8_t* block, int t0, int n, float* tile) const {
    for (int t = 0; t < n; ++t) split_.decode_rotated(block, t0 + t, tile + size_t(t) * split_.d());
  }
  const TurboSplit& split() const { return split_; }

 private:
  TurboSplit split_;
};

class TurboSplitKeyCodec final : public TurboSplitCodec<KeyCodec> {
 public:
  using TurboSplitCodec::TurboSplitCodec;
  size_t query_state_floats() const override { return size_t(head_dim()); }
  void prepare_query(const float* q, float* state) const override { std::copy_n(q, head_dim(), state); }
  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1, float* out,
              size_t out_stride) const override {
    const int d = head_dim();
    std::vector<float> qrot(size_t(n_q) * d), tile(size_t(block_tokens()) * d);
    Channels ch;
    split().for_blocks(blocks, i0, i1, [&](const uint8_t* block, int64_t a, int t0, int n) {
      split().channels(block, &ch);
      for (int r = 0; r < n_q; ++r) split().to_rotated(ch, states + size_t(r) * d, qrot.data() + size_t(r) * d);
      decode_tile(block, t0, n, tile.data());
      float_scores(qrot.data(), n_q, size_t(d), tile.data(), size_t(d), n, d, out + (a - i0), out_stride);
    });
  }
};

class TurboSplitValueCodec final : public TurboSplitCodec<ValueCodec> {
 public:
  using TurboSplitCodec::TurboSplitCodec;
  size_t accum_floats() const override { return size_t(head_dim()); }
  void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1,
                  float* acc) const override {
    const int d = head_dim();
    std::vector<float> part(size_t(n_q) * d), tile(size_t(block_tokens()) * d);
    Channels ch;
    split().for_blocks(blocks, i0, i1, [&](const uint8_t* block, int64_t a, int t0, int n) {
      split().channels(block, &ch);
      decode_tile(block, t0, n, tile.data());
      std::fill(part.begin(), part.end(), 0.0f);
      float_accumulate(w + (a - i0), w_stride, n_q, tile.data(), size_t(d), n, d, part.data(), size_t(d));
      for (int r = 0; r < n_q; ++r) split().add_from_rotated(ch, part.data() + size_t(r) * d, acc + size_t(r) * d);
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
  return std::make_unique<TurboSplitKeyCodec>(s, seed);
}
std::unique_ptr<ValueCodec> turbo_split_values(const TurboSplitShape& s, uint64_t seed) {
  check_turbo_split(s);
  return std::make_unique<TurboSplitValueCodec>(s, seed);
}

}  // namespace vq::kv
