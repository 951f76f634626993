// KIVI with tokens in the vector lanes: the codecs that lay the codes out (kivi_lanes.h) and
// call the kernels (kivi_key_kernels.cpp, kivi_value_kernels.cpp).
#include "src/kv/methods/kivi/kivi_lanes.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "src/kv/methods/kivi/kivi_lane_kernels.h"
#include "src/kv/methods/kivi/kivi_quant.h"

namespace vq::kv {
namespace {

constexpr int kSub = 16;

// Keys: channel k of a chunk of C = 32 / b channels sits in byte k % 4 of its token's word, at bit
// b * (k / 4) of that byte, so that a shift by b * j and a byte mask leave channels 4j .. 4j+3 as
// the four bytes. At 3 bits a code is lo + 4 hi, and each plane takes that layout: the 2-bit plane
// (chunks of 16 channels), then the 1-bit plane (chunks of 32).
int code_shift(int bits, int k) { return 8 * (k % 4) + bits * (k / 4); }
size_t plane_bytes(int d, int bits) { return size_t(d / (32 / bits)) * kSub * 4; }
// Bytes of one sub-block of 16 tokens' codes.
size_t sub_bytes(int d, int bits) { return bits == 3 ? plane_bytes(d, 2) + plane_bytes(d, 1) : plane_bytes(d, bits); }

uint32_t load_word(const uint8_t* sub, int ch, int t) {
  uint32_t v;
  std::memcpy(&v, sub + (size_t(ch) * kSub + size_t(t)) * 4, 4);
  return v;
}

// Token t's codes (d of them, each of `bits` bits taken from `shift` up) into the words of one plane.
void put_plane(const uint8_t* codes, int d, int bits, int shift, int t, uint8_t* plane) {
  const int C = 32 / bits;
  for (int ch = 0; ch < d / C; ++ch) {
    uint32_t v = 0;
    for (int k = 0; k < C; ++k) v |= uint32_t((codes[ch * C + k] >> shift) & ((1u << bits) - 1)) << code_shift(bits, k);
    std::memcpy(plane + (size_t(ch) * kSub + size_t(t)) * 4, &v, 4);
  }
}
int get_plane(const uint8_t* plane, int bits, int t, int c) {
  const int C = 32 / bits;
  return int((load_word(plane, c / C, t) >> code_shift(bits, c % C)) & ((1u << bits) - 1));
}
void put_codes(const uint8_t* codes, int d, int bits, int t, uint8_t* sub) {
  if (bits != 3) return put_plane(codes, d, bits, 0, t, sub);
  put_plane(codes, d, 2, 0, t, sub);
  put_plane(codes, d, 1, 2, t, sub + plane_bytes(d, 2));
}
int get_code(const uint8_t* sub, int d, int bits, int t, int c) {
  if (bits != 3) return get_plane(sub, bits, t, c);
  return get_plane(sub, 2, t, c) + 4 * get_plane(sub + plane_bytes(d, 2), 1, t, c);
}

// Values keep channels in the lanes (kivi_lanes.h): the byte holding token t's code of channel c
// in a plane of b = 2 or 4 bits, and the code's bit within it. At 3 bits the 2-bit plane (4d
// bytes) is followed by the 1-bit plane, where chunks 2k and 2k + 1 share one vector of 16 words:
// channel c's bits of tokens 4j + i sit in byte i of word c % 16 at bit 4 * ((c / 16) % 2) + j.
size_t value_byte(int bits, int t, int c) {
  const int tokens_per_vec = 32 / bits;
  return ((size_t(c / kSub) * size_t(bits / 2) + size_t(t / tokens_per_vec)) * kSub + size_t(c % kSub)) * 4 + size_t(t % 4);
}
int value_bit(int bits, int t) { return bits * ((t % (32 / bits)) / 4); }
size_t hi_value_byte(int d, int t, int c) { return size_t(d) * 4 + (size_t(c / 32) * kSub + size_t(c % kSub)) * 4 + size_t(t % 4); }
int hi_value_bit(int t, int c) { return 4 * ((c / kSub) % 2) + t / 4; }

void put_value_code(uint8_t* block, int d, int bits, int t, int c, int code) {
  const auto put = [&](size_t at, int bit, int width, int v) {
    const uint8_t mask = uint8_t(((1u << width) - 1) << bit);
    block[at] = uint8_t((block[at] & ~mask) | (v << bit));
  };
  if (bits != 3) return put(value_byte(bits, t, c), value_bit(bits, t), bits, code);
  put(value_byte(2, t, c), value_bit(2, t), 2, code & 3);
  put(hi_value_byte(d, t, c), hi_value_bit(t, c), 1, code >> 2);
}
int get_value_code(const uint8_t* block, int d, int bits, int t, int c) {
  if (bits != 3) return (block[value_byte(bits, t, c)] >> value_bit(bits, t)) & ((1 << bits) - 1);
  return ((block[value_byte(2, t, c)] >> value_bit(2, t)) & 3) + 4 * ((block[hi_value_byte(d, t, c)] >> hi_value_bit(t, c)) & 1);
}

class KiviLaneKeyCodec final : public KeyCodec {
 public:
  KiviLaneKeyCodec(int d, int bits, int group, int block)
      : d_(d), bits_(bits), G_(group), R_(block), params_(size_t(R_ / G_) * d * 4) {}
  int head_dim() const override { return d_; }
  int block_tokens() const override { return R_; }
  size_t block_bytes() const override { return params_ + size_t(R_ / kSub) * sub_bytes(d_, bits_); }

  void encode(const float* keys, int64_t, uint8_t* block) const override {
    std::vector<uint8_t> codes(size_t(R_) * d_);
    for (int j = 0; j < R_ / G_; ++j) {
      for (int c = 0; c < d_; ++c) {
        const kivi::GroupParams g = kivi::quantize_group(keys + size_t(j) * G_ * d_ + c, G_, size_t(d_), bits_,
                                                         codes.data() + size_t(j) * G_ * d_ + c, size_t(d_));
        kivi::put_params(block + (size_t(j) * d_ + c) * 4, g);
      }
    }
    for (int t = 0; t < R_; ++t) put_codes(codes.data() + size_t(t) * d_, d_, bits_, t % kSub, sub(block, t / kSub));
  }
  void decode(const uint8_t* block, int64_t, float* keys) const override {
    for (int t = 0; t < R_; ++t) {
      const int j = t / G_;
      for (int c = 0; c < d_; ++c) {
        const kivi::GroupParams g = kivi::get_params(block + (size_t(j) * d_ + c) * 4);
        keys[size_t(t) * d_ + c] = std::fma(float(get_code(sub(block, t / kSub), d_, bits_, t % kSub, c)), g.scale, g.zero);
      }
    }
  }
  size_t query_state_floats() const override { return size_t(d_); }
  void prepare_query(const float* q, float* state, Workspace&) const override { std::copy_n(q, d_, state); }
  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1, float* out,
              size_t out_stride, Workspace&) const override {
    kivi_lanes::key_scores(bits_, states, n_q, query_state_floats(), blocks, block_bytes(), d_, R_, G_, i0, i1,
                                             out, out_stride);
  }

 private:
  uint8_t* sub(uint8_t* block, int u) const { return block + params_ + size_t(u) * sub_bytes(d_, bits_); }
  const uint8_t* sub(const uint8_t* block, int u) const { return block + params_ + size_t(u) * sub_bytes(d_, bits_); }
  int d_, bits_, G_, R_;
  size_t params_;
};

class KiviLaneValueCodec final : public ValueCodec {
 public:
  KiviLaneValueCodec(int d, int bits, int group) : d_(d), bits_(bits), G_(group), n_g_(d / group) {}
  int head_dim() const override { return d_; }
  int block_tokens() const override { return kSub; }
  size_t block_bytes() const override { return sub_bytes(d_, bits_) + size_t(n_g_) * kSub * 4; }
  void encode(const float* values, int64_t pos0, uint8_t* block) const override {
    for (int t = 0; t < kSub; ++t) encode_token(values + size_t(t) * d_, pos0 + t, t, block);
  }
  bool encodes_single_tokens() const override { return true; }
  void encode_token(const float* x, int64_t, int slot, uint8_t* block) const override {
    uint8_t codes[4096];
    for (int g = 0; g < n_g_; ++g) {
      const kivi::GroupParams p = kivi::quantize_group(x + g * G_, G_, 1, bits_, codes + g * G_, 1);
      kivi::put_params(param(block, g, slot), p);
    }
    // The slot's bits are cleared first: the other tokens of the sub-block share its bytes.
    for (int c = 0; c < d_; ++c) put_value_code(block, d_, bits_, slot, c, codes[c]);
  }
  void decode(const uint8_t* block, int64_t, float* values) const override {
    for (int t = 0; t < kSub; ++t) {
      for (int c = 0; c < d_; ++c) {
        const kivi::GroupParams p = kivi::get_params(param(block, c / G_, t));
        const int code = get_value_code(block, d_, bits_, t, c);
        values[size_t(t) * d_ + c] = std::fma(float(code), p.scale, p.zero);
      }
    }
  }
  // Per query: d channel sums, then one sum of w * zero per group.
  size_t accum_floats() const override { return size_t(d_ + n_g_); }
  void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1,
                  float* acc, Workspace&) const override {
    kivi_lanes::value_accumulate(bits_, w, w_stride, n_q, blocks, block_bytes(), d_, G_, i0, i1, acc,
                                                   accum_floats());
  }
  void finalize(const float* acc, int n_q, float* out) const override {
    for (int r = 0; r < n_q; ++r) {
      const float* a = acc + size_t(r) * accum_floats();
      for (int c = 0; c < d_; ++c) out[size_t(r) * d_ + c] = a[c] + a[d_ + c / G_];
    }
  }

 private:
  uint8_t* param(uint8_t* block, int g, int t) const {
    return block + sub_bytes(d_, bits_) + (size_t(g) * kSub + size_t(t)) * 4;
  }
  const uint8_t* param(const uint8_t* block, int g, int t) const {
    return block + sub_bytes(d_, bits_) + (size_t(g) * kSub + size_t(t)) * 4;
  }
  int d_, bits_, G_, n_g_;
};

}  // namespace

bool kivi_lanes_keys_apply(int d, int bits, int group, int block) {
  const int C = bits == 3 ? 32 : 32 / bits;  // 3 bits: chunks of both planes
  return bits >= 2 && bits <= 4 && d % C == 0 && d <= 4096 && group % kSub == 0 && block % group == 0 &&
         block % kSub == 0;
}
bool kivi_lanes_values_apply(int d, int bits, int group) {
  return bits >= 2 && bits <= 4 && d % (bits == 3 ? 32 : kSub) == 0 && d <= 4096 && group % kSub == 0 && d % group == 0;
}
std::unique_ptr<KeyCodec> make_kivi_lanes_key_codec(int d, int bits, int group, int block) {
  return std::make_unique<KiviLaneKeyCodec>(d, bits, group, block);
}
std::unique_ptr<ValueCodec> make_kivi_lanes_value_codec(int d, int bits, int group) {
  return std::make_unique<KiviLaneValueCodec>(d, bits, group);
}

}  // namespace vq::kv
