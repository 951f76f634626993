// Rotated codecs: R (H D / sqrt(d) for power-of-two d, a dense Haar-random orthogonal matrix
// otherwise; src/core/random_rotation.h) is orthogonal, so q.k = (Rq).(Rk) and sum w v =
// R^T sum w (Rv). Only the query and the final accumulator pay for the rotation.
#include "src/kv/rotation.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "src/core/random_rotation.h"

namespace vq::kv {
namespace {

void rotate_rows(const RandomRotation& r, float* x, int rows, int d, bool inverse) {
  for (int i = 0; i < rows; ++i) inverse ? r.inverse(x + size_t(i) * d) : r.forward(x + size_t(i) * d);
}

// What a rotated key codec and a rotated value codec share (Base: KeyCodec or ValueCodec): the
// block shape of the inner codec, and encoding and decoding through the rotation (a copy of the
// rows rotated in, the decoded rows rotated back out).
template <typename Base>
class RotatedCodec : public Base {
 public:
  RotatedCodec(std::unique_ptr<Base> inner, uint64_t seed)
      : inner_(std::move(inner)), rot_(size_t(inner_->head_dim()), seed) {}
  int head_dim() const override { return inner_->head_dim(); }
  int block_tokens() const override { return inner_->block_tokens(); }
  size_t block_bytes() const override { return inner_->block_bytes(); }
  size_t param_bytes() const override { return inner_->param_bytes() + rot_.bytes(); }
  void encode(const float* x, int64_t pos0, uint8_t* block) const override {
    std::vector<float> r(x, x + size_t(block_tokens()) * head_dim());
    rotate_rows(rot_, r.data(), block_tokens(), head_dim(), false);
    inner_->encode(r.data(), pos0, block);
  }
  bool encodes_single_tokens() const override { return inner_->encodes_single_tokens(); }
  void encode_token(const float* x, int64_t pos, int slot, uint8_t* block) const override {
    std::vector<float> r(x, x + head_dim());
    rot_.forward(r.data());
    inner_->encode_token(r.data(), pos, slot, block);
  }
  void encode_tokens(const float* x, int64_t pos0, int slot, int n, uint8_t* block) const override {
    std::vector<float> r(x, x + size_t(n) * head_dim());
    rotate_rows(rot_, r.data(), n, head_dim(), false);
    inner_->encode_tokens(r.data(), pos0, slot, n, block);
  }
  void decode(const uint8_t* block, int64_t pos0, float* x) const override {
    inner_->decode(block, pos0, x);
    rotate_rows(rot_, x, block_tokens(), head_dim(), true);
  }

 protected:
  const Base& inner() const { return *inner_; }
  const RandomRotation& rotation() const { return rot_; }

 private:
  std::unique_ptr<Base> inner_;
  RandomRotation rot_;
};

class RotatedKeyCodec final : public RotatedCodec<KeyCodec> {
 public:
  using RotatedCodec::RotatedCodec;
  size_t query_state_floats() const override { return inner().query_state_floats(); }
  // One row is a block of one (prepare_queries below).
  void prepare_query(const float* q, float* state, Workspace& ws) const override {
    prepare_queries(q, 0, 1, state, 0, ws);
  }
  // All rows turned first, then the inner codec's batched preparation.
  void prepare_queries(const float* q, size_t q_stride, int n, float* states, size_t state_stride,
                       Workspace& ws) const override {
    const int d = head_dim();
    static thread_local std::vector<float> x;  // not a workspace slot: the inner codec may take those
    x.resize(size_t(n) * size_t(d));
    for (int r = 0; r < n; ++r) std::copy_n(q + size_t(r) * q_stride, d, x.data() + size_t(r) * d);
    rotation().forward_rows(x.data(), size_t(n), size_t(d));
    inner().prepare_queries(x.data(), size_t(d), n, states, state_stride, ws);
  }
  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t pos0, int64_t i0,
              int64_t i1, float* out, size_t out_stride, Workspace& ws) const override {
    inner().scores(states, n_q, blocks, pos0, i0, i1, out, out_stride, ws);
  }
};

class RotatedValueCodec final : public RotatedCodec<ValueCodec> {
 public:
  using RotatedCodec::RotatedCodec;
  size_t accum_floats() const override { return inner().accum_floats(); }
  void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, int64_t pos0,
                  int64_t i0, int64_t i1, float* acc, Workspace& ws) const override {
    inner().accumulate(w, w_stride, n_q, blocks, pos0, i0, i1, acc, ws);
  }
  void finalize(const float* acc, int n_q, float* out) const override {
    inner().finalize(acc, n_q, out);
    rotate_rows(rotation(), out, n_q, head_dim(), true);
  }
  int64_t preferred_run_tokens() const override { return inner().preferred_run_tokens(); }
};

}  // namespace

std::unique_ptr<KeyCodec> rotate_keys(std::unique_ptr<KeyCodec> inner, uint64_t seed) {
  return std::make_unique<RotatedKeyCodec>(std::move(inner), seed);
}
std::unique_ptr<ValueCodec> rotate_values(std::unique_ptr<ValueCodec> inner, uint64_t seed) {
  return std::make_unique<RotatedValueCodec>(std::move(inner), seed);
}

}  // namespace vq::kv
