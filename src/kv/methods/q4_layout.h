// q4's block layout, as plain scalar code (the reference for the fused kernels in q4.cpp).
//
// Quantization is llama.cpp's q4_0, per token and per group of 32 channels: the signed value of
// largest magnitude maps to code 0, scale = max / -8 (stored fp16), code = floor(x / scale + 8.5)
// clamped to 0..15, value = scale * (code - 8). Only the arrangement of the bytes differs from
// q4_0: a block holds 16 tokens *interleaved*, so that one 64-byte load gives the same eight
// channels of 16 tokens, one 32-bit word per token, and the kernels work with tokens in the
// vector lanes (no horizontal sums in scores, no per-token scale broadcasts):
//
//   codes:  C = ceil(d/8) chunks; chunk c is 16 words (word t = token t), nibble k of a word
//           (bits 4k..4k+3) is channel 8c + k; channels past d hold code 8 (value 0)   64*C bytes
//   scales: G = ceil(d/32) groups; group g is 16 fp16 scales, one per token              32*G bytes
//
// Bits per element: (4 * 8C + 16 * G) / d, which is 4.5 at d = 128 (the padding of a head_dim
// that is not a multiple of 8 counts). A token is encoded on its own into its slot, so the
// stream compresses every token as soon as it leaves the window, as llama.cpp's cache does.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "src/core/fp16.h"

namespace vq::kv::q4 {

constexpr int kBlockTokens = 16;
constexpr int kGroup = 32;
constexpr int kChunk = 8;  // channels per 32-bit word
constexpr int kMaxGroups = 64;  // head_dim up to 2048

inline int n_chunks(int d) { return (d + kChunk - 1) / kChunk; }
inline int n_groups(int d) { return (d + kGroup - 1) / kGroup; }
inline size_t codes_bytes(int d) { return size_t(n_chunks(d)) * kBlockTokens * 4; }
inline size_t block_bytes(int d) { return codes_bytes(d) + size_t(n_groups(d)) * kBlockTokens * 2; }
inline double bits_per_element(int d) { return (4.0 * kChunk * n_chunks(d) + 16.0 * n_groups(d)) / d; }

inline uint32_t* word(uint8_t* block, int c, int t) {
  return reinterpret_cast<uint32_t*>(block + (size_t(c) * kBlockTokens + size_t(t)) * 4);
}
inline uint32_t load_word(const uint8_t* block, int c, int t) {
  uint32_t w;
  std::memcpy(&w, block + (size_t(c) * kBlockTokens + size_t(t)) * 4, 4);
  return w;
}
inline size_t scale_offset(int d, int g, int t) { return codes_bytes(d) + (size_t(g) * kBlockTokens + size_t(t)) * 2; }

// Writes token x (d floats) into slot t of a block.
inline void encode_token(const float* x, int d, int t, uint8_t* block) {
  uint8_t codes[kGroup * kMaxGroups];
  for (int g = 0; g < n_groups(d); ++g) {
    const int j0 = g * kGroup, j1 = std::min(d, j0 + kGroup);
    float amax = 0.0f, vmax = 0.0f;
    for (int j = j0; j < j1; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        vmax = x[j];
      }
    }
    const float scale = vmax / -8.0f;
    const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
    const uint16_t h = f32_to_f16(scale);
    std::memcpy(block + scale_offset(d, g, t), &h, 2);
    for (int j = j0; j < j1; ++j) codes[j] = uint8_t(std::clamp(int(std::floor(x[j] * inv + 8.5f)), 0, 15));
  }
  for (int c = 0; c < n_chunks(d); ++c) {
    uint32_t w = 0;
    for (int k = 0; k < kChunk; ++k) {
      const int j = c * kChunk + k;
      w |= uint32_t(j < d ? codes[j] : 8) << (4 * k);
    }
    std::memcpy(word(block, c, t), &w, 4);
  }
}

inline float value(const uint8_t* block, int d, int t, int j) {
  uint16_t h;
  std::memcpy(&h, block + scale_offset(d, j / kGroup, t), 2);
  const int code = int(load_word(block, j / kChunk, t) >> (4 * (j % kChunk)) & 15u);
  return f16_to_f32(h) * float(code - 8);
}

inline void decode_block(const uint8_t* block, int d, float* out) {
  for (int t = 0; t < kBlockTokens; ++t) {
    for (int j = 0; j < d; ++j) out[size_t(t) * d + j] = value(block, d, t, j);
  }
}

}  // namespace vq::kv::q4
