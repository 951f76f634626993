// Matrix products against stored weights: y[t][r] = sum_c W[r][c] * x[t][c]. Weights stay in
// their file type. Types with an integer kernel (Q4_0, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K) quantize x
// to 8 bits per element first, as llama.cpp does, and multiply bytes (qdot.h); the others (F16,
// BF16, F32, Q4_1, Q5_1) dequantize a panel of rows into L1/L2 once per call and multiply floats.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vq::engine {

struct Weight {
  uint32_t type = 0;
  int64_t rows = 0, cols = 0;  // rows = output features, cols = input features (ggml ne[1], ne[0])
  const uint8_t* data = nullptr;
  size_t row_bytes = 0;
};

// x: [n_tok][cols], y: [n_tok][rows]. Same result at any thread count.
void matmul(const Weight& w, const float* x, int64_t n_tok, float* y);

// Plain reference: scalar dequantization, double accumulation, with x quantized and read back
// first where matmul quantizes it.
void matmul_reference(const Weight& w, const float* x, int64_t n_tok, float* y);

// Dequantized row r of w into out[cols] (embedding lookups).
void weight_row(const Weight& w, int64_t r, float* out);

}  // namespace vq::engine
