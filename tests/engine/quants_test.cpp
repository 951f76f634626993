// Vectorized dequantization equals the scalar reference bit for bit on random blocks of every
// supported weight type; the scalar reference reproduces hand-computed values.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "src/core/fp16.h"
#include "src/core/rng.h"
#include "src/engine/dequant.h"
#include "src/engine/quants.h"
#include "tests/each_target.h"
#include "tests/engine/random_weights.h"

namespace vq::engine {
namespace {

const GgmlType kTypes[] = {GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0, GgmlType::kQ4_0,
                           GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ4_K,
                           GgmlType::kQ5_K, GgmlType::kQ6_K};

TEST(Dequant, VectorEqualsScalarBitForBit) {
  for (GgmlType t : kTypes) {
    for (int64_t n : {256, 512, 2048}) {
      const auto row = random_row(t, n, uint64_t(t) * 100 + uint64_t(n));
      std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
      dequantize_row(uint32_t(t), row.data(), a.data(), n);
      dequantize_row_scalar(uint32_t(t), row.data(), b.data(), n);
      ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << ggml_type_info(uint32_t(t))->name << " n=" << n;
    }
  }
}

TEST(Dequant, Q4_0ByHand) {
  BlockQ4_0 b{};
  b.d = f32_to_f16(0.5f);
  b.qs[0] = 0x9F;  // element 0: 15 - 8 = 7, element 16: 9 - 8 = 1
  std::vector<float> y(32);
  dequantize_row_scalar(uint32_t(GgmlType::kQ4_0), reinterpret_cast<uint8_t*>(&b), y.data(), 32);
  EXPECT_EQ(y[0], 3.5f);
  EXPECT_EQ(y[16], 0.5f);
  EXPECT_EQ(y[1], -4.0f);
}

TEST(Dequant, Q5_0HighBits) {
  BlockQ5_0 b{};
  b.d = f32_to_f16(1.0f);
  b.qh[0] = 0x01;  // element 0 gets +16
  b.qh[2] = 0x01;  // element 16 gets +16
  std::vector<float> y(32);
  dequantize_row_scalar(uint32_t(GgmlType::kQ5_0), reinterpret_cast<uint8_t*>(&b), y.data(), 32);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[16], 0.0f);
  EXPECT_EQ(y[1], -16.0f);
}

}  // namespace
}  // namespace vq::engine

#include <cmath>

#include "src/core/threads.h"
#include "src/engine/matmul.h"

namespace vq::engine {
namespace {

TEST(Matmul, EqualsReferenceForEveryType) {
  for (GgmlType t : kTypes) {
    for (int64_t n_tok : {1, 3, 4, 9}) {
      const int64_t rows = 37, cols = 512;
      std::vector<uint8_t> data;
      for (int64_t r = 0; r < rows; ++r) {
        auto row = random_row(t, cols, uint64_t(r) * 7 + uint64_t(t));
        data.insert(data.end(), row.begin(), row.end());
      }
      const Weight w{uint32_t(t), rows, cols, data.data(), row_bytes(uint32_t(t), cols)};
      Rng rng(5);
      std::vector<float> x(size_t(n_tok * cols)), y(size_t(n_tok * rows)), ref(y.size()), row(static_cast<size_t>(cols));
      for (auto& v : x) v = float(rng.normal());
      matmul(w, x.data(), n_tok, y.data());
      matmul_reference(w, x.data(), n_tok, ref.data());
      for (int64_t r = 0; r < rows; ++r) {
        dequantize_row_scalar(uint32_t(t), data.data() + size_t(r) * w.row_bytes, row.data(), cols);
        for (int64_t k = 0; k < n_tok; ++k) {
          double bound = 0;
          for (int64_t c = 0; c < cols; ++c) bound += std::fabs(double(row[size_t(c)]) * x[size_t(k * cols + c)]);
          ASSERT_LE(std::fabs(y[size_t(k * rows + r)] - ref[size_t(k * rows + r)]), 1e-5 * bound + 1e-30)
              << ggml_type_info(uint32_t(t))->name << " r=" << r << " t=" << k;
        }
      }
    }
  }
}

// Decode (up to 4 tokens: one pass per row) and prefill (a dequantized panel) take different paths
// for F16, BF16 and F32 weights; a token's product must not depend on which, so that a sequence
// batched with others generates what it generates alone.
// On every target this CPU runs: prefill's tiles (4 x 6 tokens with 32 vector registers, 4 x 3
// with 16) and their remainders against decode's rows of up to 4 tokens.
TEST(Matmul, FloatWeightsGiveATokenTheSameResultInAnyBatch) {
  for_each_supported_target([] {
    for (GgmlType t : {GgmlType::kF16, GgmlType::kBF16, GgmlType::kF32}) {
      const int64_t rows = 37, cols = 512;
      std::vector<uint8_t> data;
      Rng rng(9);
      if (t == GgmlType::kF32) {  // (random bytes would hold NaNs)
        std::vector<float> f(size_t(rows * cols));
        for (auto& v : f) v = float(rng.normal());
        data.resize(f.size() * 4);
        std::memcpy(data.data(), f.data(), data.size());
      } else {
        for (int64_t r = 0; r < rows; ++r) {
          auto row = random_row(t, cols, uint64_t(r) * 5 + 1);
          data.insert(data.end(), row.begin(), row.end());
        }
      }
      const Weight w{uint32_t(t), rows, cols, data.data(), row_bytes(uint32_t(t), cols)};
      for (int64_t n_tok : {9, 14}) {
        std::vector<float> x(size_t(n_tok * cols)), all_tok(size_t(n_tok * rows)), part(all_tok.size());
        for (auto& v : x) v = float(rng.normal());
        matmul(w, x.data(), n_tok, all_tok.data());
        for (int64_t group : {1, 2, 4}) {
          for (int64_t t0 = 0; t0 < n_tok; t0 += group) {
            const int64_t n = std::min(group, n_tok - t0);
            matmul(w, x.data() + t0 * cols, n, part.data() + t0 * rows);
          }
          EXPECT_EQ(all_tok, part) << ggml_type_info(uint32_t(t))->name << ", " << n_tok << " tokens in groups of "
                                   << group;
        }
      }
    }
  });
}

TEST(Matmul, SameResultAtAnyThreadCount) {
  const int64_t rows = 300, cols = 256, n_tok = 7;
  auto data = random_row(GgmlType::kQ4_K, rows * cols, 3);
  const Weight w{uint32_t(GgmlType::kQ4_K), rows, cols, data.data(), row_bytes(uint32_t(GgmlType::kQ4_K), cols)};
  std::vector<float> x(size_t(n_tok * cols), 0.25f), a(size_t(n_tok * rows)), b(a.size());
  set_num_threads(1);
  matmul(w, x.data(), n_tok, a.data());
  set_num_threads(2);
  matmul(w, x.data(), n_tok, b.data());
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace vq::engine
