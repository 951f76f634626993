// q4: 4-bit codes per group of 32 channels with an fp16 scale (4.5 bits), quantized like
// llama.cpp's q4_0, stored in blocks of 16 tokens (q4_layout.h): keys with tokens in the vector
// lanes, values with channels in the lanes. Optional randomized Hadamard rotation (rot=1).
//
// Both fused paths are integer byte dot products (DotBytes: vpdpbusd on CPUs with AVX-512 VNNI,
// 64 multiply-adds per instruction against an FMA's 16) of the unsigned 4-bit codes with a
// signed 16-bit fixed-point operand split into two byte planes:
//   scores:     the query, held per group of 32 channels (q4::QueryState, prepared once per
//               step); tokens in lanes, so no horizontal sums.
//   accumulate: the softmax weights times the tokens' group scales, held per run of 256 tokens
//               (RunWeights); channels in lanes, the sum over tokens inside each lane.
// The fixed point holds each operand within 1/65024 of its group's (run's) largest magnitude,
// finer than fp16 and far finer than the 4-bit codes; the tests check the fused paths against
// decode-then-dot within the bound that implies, and the scores exactly against the held query.
// This is a deliberate deviation from float arithmetic (llama.cpp's quantized-cache dot products
// hold the query at 8 bits); it halves the work per token.
//
// Without VNNI (AVX2, AVX-512F) a byte dot product is a multiply to 16-bit pair sums and a second
// multiply to widen them; the kernels add up to eight products' pair sums in 16 bits before one
// widening (src/kv/kernels/byte_dot-inl.h), and work on as many query rows, parts of a block (scores) or columns
// of channels (values) at a time as keep their sums within AVX2's 16 registers.
#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "src/kv/methods/baseline/baseline.h"
#include "src/kv/methods/baseline/q4_kernels.h"
#include "src/kv/methods/baseline/q4_layout.h"
#include "veloxquant/error.h"

namespace vq::kv {

namespace {

void check_dim(int d) {
  VQ_CHECK(d <= q4::kGroup * q4::kMaxGroups, fmt::format("q4: head_dim {} above 2048", d));
}

class Q4KeyCodec final : public KeyCodec {
 public:
  explicit Q4KeyCodec(int d) : d_(d) { check_dim(d); }
  int head_dim() const override { return d_; }
  int block_tokens() const override { return q4::kBlockTokens; }
  size_t block_bytes() const override { return q4::block_bytes(d_); }
  void encode(const float* keys, int64_t, uint8_t* block) const override {
    for (int t = 0; t < q4::kBlockTokens; ++t) q4::encode_token(keys + size_t(t) * d_, d_, t, block);
  }
  bool encodes_single_tokens() const override { return true; }
  void encode_token(const float* key, int64_t, int slot, uint8_t* block) const override {
    q4::encode_token(key, d_, slot, block);
  }
  void decode(const uint8_t* block, int64_t, float* keys) const override { q4::decode_block(block, d_, keys); }
  // The state is q4::QueryState's 32-bit words, kept in the float array the contract provides.
  size_t query_state_floats() const override { return q4::QueryState::words(d_); }
  void prepare_query(const float* q, float* state, Workspace&) const override {
    q4::QueryState::prepare(q, d_, state);
  }
  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1, float* out,
              size_t out_stride, Workspace&) const override {
    q4::scores(states, n_q, q4::QueryState::words(d_), blocks,
                                   i0, i1, d_, out, out_stride);
  }

 private:
  int d_;
};

class Q4ValueCodec final : public ValueCodec {
 public:
  explicit Q4ValueCodec(int d) : d_(d) { check_dim(d); }
  int head_dim() const override { return d_; }
  int block_tokens() const override { return q4::kBlockTokens; }
  size_t block_bytes() const override { return q4::values::block_bytes(d_); }
  void encode(const float* values, int64_t, uint8_t* block) const override {
    for (int t = 0; t < q4::kBlockTokens; ++t) q4::values::encode_token(values + size_t(t) * d_, d_, t, block);
  }
  bool encodes_single_tokens() const override { return true; }
  void encode_token(const float* value, int64_t, int slot, uint8_t* block) const override {
    q4::values::encode_token(value, d_, slot, block);
  }
  void decode(const uint8_t* block, int64_t, float* values) const override { q4::values::decode_block(block, d_, values); }
  size_t accum_floats() const override { return size_t(q4::values::n_chunks(d_)) * q4::values::kChunk; }
  void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1,
                  float* acc, Workspace&) const override {
    q4::accumulate(w, w_stride, n_q, blocks, i0, i1, d_, acc, accum_floats());
  }
  void finalize(const float* acc, int n_q, float* out) const override {
    for (int r = 0; r < n_q; ++r) std::copy_n(acc + r * accum_floats(), d_, out + size_t(r) * d_);
  }

 private:
  int d_;
};

}  // namespace

const MethodDef& q4_method() {
  static const MethodDef def{
      {"q4", "4-bit per group of 32 with an fp16 scale (llama.cpp q4_0 rounding, 16 tokens interleaved)",
       baseline_params()},
      [](const ParamValues& v) {
        return make_baseline({[](int d) -> std::unique_ptr<KeyCodec> { return std::make_unique<Q4KeyCodec>(d); },
                              [](int d) -> std::unique_ptr<ValueCodec> { return std::make_unique<Q4ValueCodec>(d); },
                              [](int d) { return q4::bits_per_element(d); },
                              [](int d) { return q4::values::bits_per_element(d); }},
                             v);
      }};
  return def;
}

}  // namespace vq::kv
