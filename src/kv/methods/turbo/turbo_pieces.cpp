// TurboQuant-MSE over pieces of a head. The paper codes a whole head as one vector: one norm, one
// rotation of R^d. llama.cpp's turbo2/turbo3/turbo4 cache types instead cut a head into blocks of
// 128 channels (QK_TURBO3) and code each block as its own vector: a 128-point randomized Hadamard
// transform, an fp16 scale per block and Lloyd-Max levels for 128 dimensions. On a head of 256
// that is two scales per token (3.125 bits at 3 bits). `channels=N` is that choice here:
//
//   - piece p holds channels [p N, (p + 1) N); its rotation is drawn from the layer and side's
//     seed and p (llama.cpp uses one fixed pair of sign vectors for every block and layer: a
//     deviation, so that seeds can be swept as for the whole-head codec);
//   - each piece is a TurboQuant-MSE row of N dimensions (turbo_rows.h: the norm setting applies
//     per piece; llama.cpp's scale keeps each block's length, norm=length here);
//   - bits per element: bits + 16 P / d for P pieces.
//
// Layout: a block of 16 tokens is the P pieces' lane parts (turbo_lanes.h) one after another, so
// the bytes are those of P rows per token. Scores prepare the query once per step, each piece
// rotated by its own rotation, and add the pieces' fused scores; values accumulate each piece in
// its own rotated space and rotate it back once, in finalize.
#include "src/kv/methods/turbo/turbo_pieces.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "src/core/random_rotation.h"
#include "src/core/rng.h"
#include "src/kv/methods/turbo/turbo_lanes.h"
#include "src/kv/registry.h"
#include "veloxquant/error.h"

namespace vq::kv {
namespace {

uint64_t piece_seed(uint64_t seed, int piece) {
  uint64_t s = seed ^ (0xD1B54A32D192ED03ull * uint64_t(piece + 1));
  return splitmix64(s);
}

// What the key and the value codec share (Base: KeyCodec or ValueCodec): the pieces' rotations,
// their rows' quantizer, the lane part every piece uses, and moving tokens in and out.
template <typename Base>
class TurboPiecesCodec : public Base {
 public:
  TurboPiecesCodec(const TurboPiecesShape& s, uint64_t seed, bool values)
      : d_(s.d), n_(s.channels), pieces_(s.d / s.channels), rows_(sphere_rows(s.channels, s.bits, s.norm)),
        part_(s.channels, s.bits, rows_.table(), values) {
    rot_.reserve(size_t(pieces_));
    for (int p = 0; p < pieces_; ++p) rot_.emplace_back(size_t(n_), piece_seed(seed, p));
  }
  int head_dim() const override { return d_; }
  int block_tokens() const override { return kTurboBlockTokens; }
  size_t block_bytes() const override { return size_t(pieces_) * part_.bytes(); }
  size_t param_bytes() const override {
    size_t b = rows_.param_bytes();
    for (const RandomRotation& r : rot_) b += r.bytes();
    return b;
  }
  void encode(const float* x, int64_t pos0, uint8_t* block) const override {
    for (int t = 0; t < kTurboBlockTokens; ++t) encode_token(x + size_t(t) * d_, pos0 + t, t, block);
  }
  bool encodes_single_tokens() const override { return true; }
  void encode_token(const float* x, int64_t, int slot, uint8_t* block) const override {
    float r[TurboRows::kMaxDim];
    uint8_t codes[TurboRows::kMaxDim];
    for (int p = 0; p < pieces_; ++p) {
      std::copy_n(x + size_t(p) * n_, n_, r);
      rot_[size_t(p)].forward(r);
      part_.put(codes, rows_.quantize(r, codes), slot, block + size_t(p) * part_.bytes());
    }
  }
  void decode(const uint8_t* block, int64_t, float* x) const override {
    std::vector<float> piece(size_t(kTurboBlockTokens) * n_);
    for (int p = 0; p < pieces_; ++p) {
      part_.decode(block + size_t(p) * part_.bytes(), piece.data());
      rot_[size_t(p)].inverse_rows(piece.data(), kTurboBlockTokens, size_t(n_));
      for (int t = 0; t < kTurboBlockTokens; ++t) {
        std::copy_n(piece.data() + size_t(t) * n_, n_, x + size_t(t) * d_ + size_t(p) * n_);
      }
    }
  }

 protected:
  int pieces() const { return pieces_; }
  int channels() const { return n_; }
  const TurboLanePart& part() const { return part_; }
  const RandomRotation& rotation(int p) const { return rot_[size_t(p)]; }

 private:
  int d_, n_, pieces_;
  TurboRows rows_;
  TurboLanePart part_;
  std::vector<RandomRotation> rot_;
};

// Keys: the prepared state is the pieces' prepared rotated query parts, one after another.
class TurboPiecesKeyCodec final : public TurboPiecesCodec<KeyCodec> {
 public:
  TurboPiecesKeyCodec(const TurboPiecesShape& s, uint64_t seed) : TurboPiecesCodec(s, seed, false) {}
  size_t query_state_floats() const override { return size_t(pieces()) * part().query_state_floats(); }
  void prepare_query(const float* q, float* state, Workspace&) const override {
    float r[TurboRows::kMaxDim];
    for (int p = 0; p < pieces(); ++p) {
      std::copy_n(q + size_t(p) * channels(), channels(), r);
      rotation(p).forward(r);
      part().prepare_query(r, state + size_t(p) * part().query_state_floats());
    }
  }
  // Piece 0 writes the scores, the others add theirs, in piece order (the same sum on every
  // target and for any range).
  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1, float* out,
              size_t out_stride, Workspace&) const override {
    const size_t qs = query_state_floats(), ps = part().query_state_floats();
    part().scores(states, qs, n_q, blocks, block_bytes(), i0, i1, out, out_stride);
    for (int p = 1; p < pieces(); ++p) {
      part().add_scores(states + size_t(p) * ps, qs, n_q, blocks + size_t(p) * part().bytes(), block_bytes(), i0, i1,
                        out, out_stride);
    }
  }
};

// Values: each piece accumulates into its own channels of the d-float accumulator, in its
// rotated space; finalize rotates each piece back.
class TurboPiecesValueCodec final : public TurboPiecesCodec<ValueCodec> {
 public:
  TurboPiecesValueCodec(const TurboPiecesShape& s, uint64_t seed) : TurboPiecesCodec(s, seed, true) {}
  size_t accum_floats() const override { return size_t(head_dim()); }
  void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1,
                  float* acc, Workspace&) const override {
    for (int p = 0; p < pieces(); ++p) {
      part().accumulate(w, w_stride, n_q, blocks + size_t(p) * part().bytes(), block_bytes(), i0, i1,
                        acc + size_t(p) * channels(), size_t(head_dim()));
    }
  }
  void finalize(const float* acc, int n_q, float* out) const override {
    std::copy_n(acc, size_t(n_q) * head_dim(), out);
    for (int p = 0; p < pieces(); ++p) {
      for (int r = 0; r < n_q; ++r) rotation(p).inverse(out + size_t(r) * head_dim() + size_t(p) * channels());
    }
  }
};

}  // namespace

void check_turbo_pieces(const TurboPiecesShape& s) {
  VQ_CHECK(s.channels > 0 && s.d % s.channels == 0,
           fmt::format("turbo: channels={} must divide head_dim {}", s.channels, s.d));
  VQ_CHECK(turbo_lanes_apply(s.channels, s.bits),
           fmt::format("turbo: channels={} must be a multiple of 32 (each piece keeps tokens in the vector lanes)",
                       s.channels));
  VQ_CHECK(rotatable_dim(s.channels),
           fmt::format("turbo: a piece of {} channels is too large for a dense rotation", s.channels));
}

double turbo_pieces_bits(const TurboPiecesShape& s) {
  return s.bits + 16.0 * double(s.d / s.channels) / s.d;
}

std::unique_ptr<KeyCodec> turbo_pieces_keys(const TurboPiecesShape& s, uint64_t seed) {
  check_turbo_pieces(s);
  return std::make_unique<TurboPiecesKeyCodec>(s, seed);
}

std::unique_ptr<ValueCodec> turbo_pieces_values(const TurboPiecesShape& s, uint64_t seed) {
  check_turbo_pieces(s);
  return std::make_unique<TurboPiecesValueCodec>(s, seed);
}

}  // namespace vq::kv
