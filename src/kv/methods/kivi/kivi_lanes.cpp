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

int per_word(int bits) { return 32 / bits; }
// Keys: channel k of a chunk sits in byte k % 4 of its token's word, at bit bits * (k / 4) of that
// byte, so that a shift by bits * j and a byte mask leave channels 4j .. 4j+3 as the four bytes.
int code_shift(int bits, int k) { return 8 * (k % 4) + bits * (k / 4); }
// Bytes of one sub-block of 16 tokens' codes.
size_t sub_bytes(int d, int bits) { return size_t(d / per_word(bits)) * kSub * 4; }

uint32_t* word(uint8_t* sub, int ch, int t) { return reinterpret_cast<uint32_t*>(sub) + size_t(ch) * kSub + t; }
uint32_t load_word(const uint8_t* sub, int ch, int t) {
  uint32_t v;
  std::memcpy(&v, sub + (size_t(ch) * kSub + size_t(t)) * 4, 4);
  return v;
}

// Token t's codes (d of them) into the words of a sub-block.
void put_codes(const uint8_t* codes, int d, int bits, int t, uint8_t* sub) {
  const int C = per_word(bits);
  for (int ch = 0; ch < d / C; ++ch) {
    uint32_t v = 0;
    for (int k = 0; k < C; ++k) v |= uint32_t(codes[ch * C + k]) << code_shift(bits, k);
    std::memcpy(word(sub, ch, t), &v, 4);
  }
}
int get_code(const uint8_t* sub, int bits, int t, int c) {
  const int C = per_word(bits);
  return int((load_word(sub, c / C, t) >> code_shift(bits, c % C)) & ((1u << bits) - 1));
}

// Values keep channels in the lanes (kivi_lanes.h): the byte holding token t's code of channel c
// in a sub-block, and the code's bit within it.
size_t value_byte(int bits, int t, int c) {
  const int tokens_per_vec = 32 / bits;
  return ((size_t(c / kSub) * size_t(bits / 2) + size_t(t / tokens_per_vec)) * kSub + size_t(c % kSub)) * 4 + size_t(t % 4);
}
int value_bit(int bits, int t) { return bits * ((t % (32 / bits)) / 4); }

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
        keys[size_t(t) * d_ + c] = std::fma(float(get_code(sub(block, t / kSub), bits_, t % kSub, c)), g.scale, g.zero);
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
    const int bit = value_bit(bits_, slot);
    const uint8_t mask = uint8_t(((1u << bits_) - 1) << bit);
    for (int c = 0; c < d_; ++c) {
      uint8_t& byte = block[value_byte(bits_, slot, c)];
      byte = uint8_t((byte & ~mask) | (codes[c] << bit));
    }
  }
  void decode(const uint8_t* block, int64_t, float* values) const override {
    for (int t = 0; t < kSub; ++t) {
      for (int c = 0; c < d_; ++c) {
        const kivi::GroupParams p = kivi::get_params(param(block, c / G_, t));
        const int code = (block[value_byte(bits_, t, c)] >> value_bit(bits_, t)) & ((1 << bits_) - 1);
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
  return (bits == 2 || bits == 4) && d % per_word(bits) == 0 && d <= 4096 && group % kSub == 0 && block % group == 0 &&
         block % kSub == 0;
}
bool kivi_lanes_values_apply(int d, int bits, int group) {
  return (bits == 2 || bits == 4) && d % kSub == 0 && d <= 4096 && group % kSub == 0 && d % group == 0;
}
std::unique_ptr<KeyCodec> make_kivi_lanes_key_codec(int d, int bits, int group, int block) {
  return std::make_unique<KiviLaneKeyCodec>(d, bits, group, block);
}
std::unique_ptr<ValueCodec> make_kivi_lanes_value_codec(int d, int bits, int group) {
  return std::make_unique<KiviLaneValueCodec>(d, bits, group);
}

}  // namespace vq::kv
