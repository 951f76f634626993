// Matrix products against stored weights: y[t][r] = sum_c W[r][c] * x[t][c]. Weights stay in
// their file type; a panel of rows is dequantized into L1/L2 once per call and reused for every
// token, so prefill (many tokens) runs at FMA speed and decode (one token) at memory speed.
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

// Plain reference: scalar dequantization, double accumulation.
void matmul_reference(const Weight& w, const float* x, int64_t n_tok, float* y);

// Dequantized row r of w into out[cols] (embedding lookups).
void weight_row(const Weight& w, int64_t r, float* out);

}  // namespace vq::engine
