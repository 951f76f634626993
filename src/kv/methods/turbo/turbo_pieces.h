// TurboQuant-MSE over pieces of a head (turbo:channels=N): the head's channels cut into
// consecutive pieces of N, each piece coded as a vector of its own, with its own rotation, its
// own fp16 scale and the Lloyd-Max codes of the sphere in N dimensions (turbo_pieces.cpp).
#pragma once

#include <cstdint>
#include <memory>

#include "src/kv/methods/turbo/turbo_rows.h"
#include "veloxquant/kv/codec.h"

namespace vq::kv {

struct TurboPiecesShape {
  int d = 0;         // head dim
  int channels = 0;  // channels per piece, a divisor of d
  int bits = 3;
  TurboRows::NormMode norm = TurboRows::NormMode::kNorm;
};

// Refuses (vq::Error, one line) a shape the pieces cannot code: channels that do not divide
// head_dim, that are not a multiple of 32 (the lane layout, turbo_lanes.h), or that the
// rotation cannot take.
void check_turbo_pieces(const TurboPiecesShape& s);
// Bits per element: bits + 16 * pieces / d (each piece keeps an fp16 scale per token).
double turbo_pieces_bits(const TurboPiecesShape& s);

std::unique_ptr<KeyCodec> turbo_pieces_keys(const TurboPiecesShape& s, uint64_t seed);
std::unique_ptr<ValueCodec> turbo_pieces_values(const TurboPiecesShape& s, uint64_t seed);

}  // namespace vq::kv
