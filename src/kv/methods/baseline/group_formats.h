// Byte layout of the per-token grouped baseline q8, as plain scalar code (the reference).
// A token of head_dim d is G = ceil(d/32) groups of 32 channels (the last may be shorter,
// "ragged"). The token stores its G fp16 scales first, then the codes of each group in order:
//   q8 (like llama.cpp q8_0): int8 codes, value = scale * code               gs bytes per group
// Bits per element: (8 * d + 16 * G) / d, 8.5 at d = 128. Scales first lets a kernel convert all
// of a token's scales with one vector instruction. (q4 interleaves 16 tokens: q4_layout.h.)
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "src/core/fp16.h"

namespace vq::kv {

constexpr int kQuantGroup = 32;
constexpr int kMaxQuantGroups = 64;  // head_dim up to 2048

inline int n_groups(int d) { return (d + kQuantGroup - 1) / kQuantGroup; }
inline int group_size(int d, int g) { return std::min(kQuantGroup, d - g * kQuantGroup); }

inline float token_scale(const uint8_t* tok, int g) {
  uint16_t h;
  std::memcpy(&h, tok + 2 * g, 2);
  return f16_to_f32(h);
}

struct Q8Format {
  static constexpr int kBits = 8;
  static size_t code_bytes(int gs) { return size_t(gs); }
  static float centered(const uint8_t* codes, int /*gs*/, int j) { return float(int8_t(codes[j])); }
};

// Codes of group g (all groups before it are full).
template <class Fmt>
const uint8_t* group_codes(const uint8_t* tok, int d, int g) {
  return tok + 2 * size_t(n_groups(d)) + size_t(g) * Fmt::code_bytes(kQuantGroup);
}

template <class Fmt>
size_t token_bytes(int d) {
  const int full = d / kQuantGroup, rem = d % kQuantGroup;
  return 2 * size_t(n_groups(d)) + size_t(full) * Fmt::code_bytes(kQuantGroup) + (rem ? Fmt::code_bytes(rem) : 0);
}

// The formula: bits of codes plus one fp16 scale per group, per element.
template <class Fmt>
double grouped_bits(int d) {
  return (double(Fmt::kBits) * d + 16.0 * n_groups(d)) / d;
}

template <class Fmt>
float token_value(const uint8_t* tok, int d, int j) {
  const int g = j / kQuantGroup;
  return Fmt::centered(group_codes<Fmt>(tok, d, g), group_size(d, g), j % kQuantGroup) * token_scale(tok, g);
}

template <class Fmt>
void decode_token(const uint8_t* tok, int d, float* out) {
  for (int j = 0; j < d; ++j) out[j] = token_value<Fmt>(tok, d, j);
}

}  // namespace vq::kv
