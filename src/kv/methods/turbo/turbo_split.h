// TurboQuant's fractional bit widths (the paper's 2.5 and 3.5 bits): in each group of tokens the
// channels with the largest norm get one bit more, each of the two channel sets coded by its own
// instance of TurboQuant-MSE (turbo_split.cpp).
#pragma once

#include <cstdint>
#include <memory>

#include "src/kv/methods/turbo/turbo_rows.h"
#include "veloxquant/kv/codec.h"

namespace vq::kv {

struct TurboSplitShape {
  int d = 0;         // head dim
  int outliers = 0;  // channels per group coded at bits + 1
  int group = 32;    // tokens per group (one choice of outlier channels)
  int bits = 2;      // bits of the other channels
  TurboRows::NormMode norm = TurboRows::NormMode::kNorm;
  // How a group's outlier channels are picked: by norm (the paper's, via QJL), or the first
  // `outliers` channels whatever the data (an ablation: the same bits without the choice).
  bool pick_by_norm = true;
};

// Refuses (vq::Error, one line) a shape the split cannot code: outliers outside [4, d - 4], a
// part whose dimension the rotation cannot take, bits + 1 above 4, or a group that is not a
// multiple of 16 tokens.
void check_turbo_split(const TurboSplitShape& s);
// Bytes of one block: the group's channel mask, then the two parts' blocks (16 tokens each),
// as many bytes as a mask and two rows per token.
size_t turbo_split_block_bytes(const TurboSplitShape& s);
double turbo_split_bits(const TurboSplitShape& s);

std::unique_ptr<KeyCodec> turbo_split_keys(const TurboSplitShape& s, uint64_t seed);
std::unique_ptr<ValueCodec> turbo_split_values(const TurboSplitShape& s, uint64_t seed);

}  // namespace vq::kv
