// Byte layouts of the per-token grouped baselines, as plain scalar code (the reference).
// A token of head_dim d is ceil(d/32) groups of 32 channels (the last may be shorter, "ragged"),
// each stored as [fp16 scale][codes]:
//   q8 (like llama.cpp q8_0): int8 codes, value = scale * code          -> 2 + gs bytes
//   q4 (like llama.cpp q4_0): 4-bit codes, value = scale * (code - 8),
//      channel j < h in the low nibble of byte j, channel j >= h in the high nibble of
//      byte j - h, with h = ceil(gs / 2)                                 -> 2 + ceil(gs/2) bytes
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "src/core/fp16.h"

namespace vq::kv {

constexpr int kQuantGroup = 32;

inline float load_scale(const uint8_t* group) {
  uint16_t h;
  std::memcpy(&h, group, 2);
  return f16_to_f32(h);
}

struct Q8Format {
  static constexpr int kBits = 8;
  static size_t group_bytes(int gs) { return 2 + size_t(gs); }
  static float value(const uint8_t* group, int /*gs*/, int j) {
    return load_scale(group) * float(int8_t(group[2 + j]));
  }
};

struct Q4Format {
  static constexpr int kBits = 4;
  static size_t group_bytes(int gs) { return 2 + size_t(gs + 1) / 2; }
  static float value(const uint8_t* group, int gs, int j) {
    const int h = (gs + 1) / 2;
    const uint8_t byte = group[2 + (j < h ? j : j - h)];
    const int code = j < h ? (byte & 15) : (byte >> 4);
    return float(code - 8) * load_scale(group);
  }
};

// Bytes of one token: full groups plus the ragged tail.
template <class Fmt>
size_t token_bytes(int d) {
  const int full = d / kQuantGroup, rem = d % kQuantGroup;
  return size_t(full) * Fmt::group_bytes(kQuantGroup) + (rem ? Fmt::group_bytes(rem) : 0);
}

// The formula: bits of codes plus one fp16 scale per group, per element.
template <class Fmt>
double grouped_bits(int d) {
  const int groups = (d + kQuantGroup - 1) / kQuantGroup;
  return (double(Fmt::kBits) * d + 16.0 * groups) / d;
}

template <class Fmt>
void decode_token(const uint8_t* tok, int d, float* out) {
  for (int g = 0; g * kQuantGroup < d; ++g) {
    const int gs = d - g * kQuantGroup < kQuantGroup ? d - g * kQuantGroup : kQuantGroup;
    const uint8_t* gp = tok + size_t(g) * Fmt::group_bytes(kQuantGroup);
    for (int j = 0; j < gs; ++j) out[g * kQuantGroup + j] = Fmt::value(gp, gs, j);
  }
}

}  // namespace vq::kv
