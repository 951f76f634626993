// Bit packing: 2- and 4-bit codes through Highway 128-bit vectors (16 bytes at a time, so the
// byte order is the same on every target), other widths 8 codes at a time in a 64-bit word.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/core/bitpack.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/core/bitpack.h"
#include "veloxquant/error.h"

#include <cstring>

HWY_BEFORE_NAMESPACE();
namespace vq {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Returns how many codes were handled; the caller finishes the tail. The SCALAR target has no
// 128-bit vectors and leaves everything to the word-wise path.
#if HWY_TARGET == HWY_SCALAR
size_t Pack4(const uint8_t*, size_t, uint8_t*) { return 0; }
size_t Unpack4(const uint8_t*, size_t, uint8_t*) { return 0; }
size_t Unpack2(const uint8_t*, size_t, uint8_t*) { return 0; }
#else
size_t Pack4(const uint8_t* HWY_RESTRICT codes, size_t n, uint8_t* HWY_RESTRICT out) {
  const hn::FixedTag<uint8_t, 16> d8;
  const auto lo_mask = hn::Set(d8, 0x0F);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const auto a = hn::And(hn::LoadU(d8, codes + i), lo_mask);       // codes i..i+15
    const auto b = hn::And(hn::LoadU(d8, codes + i + 16), lo_mask);  // codes i+16..i+31
    // Even codes go to low nibbles, odd codes to high nibbles.
    const auto even = hn::ConcatEven(d8, b, a);
    const auto odd = hn::ConcatOdd(d8, b, a);
    hn::StoreU(hn::Or(even, hn::ShiftLeft<4>(odd)), d8, out + i / 2);
  }
  return i;
}

size_t Unpack4(const uint8_t* HWY_RESTRICT packed, size_t n, uint8_t* HWY_RESTRICT codes) {
  const hn::FixedTag<uint8_t, 16> d8;
  const auto lo_mask = hn::Set(d8, 0x0F);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const auto x = hn::LoadU(d8, packed + i / 2);
    const auto lo = hn::And(x, lo_mask);
    const auto hi = hn::ShiftRight<4>(x);
    hn::StoreU(hn::InterleaveLower(d8, lo, hi), d8, codes + i);
    hn::StoreU(hn::InterleaveUpper(d8, lo, hi), d8, codes + i + 16);
  }
  return i;
}

size_t Unpack2(const uint8_t* HWY_RESTRICT packed, size_t n, uint8_t* HWY_RESTRICT codes) {
  const hn::FixedTag<uint8_t, 16> d8;
  const auto m = hn::Set(d8, 0x03);
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const auto x = hn::LoadU(d8, packed + i / 4);
    const auto c0 = hn::And(x, m);
    const auto c1 = hn::And(hn::ShiftRight<2>(x), m);
    const auto c2 = hn::And(hn::ShiftRight<4>(x), m);
    const auto c3 = hn::ShiftRight<6>(x);
    // Byte j yields codes 4j..4j+3: interleave (c0,c2) and (c1,c3), then those pairs.
    const auto a_lo = hn::InterleaveLower(d8, c0, c1), a_hi = hn::InterleaveUpper(d8, c0, c1);
    const auto b_lo = hn::InterleaveLower(d8, c2, c3), b_hi = hn::InterleaveUpper(d8, c2, c3);
    const hn::FixedTag<uint16_t, 8> d16;
    const auto al = hn::BitCast(d16, a_lo), ah = hn::BitCast(d16, a_hi);
    const auto bl = hn::BitCast(d16, b_lo), bh = hn::BitCast(d16, b_hi);
    hn::StoreU(hn::BitCast(d8, hn::InterleaveLower(d16, al, bl)), d8, codes + i);
    hn::StoreU(hn::BitCast(d8, hn::InterleaveUpper(d16, al, bl)), d8, codes + i + 16);
    hn::StoreU(hn::BitCast(d8, hn::InterleaveLower(d16, ah, bh)), d8, codes + i + 32);
    hn::StoreU(hn::BitCast(d8, hn::InterleaveUpper(d16, ah, bh)), d8, codes + i + 48);
  }
  return i;
}
#endif  // HWY_TARGET == HWY_SCALAR

}  // namespace HWY_NAMESPACE
}  // namespace vq
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq {
namespace {

// Groups of 8 codes make exactly `bits` bytes: pack them through one 64-bit word.
void pack_words(const uint8_t* codes, size_t n, int bits, uint8_t* out) {
  const uint64_t mask = (1u << bits) - 1;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w = 0;
    for (int k = 0; k < 8; ++k) w |= (uint64_t(codes[i + k]) & mask) << (k * bits);
    std::memcpy(out + i / 8 * bits, &w, size_t(bits));  // little-endian host (x86-64, aarch64)
  }
  if (i < n) {
    uint64_t w = 0;
    for (size_t k = 0; i + k < n; ++k) w |= (uint64_t(codes[i + k]) & mask) << (k * bits);
    std::memcpy(out + i / 8 * bits, &w, packed_bytes(n, bits) - i / 8 * bits);
  }
}

// The whole groups with `bits` known at compile time: the 8-byte load and the shifts inline
// (a memcpy of a run-time length is a library call per group).
template <int kBits>
size_t unpack_groups(const uint8_t* packed, size_t n, uint8_t* codes) {
  constexpr uint64_t kMask = (1u << kBits) - 1;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w = 0;
    std::memcpy(&w, packed + i / 8 * kBits, size_t(kBits));
    for (int k = 0; k < 8; ++k) codes[i + k] = uint8_t((w >> (k * kBits)) & kMask);
  }
  return i;
}

void unpack_words(const uint8_t* packed, size_t n, int bits, uint8_t* codes) {
  const uint64_t mask = (1u << bits) - 1;
  size_t i = 0;
  switch (bits) {
    case 1: i = unpack_groups<1>(packed, n, codes); break;
    case 2: i = unpack_groups<2>(packed, n, codes); break;
    case 3: i = unpack_groups<3>(packed, n, codes); break;
    case 4: i = unpack_groups<4>(packed, n, codes); break;
    case 5: i = unpack_groups<5>(packed, n, codes); break;
    case 6: i = unpack_groups<6>(packed, n, codes); break;
    case 7: i = unpack_groups<7>(packed, n, codes); break;
    default: i = unpack_groups<8>(packed, n, codes); break;
  }
  if (i < n) {
    uint64_t w = 0;
    std::memcpy(&w, packed + i / 8 * bits, packed_bytes(n, bits) - i / 8 * bits);
    for (size_t k = 0; i + k < n; ++k) codes[i + k] = uint8_t((w >> (k * bits)) & mask);
  }
}

}  // namespace

HWY_EXPORT(Pack4);
HWY_EXPORT(Unpack4);
HWY_EXPORT(Unpack2);

void pack_bits_scalar(const uint8_t* codes, size_t n, int bits, uint8_t* out) {
  VQ_CHECK(bits >= 1 && bits <= kMaxCodeBits, "pack_bits: bits must be in 1..8");
  pack_words(codes, n, bits, out);
}

void unpack_bits_scalar(const uint8_t* packed, size_t n, int bits, uint8_t* codes) {
  VQ_CHECK(bits >= 1 && bits <= kMaxCodeBits, "unpack_bits: bits must be in 1..8");
  unpack_words(packed, n, bits, codes);
}

void pack_bits(const uint8_t* codes, size_t n, int bits, uint8_t* out) {
  size_t done = 0;
  if (bits == 4) done = HWY_DYNAMIC_DISPATCH(Pack4)(codes, n, out);
  // done is a multiple of 8 codes, so the rest starts on a byte boundary.
  pack_bits_scalar(codes + done, n - done, bits, out + done * size_t(bits) / 8);
}

void unpack_bits(const uint8_t* packed, size_t n, int bits, uint8_t* codes) {
  size_t done = 0;
  if (bits == 4) done = HWY_DYNAMIC_DISPATCH(Unpack4)(packed, n, codes);
  if (bits == 2) done = HWY_DYNAMIC_DISPATCH(Unpack2)(packed, n, codes);
  unpack_bits_scalar(packed + done * size_t(bits) / 8, n - done, bits, codes + done);
}

}  // namespace vq
#endif
