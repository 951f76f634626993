// Fast Walsh-Hadamard transform and the randomized Hadamard rotation R = H*D/sqrt(n), with D a
// seeded random +-1 diagonal: an orthogonal map that spreads outlier channels over all
// coordinates (QuaRot, TurboQuant, llama.cpp's rotated KV cache).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace vq {

inline bool is_power_of_two(size_t n) { return n && !(n & (n - 1)); }

// Unnormalized in-place FWHT: x <- H x, n a power of two. Applying it twice gives n*x.
void fwht(float* x, size_t n);

class RandomizedHadamard {
 public:
  RandomizedHadamard(size_t n, uint64_t seed);

  size_t size() const { return signs_.size(); }
  // x <- H D x / sqrt(n).
  void forward(float* x) const;
  // x <- D H x / sqrt(n), the inverse (and transpose) of forward.
  void inverse(float* x) const;
  // forward / inverse on `rows` vectors `stride` floats apart, the same bits as one at a time.
  void forward_rows(float* x, size_t rows, size_t stride) const;
  void inverse_rows(float* x, size_t rows, size_t stride) const;
  // Bytes the rotation keeps (one sign per coordinate, stored as floats here).
  size_t bytes() const { return signs_.size() * sizeof(float); }

 private:
  std::vector<float> signs_;
  float norm_;
};

}  // namespace vq
