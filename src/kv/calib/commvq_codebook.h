// CommVQ's RoPE-commutative residual codebook (Li et al., "CommVQ: Commutative Vector
// Quantization for KV Cache Compression", ICML 2025; the official code's key quantizer).
//
// Vectors are held in pair layout: the d channels as P = d/2 rotary pairs, pair f at (2f, 2f+1),
// read as the complex number x_f + i y_f. A stage has 4096 codewords, indexed by two 6-bit codes
// (A, B); at pair f the codeword is z_A + i z_B with z_j = X_{j,f} + i Y_{j,f}, that is
// (X_A - Y_B, Y_A + X_B): each codeword is a sum of 2x2 blocks [[X, -Y], [Y, X]] acting on e1 and
// e2, and such blocks commute with every RoPE rotation, so R(p) applied to a decoded key equals
// the decoding rotated pair by pair. A stage is 2 x 64 x P parameters: X then Y, [64][P] each.
//
// Encoding is greedy over the stages, each an exhaustive search of its 4096 codewords through
// the split ||e - u_A - w_B||^2 = |u_A|^2 + |u_B|^2 - 2<e,u_A> - 2<e,w_B> + 2<u_A,w_B> (u_A the A
// half, w_B the B half, |w_B| = |u_B|): 128 dots and a 64 x 64 table scan, not 4096 dots.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace vq::kv {

inline constexpr int kCommHalfCodes = 64;  // values of A and of B: 4096 codewords a stage

class CommCodebook {
 public:
  // book: [stages][X|Y][64][d/2]; d even.
  CommCodebook(int d, std::vector<float> book);
  int head_dim() const { return d_; }
  int stages() const { return stages_; }
  const std::vector<float>& book() const { return book_; }
  size_t bytes() const { return (book_.size() + u_.size() + w_.size() + norm_.size() + g_.size()) * sizeof(float); }

  // The nearest codeword of stage s to e (pair layout): its A and B.
  void nearest(int s, const float* e, int* a, int* b) const;
  // Greedy residual encoding of e (pair layout, d floats; left holding the residual): codes
  // [2 * stages] as A_0, B_0, A_1, B_1, ...
  void encode(float* e, uint8_t* codes) const;
  // out (pair layout) = the sum over the stages of the chosen codewords.
  void decode(const uint8_t* codes, float* out) const;
  // e -= codeword (A, B) of stage s.
  void subtract(int s, int a, int b, float* e) const;

 private:
  int d_, pairs_, stages_;
  std::vector<float> book_;
  // Per stage: u_A and w_B as rows of d floats (pair layout), |u_A|^2, and <u_A, w_B> [A][B].
  std::vector<float> u_, w_, norm_, g_;
};

// Learns a codebook of `stages` stages from n vectors (pair layout, d floats each): stage by stage
// on the residual of the stages before, `rounds` rounds of hard-assignment EM (E: nearest
// codeword; M: the least-squares X, Y of the commutative form given the assignments, one
// 128 x 128 normal-equation system shared by all pairs). Seeded and deterministic at any
// thread count.
std::vector<float> train_comm_codebook(const std::vector<float>& rows, int64_t n, int d, int stages, int rounds,
                                       uint64_t seed);

}  // namespace vq::kv
