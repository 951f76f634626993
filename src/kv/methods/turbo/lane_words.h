// The code words of the token-lane layout (turbo_lanes.h), scalar: codes of `bits` bits for the d
// channels of 16 tokens, for each whole group of 32 channels `bits` 32-bit words per token, laid
// out [group][word m][token t]; token t's 32 codes of a group form one bit string over its words
// (code k at bits bits*k .. bits*k+bits-1, low words first; at 3 bits codes 10 and 21 straddle
// two words). When d is not a multiple of 32, the last k = d mod 32 channels (the tail) form a
// bit string of k * bits bits kept in ceil(k * bits / 8) bytes, laid out [byte j][token t]: a
// kernel builds the tail's words from byte rows, and a token's codes take ceil(d * bits / 8)
// bytes in all, never more than bit planes of ceil(d / 8) bytes each would. The encoders write it
// with put and the plain reference decodes read it with code; the fused kernels read it a vector
// of tokens at a time (lane_codes-inl.h). TurboQuant's blocks put their 16 scales first; KVQuant's
// keys have none.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace vq::kv {

class LaneWords {
 public:
  static constexpr int kTokens = 16;
  static constexpr int kGroup = 32;
  LaneWords(int d, int bits) : d_(d), bits_(bits) {}
  // 16 tokens of ceil(bits * d / 8) bytes.
  size_t bytes() const { return size_t(kTokens) * ((size_t(bits_) * d_ + 7) / 8); }
  // The tail's bytes per token (0 when d is a multiple of 32) and where its byte rows begin.
  static int tail_bytes(int d, int bits) { return ((d % kGroup) * bits + 7) / 8; }
  static size_t tail_offset(int d, int bits) { return size_t(d / kGroup) * bits * kTokens * 4; }

  // Token t's d codes (the other tokens' words are kept).
  void put(const uint8_t* codes, int t, uint8_t* words) const {
    for (int g = 0; g < d_ / kGroup; ++g) {
      uint32_t w[4] = {0, 0, 0, 0};
      for (int k = 0; k < kGroup; ++k) {
        const uint32_t c = codes[g * kGroup + k];
        const int o = bits_ * k, m = o / 32, s = o % 32;
        w[m] |= c << s;
        if (s + bits_ > 32) w[m + 1] |= c >> (32 - s);
      }
      for (int m = 0; m < bits_; ++m) std::memcpy(words + offset(g, m, t), &w[m], 4);
    }
    const int tail = d_ % kGroup, tb = tail_bytes(d_, bits_);
    if (tail == 0) return;
    uint8_t b[16] = {};
    for (int k = 0; k < tail; ++k) {
      const uint32_t c = codes[d_ - tail + k];
      const int o = bits_ * k;
      b[o / 8] = uint8_t(b[o / 8] | (c << (o % 8)));
      if (o % 8 + bits_ > 8) b[o / 8 + 1] = uint8_t(b[o / 8 + 1] | (c >> (8 - o % 8)));
    }
    uint8_t* rows = words + tail_offset(d_, bits_);
    for (int j = 0; j < tb; ++j) rows[size_t(j) * kTokens + size_t(t)] = b[j];
  }
  // Token t's codes of the whole groups (the first d / 32 * 32 channels), each group's words read
  // once and the codes shifted out of them (a decode of every channel; code locates one).
  void group_codes(const uint8_t* words, int t, uint8_t* codes) const {
    for (int g = 0; g < d_ / kGroup; ++g) {
      uint32_t w[5] = {};  // the group's words, then a zero word for the last code's shift
      for (int m = 0; m < bits_; ++m) w[m] = load(words, g, m, t);
      for (int k = 0; k < kGroup; ++k) {
        const int o = bits_ * k;
        const uint64_t v = (uint64_t(w[(o >> 5) + 1]) << 32 | w[o >> 5]) >> (o & 31);
        codes[g * kGroup + k] = uint8_t(v & ((1u << bits_) - 1));
      }
    }
  }
  // Token t's code of channel c.
  int code(const uint8_t* words, int t, int c) const {
    const int g = c / kGroup;
    if (g == d_ / kGroup) {  // the tail
      const uint8_t* rows = words + tail_offset(d_, bits_);
      const int o = bits_ * (c % kGroup), j = o / 8, tb = tail_bytes(d_, bits_);
      uint32_t v = rows[size_t(j) * kTokens + size_t(t)];
      if (j + 1 < tb) v |= uint32_t(rows[size_t(j + 1) * kTokens + size_t(t)]) << 8;
      return int((v >> (o % 8)) & ((1u << bits_) - 1));
    }
    const int o = bits_ * (c % kGroup), m = o / 32, s = o % 32;
    uint64_t v = load(words, g, m, t);
    if (s + bits_ > 32) v |= uint64_t(load(words, g, m + 1, t)) << 32;
    return int((v >> s) & ((1u << bits_) - 1));
  }

 private:
  size_t offset(int g, int m, int t) const { return ((size_t(g) * bits_ + size_t(m)) * kTokens + size_t(t)) * 4; }
  uint32_t load(const uint8_t* words, int g, int m, int t) const {
    uint32_t v;
    std::memcpy(&v, words + offset(g, m, t), 4);
    return v;
  }
  int d_, bits_;
};

}  // namespace vq::kv
