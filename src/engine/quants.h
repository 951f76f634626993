// Block layouts of the ggml weight types this engine reads, and their plain scalar
// dequantization (the reference every vectorized kernel is tested against).
// Layouts follow ggml's: https://github.com/ggml-org/ggml/blob/master/src/ggml-common.h
#pragma once

#include <cstddef>
#include <cstdint>

#include "src/engine/gguf.h"

namespace vq::engine {

constexpr int kQK = 32;    // elements per block of the legacy types
constexpr int kQK_K = 256; // elements per super-block of the K-quants

#pragma pack(push, 1)
struct BlockQ4_0 { uint16_t d; uint8_t qs[kQK / 2]; };
struct BlockQ4_1 { uint16_t d, m; uint8_t qs[kQK / 2]; };
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[kQK / 2]; };
struct BlockQ5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[kQK / 2]; };
struct BlockQ8_0 { uint16_t d; int8_t qs[kQK]; };
struct BlockQ4_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[kQK_K / 2]; };
struct BlockQ5_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[kQK_K / 8]; uint8_t qs[kQK_K / 2]; };
struct BlockQ6_K { uint8_t ql[kQK_K / 2]; uint8_t qh[kQK_K / 4]; int8_t scales[kQK_K / 16]; uint16_t d; };
#pragma pack(pop)

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);

// True for the weight types the matmul kernels handle.
bool is_supported_weight_type(uint32_t type);

// Dequantizes n elements (a whole number of blocks) of a row of `type` into floats.
void dequantize_row_scalar(uint32_t type, const uint8_t* src, float* dst, int64_t n);

// Bytes of a row of n elements.
size_t row_bytes(uint32_t type, int64_t n);

}  // namespace vq::engine
