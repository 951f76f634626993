// Rotated codecs: R (H D / sqrt(d) for power-of-two d, a dense Haar-random orthogonal matrix
// otherwise; src/core/random_rotation.h) is orthogonal, so q.k = (Rq).(Rk) and sum w v =
// R^T sum w (Rv). Only the query and the final accumulator pay for the rotation.
#include "src/kv/rotation.h"

#include <memory>
#include <utility>
#include <vector>

#include "src/core/random_rotation.h"

namespace vq::kv {
namespace {

void rotate_rows(const RandomRotation& r, float* x, int rows, int d, bool inverse) {
  for (int i = 0; i < rows; ++i) inverse ? r.inverse(x + size_t(i) * d) : r.forward(x + size_t(i) * d);
}

// Encoding and decoding through a rotation, the same for a key and a value codec: rotate a copy
// of the rows in, or the decoded rows back out.
template <typename Codec>
class RotatedRows {
 public:
  RotatedRows(std::unique_ptr<Codec> inner, uint64_t seed)
      : inner_(std::move(inner)), rot_(size_t(inner_->head_dim()), seed) {}
  const Codec& inner() const { return *inner_; }
  const RandomRotation& rotation() const { return rot_; }
  int d() const { return inner_->head_dim(); }
  void encode(const float* x, int64_t pos0, uint8_t* block) const {
    std::vector<float> r(x, x + size_t(inner_->block_tokens()) * d());
    rotate_rows(rot_, r.data(), inner_->block_tokens(), d(), false);
    inner_->encode(r.data(), pos0, block);
  }
  void encode_token(const float* x, int64_t pos, int slot, uint8_t* block) const {
    std::vector<float> r(x, x + d());
    rot_.forward(r.data());
    inner_->encode_token(r.data(), pos, slot, block);
  }
  void decode(const uint8_t* block, int64_t pos0, float* x) const {
    inner_->decode(block, pos0, x);
    rotate_rows(rot_, x, inner_->block_tokens(), d(), true);
  }
  size_t param_bytes() const { return inner_->param_bytes() + rot_.bytes(); }

 private:
  std::unique_ptr<Codec> inner_;
  RandomRotation rot_;
};

class RotatedKeyCodec final : public KeyCodec {
 public:
  RotatedKeyCodec(std::unique_ptr<KeyCodec> inner, uint64_t seed) : rows_(std::move(inner), seed) {}
  int head_dim() const override { return rows_.d(); }
  int block_tokens() const override { return rows_.inner().block_tokens(); }
  size_t block_bytes() const override { return rows_.inner().block_bytes(); }
  size_t param_bytes() const override { return rows_.param_bytes(); }
  void encode(const float* keys, int64_t pos0, uint8_t* block) const override { rows_.encode(keys, pos0, block); }
  bool encodes_single_tokens() const override { return rows_.inner().encodes_single_tokens(); }
  void encode_token(const float* x, int64_t pos, int slot, uint8_t* block) const override {
    rows_.encode_token(x, pos, slot, block);
  }
  void decode(const uint8_t* block, int64_t pos0, float* keys) const override { rows_.decode(block, pos0, keys); }
  size_t query_state_floats() const override { return rows_.inner().query_state_floats(); }
  void prepare_query(const float* q, float* state) const override {
    std::vector<float> x(q, q + head_dim());
    rows_.rotation().forward(x.data());
    rows_.inner().prepare_query(x.data(), state);
  }
  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t pos0, int64_t i0,
              int64_t i1, float* out, size_t out_stride) const override {
    rows_.inner().scores(states, n_q, blocks, pos0, i0, i1, out, out_stride);
  }

 private:
  RotatedRows<KeyCodec> rows_;
};

class RotatedValueCodec final : public ValueCodec {
 public:
  RotatedValueCodec(std::unique_ptr<ValueCodec> inner, uint64_t seed) : rows_(std::move(inner), seed) {}
  int head_dim() const override { return rows_.d(); }
  int block_tokens() const override { return rows_.inner().block_tokens(); }
  size_t block_bytes() const override { return rows_.inner().block_bytes(); }
  size_t param_bytes() const override { return rows_.param_bytes(); }
  void encode(const float* values, int64_t pos0, uint8_t* block) const override { rows_.encode(values, pos0, block); }
  bool encodes_single_tokens() const override { return rows_.inner().encodes_single_tokens(); }
  void encode_token(const float* x, int64_t pos, int slot, uint8_t* block) const override {
    rows_.encode_token(x, pos, slot, block);
  }
  void decode(const uint8_t* block, int64_t pos0, float* values) const override { rows_.decode(block, pos0, values); }
  size_t accum_floats() const override { return rows_.inner().accum_floats(); }
  void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, int64_t pos0,
                  int64_t i0, int64_t i1, float* acc) const override {
    rows_.inner().accumulate(w, w_stride, n_q, blocks, pos0, i0, i1, acc);
  }
  void finalize(const float* acc, int n_q, float* out) const override {
    rows_.inner().finalize(acc, n_q, out);
    rotate_rows(rows_.rotation(), out, n_q, head_dim(), true);
  }

 private:
  RotatedRows<ValueCodec> rows_;
};

}  // namespace

std::unique_ptr<KeyCodec> rotate_keys(std::unique_ptr<KeyCodec> inner, uint64_t seed) {
  return std::make_unique<RotatedKeyCodec>(std::move(inner), seed);
}
std::unique_ptr<ValueCodec> rotate_values(std::unique_ptr<ValueCodec> inner, uint64_t seed) {
  return std::make_unique<RotatedValueCodec>(std::move(inner), seed);
}

}  // namespace vq::kv
