// Matrix products against stored weights: y[t][r] = sum_c W[r][c] * x[t][c]. Weights stay in
// their file type. Types with an integer kernel (Q4_0, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K) quantize x
// to 8 bits per element first, as llama.cpp does, and multiply bytes (qdot.h); the others (F16,
// BF16, F32, Q4_1, Q5_1) multiply floats: decode streams each row once, prefill dequantizes a panel
// of rows into L1/L2 once per call (F16 rows are widened in registers instead). F16 rows meet x
// rounded to fp16, as llama.cpp's F16 products do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace vq::engine {

struct Weight {
  uint32_t type = 0;
  int64_t rows = 0, cols = 0;  // rows = output features, cols = input features (ggml ne[1], ne[0])
  const uint8_t* data = nullptr;
  size_t row_bytes = 0;
};

// x: [n_tok][cols], y: [n_tok][rows]. Same result at any thread count.
void matmul(const Weight& w, const float* x, int64_t n_tok, float* y);

// Several matrices times the same x (Q, K and V; gate and up): the results of matmul on each,
// with x prepared once (quantized, or rounded to fp16) and one parallel pass over all their rows
// instead of a fork and a join per matrix, of which a decode step has several per layer.
struct MatmulOut {
  const Weight* w;
  float* y;
};
void matmul_shared(std::initializer_list<MatmulOut> outs, const float* x, int64_t n_tok);

// Plain reference: scalar dequantization, double accumulation, with x quantized and read back
// first where matmul quantizes it.
void matmul_reference(const Weight& w, const float* x, int64_t n_tok, float* y);

// Dequantized row r of w into out[cols] (embedding lookups).
void weight_row(const Weight& w, int64_t r, float* out);

}  // namespace vq::engine
