// Key and value codecs over a TokenFormat.
#include "src/kv/methods/baseline/token_codec.h"

#include <algorithm>

namespace vq::kv {
namespace {

class TokenKeyCodec final : public KeyCodec {
 public:
  TokenKeyCodec(const TokenFormat& f, int d) : f_(f), d_(d), bytes_(f.token_bytes(d)) {}
  int head_dim() const override { return d_; }
  int block_tokens() const override { return 1; }
  size_t block_bytes() const override { return bytes_; }
  void encode(const float* keys, int64_t, uint8_t* block) const override { f_.encode(keys, d_, block); }
  void decode(const uint8_t* block, int64_t, float* keys) const override { f_.decode(block, d_, keys); }
  size_t query_state_floats() const override { return size_t(d_); }
  void prepare_query(const float* q, float* state, Workspace&) const override { std::copy_n(q, d_, state); }
  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1, float* out,
              size_t out_stride, Workspace&) const override {
    f_.scores(states, n_q, size_t(d_), blocks + size_t(i0) * bytes_, bytes_, i1 - i0, d_, out, out_stride);
  }

 private:
  TokenFormat f_;
  int d_;
  size_t bytes_;
};

class TokenValueCodec final : public ValueCodec {
 public:
  TokenValueCodec(const TokenFormat& f, int d) : f_(f), d_(d), bytes_(f.token_bytes(d)) {}
  int head_dim() const override { return d_; }
  int block_tokens() const override { return 1; }
  size_t block_bytes() const override { return bytes_; }
  void encode(const float* values, int64_t, uint8_t* block) const override { f_.encode(values, d_, block); }
  void decode(const uint8_t* block, int64_t, float* values) const override { f_.decode(block, d_, values); }
  size_t accum_floats() const override { return size_t(d_); }
  void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1,
                  float* acc, Workspace&) const override {
    f_.accumulate(w, w_stride, n_q, blocks + size_t(i0) * bytes_, bytes_, i1 - i0, d_, acc, size_t(d_));
  }
  void finalize(const float* acc, int n_q, float* out) const override { std::copy_n(acc, size_t(n_q) * d_, out); }

 private:
  TokenFormat f_;
  int d_;
  size_t bytes_;
};

}  // namespace

std::unique_ptr<KeyCodec> make_token_key_codec(const TokenFormat& f, int d) {
  return std::make_unique<TokenKeyCodec>(f, d);
}
std::unique_ptr<ValueCodec> make_token_value_codec(const TokenFormat& f, int d) {
  return std::make_unique<TokenValueCodec>(f, d);
}

}  // namespace vq::kv
