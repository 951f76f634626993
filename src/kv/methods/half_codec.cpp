// 16-bit float codecs: the packed form is the fp16/bf16 bits themselves.
#include "src/kv/methods/half_codec.h"

#include <algorithm>
#include <cstring>

#include "src/core/fp16.h"

namespace vq::kv {
namespace {

void to_half(HalfKind kind, const float* x, uint16_t* out, size_t n) {
  kind == HalfKind::kF16 ? f32_to_f16(x, out, n) : f32_to_bf16(x, out, n);
}
void from_half(HalfKind kind, const uint16_t* x, float* out, size_t n) {
  kind == HalfKind::kF16 ? f16_to_f32(x, out, n) : bf16_to_f32(x, out, n);
}
const uint16_t* as_half(const uint8_t* p) { return reinterpret_cast<const uint16_t*>(p); }

class HalfKeyCodec final : public KeyCodec {
 public:
  HalfKeyCodec(HalfKind kind, int d) : kind_(kind), d_(d) {}
  int head_dim() const override { return d_; }
  int block_tokens() const override { return 1; }
  size_t block_bytes() const override { return size_t(d_) * 2; }
  void encode(const float* keys, int64_t, uint8_t* block) const override {
    to_half(kind_, keys, reinterpret_cast<uint16_t*>(block), size_t(d_));
  }
  void decode(const uint8_t* block, int64_t, float* keys) const override {
    from_half(kind_, as_half(block), keys, size_t(d_));
  }
  size_t query_state_floats() const override { return size_t(d_); }
  void prepare_query(const float* q, float* state) const override { std::copy_n(q, d_, state); }
  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1,
              float* out, size_t out_stride) const override {
    half_scores(kind_, states, n_q, size_t(d_), as_half(blocks) + size_t(i0) * d_, size_t(d_),
                i1 - i0, d_, out, out_stride);
  }

 private:
  HalfKind kind_;
  int d_;
};

class HalfValueCodec final : public ValueCodec {
 public:
  HalfValueCodec(HalfKind kind, int d) : kind_(kind), d_(d) {}
  int head_dim() const override { return d_; }
  int block_tokens() const override { return 1; }
  size_t block_bytes() const override { return size_t(d_) * 2; }
  void encode(const float* values, int64_t, uint8_t* block) const override {
    to_half(kind_, values, reinterpret_cast<uint16_t*>(block), size_t(d_));
  }
  void decode(const uint8_t* block, int64_t, float* values) const override {
    from_half(kind_, as_half(block), values, size_t(d_));
  }
  size_t accum_floats() const override { return size_t(d_); }
  void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, int64_t,
                  int64_t i0, int64_t i1, float* acc) const override {
    half_accumulate(kind_, w, w_stride, n_q, as_half(blocks) + size_t(i0) * d_, size_t(d_),
                    i1 - i0, d_, acc, size_t(d_));
  }
  void finalize(const float* acc, int n_q, float* out) const override {
    std::copy_n(acc, size_t(n_q) * d_, out);
  }

 private:
  HalfKind kind_;
  int d_;
};

}  // namespace

std::unique_ptr<KeyCodec> make_half_key_codec(HalfKind kind, int head_dim) {
  return std::make_unique<HalfKeyCodec>(kind, head_dim);
}
std::unique_ptr<ValueCodec> make_half_value_codec(HalfKind kind, int head_dim) {
  return std::make_unique<HalfValueCodec>(kind, head_dim);
}

}  // namespace vq::kv
