// q4's block layout, as plain scalar code (the reference for the fused kernels in
// q4_key_kernels.cpp and q4_value_kernels.cpp).
//
// Quantization is llama.cpp's q4_0, per token and per group of 32 channels: the signed value of
// largest magnitude maps to code 0, scale = max / -8 (stored fp16), code = floor(x / scale + 8.5)
// clamped to 0..15, value = scale * (code - 8). Only the arrangement of the bytes differs from
// q4_0. A key block holds 16 tokens *interleaved*, so that one 64-byte load gives the same eight
// channels of 16 tokens, one 32-bit word per token (the scores work with tokens in the lanes):
//
//   codes:  C = ceil(d/8) chunks; chunk c is 16 words (word t = token t), nibble k of a word
//           (bits 4k..4k+3) is channel 8c + k; channels past d hold code 8 (value 0)   64*C bytes
//   scales: G = ceil(d/32) groups; group g is 16 fp16 scales, one per token              32*G bytes
//
// Bits per element: (4 * 8C + 16 * G) / d, which is 4.5 at d = 128 (the padding of a head_dim
// that is not a multiple of 8 counts). Value blocks (namespace values, below) hold the same
// codes and scales with channels in the lanes. A token is encoded on its own into its slot, so
// the stream compresses every token as soon as it leaves the window, as llama.cpp's cache does.
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

// q4_0's rounding of one token: codes[j] for j < d, and the fp16 scale of each group.
inline void quantize_token(const float* x, int d, uint8_t* codes, uint16_t* scales) {
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
    scales[g] = f32_to_f16(scale);
    for (int j = j0; j < j1; ++j) codes[j] = uint8_t(std::clamp(int(std::floor(x[j] * inv + 8.5f)), 0, 15));
  }
}

// Writes token x (d floats) into slot t of a block.
inline void encode_token(const float* x, int d, int t, uint8_t* block) {
  uint8_t codes[kGroup * kMaxGroups];
  uint16_t scales[kMaxGroups];
  quantize_token(x, d, codes, scales);
  for (int g = 0; g < n_groups(d); ++g) std::memcpy(block + scale_offset(d, g, t), &scales[g], 2);
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

// A query prepared for the fused scores: 16-bit fixed point per group of 32 channels, as two
// signed byte planes. With s = (largest |q_j| of the group) / 127, q_j is held as
// s * (hi_j + lo_j / 256) with hi_j = round(q_j / s) and lo_j = round(256 * remainder), both in
// -128..127, so |q_j - held| <= s / 512, about 1.5e-5 of the group's largest magnitude (the
// query's fp32 value is finer, the keys' 4-bit codes are far coarser). Words of one row:
//   chunk c (4 words at 4c): hi bytes of channels 8c+{0,2,4,6}, of 8c+{1,3,5,7}, then the same
//          for lo; byte i of a word is the channel whose code sits in byte i of a code word
//   group g (2 words at 4C + 2g): scale s / 256 and offset -8 * s * sum_j (hi_j + lo_j / 256),
//          as float bits (the offset centres the codes: value = scale * (code - 8))
struct QueryState {
  static size_t words(int d) { return 4 * size_t(n_chunks(d)) + 2 * size_t(n_groups(d)); }
  static size_t chunk_word(int c, int k) { return 4 * size_t(c) + size_t(k); }
  static size_t group_word(int C, int g) { return 4 * size_t(C) + 2 * size_t(g); }

  static void prepare(const float* q, int d, float* out) {  // out: words(d) 32-bit words
    const int C = n_chunks(d);
    uint8_t hi[kGroup * kMaxGroups] = {}, lo[kGroup * kMaxGroups] = {};
    for (int g = 0; g < n_groups(d); ++g) {
      const int j0 = g * kGroup, j1 = std::min(d, j0 + kGroup);
      float amax = 0.0f;
      for (int j = j0; j < j1; ++j) amax = std::max(amax, std::fabs(q[j]));
      const double s = double(amax) / 127.0;
      int64_t held = 0;  // sum of 256 * hi + lo
      for (int j = j0; j < j1 && s > 0; ++j) {
        const double t = double(q[j]) / s;
        // Rounding half away from zero, as lround, without the library call (it runs per step).
        const auto round = [](double v) { return int(v + (v >= 0 ? 0.5 : -0.5)); };
        int h = round(t);
        int l = round((t - h) * 256.0);
        if (l == 128) {  // t = h + 0.5 exactly: h + 1 stays within 127 because |t| <= 127
          h += 1;
          l = -128;
        }
        hi[j] = uint8_t(int8_t(h));
        lo[j] = uint8_t(int8_t(l));
        held += 256 * h + l;
      }
      const float scale = float(s / 256.0), offset = float(-8.0 * (s / 256.0) * double(held));
      std::memcpy(out + group_word(C, g), &scale, 4);
      std::memcpy(out + group_word(C, g) + 1, &offset, 4);
    }
    const auto word_of = [&](const uint8_t* plane, int c, int parity) {
      uint32_t w = 0;
      for (int i = 0; i < 4; ++i) {
        const int j = c * kChunk + 2 * i + parity;
        w |= uint32_t(j < d ? plane[j] : 0) << (8 * i);
      }
      return w;
    };
    for (int c = 0; c < C; ++c) {
      const uint32_t w[4] = {word_of(hi, c, 0), word_of(hi, c, 1), word_of(lo, c, 0), word_of(lo, c, 1)};
      std::memcpy(out + chunk_word(c, 0), w, sizeof(w));
    }
  }
};

inline void decode_block(const uint8_t* block, int d, float* out) {
  for (int t = 0; t < kBlockTokens; ++t) {
    for (int j = 0; j < d; ++j) out[size_t(t) * d + j] = value(block, d, t, j);
  }
}

// Values are quantized the same way but stored with *channels* in the lanes, so that the fused
// accumulation can sum over tokens inside a lane with byte dot products (q4_value_kernels.cpp):
//   codes:  VC = ceil(d/16) chunks of 16 channels; chunk cc holds two 64-byte halves h (tokens
//           8h..8h+7); lane i of a half (bytes 4i..4i+3) is channel 16cc+i, and its byte b holds
//           token 8h+b in the low nibble and token 8h+4+b in the high one; channels past d hold
//           code 8                                                              128*VC bytes
//   scales: as for keys, G groups of 16 fp16 scales                              32*G bytes
// Bits per element: (64 * VC + 16 * G) / d, 4.5 at d = 128.
namespace values {

constexpr int kChunk = 16;  // channels per 64-byte half-block row
inline int n_chunks(int d) { return (d + kChunk - 1) / kChunk; }
inline size_t codes_bytes(int d) { return size_t(n_chunks(d)) * 128; }
inline size_t block_bytes(int d) { return codes_bytes(d) + size_t(n_groups(d)) * kBlockTokens * 2; }
inline double bits_per_element(int d) { return (64.0 * n_chunks(d) + 16.0 * n_groups(d)) / d; }
inline size_t scale_offset(int d, int g, int t) { return codes_bytes(d) + (size_t(g) * kBlockTokens + size_t(t)) * 2; }

// Byte and shift of channel j of token t.
inline size_t code_byte(int j, int t) {
  return size_t(j / kChunk) * 128 + size_t(t / 8) * 64 + size_t(j % kChunk) * 4 + size_t(t % 4);
}
inline int code_shift(int t) { return (t % 8) / 4 * 4; }

inline void encode_token(const float* x, int d, int t, uint8_t* block) {
  uint8_t codes[kGroup * kMaxGroups];
  uint16_t scales[kMaxGroups];
  quantize_token(x, d, codes, scales);
  for (int g = 0; g < n_groups(d); ++g) std::memcpy(block + scale_offset(d, g, t), &scales[g], 2);
  const int shift = code_shift(t);
  for (int j = 0; j < n_chunks(d) * kChunk; ++j) {
    uint8_t& b = block[code_byte(j, t)];
    b = uint8_t((b & ~(15 << shift)) | ((j < d ? codes[j] : 8) << shift));
  }
}

inline float value(const uint8_t* block, int d, int t, int j) {
  uint16_t h;
  std::memcpy(&h, block + scale_offset(d, j / kGroup, t), 2);
  const int code = block[code_byte(j, t)] >> code_shift(t) & 15;
  return f16_to_f32(h) * float(code - 8);
}

inline void decode_block(const uint8_t* block, int d, float* out) {
  for (int t = 0; t < kBlockTokens; ++t) {
    for (int j = 0; j < d; ++j) out[size_t(t) * d + j] = value(block, d, t, j);
  }
}

}  // namespace values

}  // namespace vq::kv::q4
