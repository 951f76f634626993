// A seeded random rotation of R^n for any n: the randomized Hadamard transform H D / sqrt(n)
// (O(n log n)) when n is a power of two, otherwise a dense orthogonal matrix drawn from the Haar
// measure, the rotation TurboQuant's paper specifies (QR of a Gaussian matrix with the signs of
// R's diagonal moved into Q, Mezzadri 2007), applied as a matrix product (O(n^2)).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "src/core/hadamard.h"

namespace vq {

class RandomRotation {
 public:
  // The largest dimension that takes a dense matrix (4 MiB of floats).
  static constexpr size_t kMaxDense = 1024;

  RandomRotation(size_t n, uint64_t seed);

  size_t size() const { return n_; }
  bool dense() const { return !hadamard_; }
  // x <- Q x.
  void forward(float* x) const;
  // x <- Q^T x, the inverse of forward.
  void inverse(float* x) const;
  // forward / inverse on `rows` vectors `stride` floats apart (one call for a batch of short
  // rows), the same bits as one at a time.
  void forward_rows(float* x, size_t rows, size_t stride) const;
  void inverse_rows(float* x, size_t rows, size_t stride) const;
  // Bytes the rotation keeps: the signs of the Hadamard form, or the dense matrix and its transpose.
  size_t bytes() const;

 private:
  size_t n_;
  std::optional<RandomizedHadamard> hadamard_;
  // Dense: Q row-major, and its transpose (both products read a matrix by columns, with the
  // outputs in the vector lanes: dense_rotation_kernels.h).
  std::vector<float> q_, qt_;
};

}  // namespace vq
