// Bit packing: round trips for every width and odd lengths, the vectorized paths equal to the
// scalar reference byte for byte, and the documented layout.
#include "src/core/bitpack.h"

#include <gtest/gtest.h>

#include <vector>

#include "src/core/rng.h"

namespace vq {
namespace {

TEST(BitPack, RoundTripsEveryWidthAndLength) {
  Rng rng(11);
  for (int bits = 1; bits <= 8; ++bits) {
    for (size_t n : {0, 1, 2, 3, 7, 8, 9, 15, 31, 32, 33, 63, 64, 65, 127, 129, 255, 1000, 1001}) {
      std::vector<uint8_t> codes(n), back(n, 0xAA);
      for (auto& c : codes) c = uint8_t(rng.below(1u << bits));
      std::vector<uint8_t> packed(packed_bytes(n, bits) + 1, 0x5C), ref(packed.size(), 0x5C);
      pack_bits(codes.data(), n, bits, packed.data());
      pack_bits_scalar(codes.data(), n, bits, ref.data());
      ASSERT_EQ(packed, ref) << "bits " << bits << " n " << n;
      ASSERT_EQ(packed.back(), 0x5C) << "wrote past the end";
      unpack_bits(packed.data(), n, bits, back.data());
      ASSERT_EQ(back, codes) << "bits " << bits << " n " << n;
    }
  }
}

TEST(BitPack, LayoutIsLittleEndianBitStream) {
  const uint8_t codes4[] = {1, 2, 3, 4};
  uint8_t out[2];
  pack_bits(codes4, 4, 4, out);
  EXPECT_EQ(out[0], 0x21);
  EXPECT_EQ(out[1], 0x43);
  const uint8_t codes3[] = {7, 0, 5};  // bits: 111 000 101 -> 0b01000111, 0b00000001
  uint8_t o3[2];
  pack_bits(codes3, 3, 3, o3);
  EXPECT_EQ(o3[0], 0x47);
  EXPECT_EQ(o3[1], 0x01);
}

TEST(BitPack, MasksHighBits) {
  const uint8_t codes[] = {0xFF, 0xF0};
  uint8_t out[1], back[2];
  pack_bits(codes, 2, 2, out);
  unpack_bits(out, 2, 2, back);
  EXPECT_EQ(back[0], 3);
  EXPECT_EQ(back[1], 0);
}

}  // namespace
}  // namespace vq
