// Packing of 1..8-bit codes into a little-endian bit stream: code i occupies bits
// [i*bits, (i+1)*bits) of the stream, so for 4 bits byte j holds code 2j in its low nibble.
// The layout never depends on the SIMD width: what one machine packs, every machine unpacks.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vq {

constexpr int kMaxCodeBits = 8;

inline constexpr size_t packed_bytes(size_t n, int bits) { return (n * size_t(bits) + 7) / 8; }

// codes[i] must be < 2^bits (higher bits are masked off). out must hold packed_bytes(n, bits).
void pack_bits(const uint8_t* codes, size_t n, int bits, uint8_t* out);
void unpack_bits(const uint8_t* packed, size_t n, int bits, uint8_t* codes);

// Scalar references, used by the tests to hold the vectorized paths.
void pack_bits_scalar(const uint8_t* codes, size_t n, int bits, uint8_t* out);
void unpack_bits_scalar(const uint8_t* packed, size_t n, int bits, uint8_t* codes);

}  // namespace vq
