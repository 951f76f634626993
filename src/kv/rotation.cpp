// Rotated codecs: x -> H D x / sqrt(d) is orthogonal, so q.k = (Rq).(Rk) and sum w v =
// R^T sum w (Rv). Only the query and the final accumulator pay for the rotation.
#include "src/kv/rotation.h"

#include <vector>

#include "src/core/hadamard.h"

namespace vq::kv {
namespace {

void rotate_rows(const RandomizedHadamard& r, float* x, int rows, int d, bool inverse) {
  for (int i = 0; i < rows; ++i) inverse ? r.inverse(x + size_t(i) * d) : r.forward(x + size_t(i) * d);
}

class RotatedKeyCodec final : public KeyCodec {
 public:
  RotatedKeyCodec(std::unique_ptr<KeyCodec> inner, uint64_t seed)
      : inner_(std::move(inner)), rot_(size_t(inner_->head_dim()), seed) {}
  int head_dim() const override { return inner_->head_dim(); }
  int block_tokens() const override { return inner_->block_tokens(); }
  size_t block_bytes() const override { return inner_->block_bytes(); }
  size_t param_bytes() const override { return inner_->param_bytes() + rot_.bytes(); }
  void encode(const float* keys, int64_t pos0, uint8_t* block) const override {
    std::vector<float> x(keys, keys + size_t(block_tokens()) * head_dim());
    rotate_rows(rot_, x.data(), block_tokens(), head_dim(), false);
    inner_->encode(x.data(), pos0, block);
  }
  bool encodes_single_tokens() const override { return inner_->encodes_single_tokens(); }
  void encode_token(const float* x, int64_t pos, int slot, uint8_t* block) const override {
    std::vector<float> r(x, x + head_dim());
    rot_.forward(r.data());
    inner_->encode_token(r.data(), pos, slot, block);
  }
  void decode(const uint8_t* block, int64_t pos0, float* keys) const override {
    inner_->decode(block, pos0, keys);
    rotate_rows(rot_, keys, block_tokens(), head_dim(), true);
  }
  size_t query_state_floats() const override { return inner_->query_state_floats(); }
  void prepare_query(const float* q, float* state) const override {
    std::vector<float> x(q, q + head_dim());
    rot_.forward(x.data());
    inner_->prepare_query(x.data(), state);
  }
  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t pos0, int64_t i0,
              int64_t i1, float* out, size_t out_stride) const override {
    inner_->scores(states, n_q, blocks, pos0, i0, i1, out, out_stride);
  }

 private:
  std::unique_ptr<KeyCodec> inner_;
  RandomizedHadamard rot_;
};

class RotatedValueCodec final : public ValueCodec {
 public:
  RotatedValueCodec(std::unique_ptr<ValueCodec> inner, uint64_t seed)
      : inner_(std::move(inner)), rot_(size_t(inner_->head_dim()), seed) {}
  int head_dim() const override { return inner_->head_dim(); }
  int block_tokens() const override { return inner_->block_tokens(); }
  size_t block_bytes() const override { return inner_->block_bytes(); }
  size_t param_bytes() const override { return inner_->param_bytes() + rot_.bytes(); }
  void encode(const float* values, int64_t pos0, uint8_t* block) const override {
    std::vector<float> x(values, values + size_t(block_tokens()) * head_dim());
    rotate_rows(rot_, x.data(), block_tokens(), head_dim(), false);
    inner_->encode(x.data(), pos0, block);
  }
  bool encodes_single_tokens() const override { return inner_->encodes_single_tokens(); }
  void encode_token(const float* x, int64_t pos, int slot, uint8_t* block) const override {
    std::vector<float> r(x, x + head_dim());
    rot_.forward(r.data());
    inner_->encode_token(r.data(), pos, slot, block);
  }
  void decode(const uint8_t* block, int64_t pos0, float* values) const override {
    inner_->decode(block, pos0, values);
    rotate_rows(rot_, values, block_tokens(), head_dim(), true);
  }
  size_t accum_floats() const override { return inner_->accum_floats(); }
  void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, int64_t pos0,
                  int64_t i0, int64_t i1, float* acc) const override {
    inner_->accumulate(w, w_stride, n_q, blocks, pos0, i0, i1, acc);
  }
  void finalize(const float* acc, int n_q, float* out) const override {
    inner_->finalize(acc, n_q, out);
    rotate_rows(rot_, out, n_q, head_dim(), true);
  }

 private:
  std::unique_ptr<ValueCodec> inner_;
  RandomizedHadamard rot_;
};

}  // namespace

std::unique_ptr<KeyCodec> rotate_keys(std::unique_ptr<KeyCodec> inner, uint64_t seed) {
  return std::make_unique<RotatedKeyCodec>(std::move(inner), seed);
}
std::unique_ptr<ValueCodec> rotate_values(std::unique_ptr<ValueCodec> inner, uint64_t seed) {
  return std::make_unique<RotatedValueCodec>(std::move(inner), seed);
}

}  // namespace vq::kv
