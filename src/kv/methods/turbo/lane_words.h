// The code words of the token-lane layout (turbo_lanes.h), scalar: codes of `bits` bits for the d
// channels of 16 tokens, for each group of 32 channels `bits` 32-bit words per token, laid out
// [group][word m][token t]; token t's 32 codes of a group form one bit string over its words
// (code k at bits bits*k .. bits*k+bits-1, low words first; at 3 bits codes 10 and 21 straddle
// two words). The encoders write it with put and the plain reference decodes read it with code;
// the fused kernels read it a vector of tokens at a time (lane_codes-inl.h). TurboQuant's blocks
// put their 16 scales first; KVQuant's keys have none.
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
  size_t bytes() const { return size_t(2) * bits_ * d_; }  // = 16 tokens of bits * d / 8 bytes

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
  }
  // Token t's code of channel c.
  int code(const uint8_t* words, int t, int c) const {
    const int g = c / kGroup, o = bits_ * (c % kGroup), m = o / 32, s = o % 32;
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
