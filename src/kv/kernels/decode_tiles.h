// For codecs whose fused paths decode a run of tokens into a small scratch before the shared
// float kernels read it: the tokens [i0, i1) are decoded a tile of at most 256 at a time (a tile
// stays in L1/L2; no full-length float copy of the cache is ever built) and each tile is handed on.
// The tile is the workspace's kDecodeTile slot.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "veloxquant/kv/codec.h"

namespace vq::kv {

// decode(i, row) writes token i's d floats to row; use(first, n, rows) consumes a tile.
template <typename Decode, typename Use>
void decode_tiles(int64_t i0, int64_t i1, int d, Workspace& ws, Decode decode, Use use) {
  constexpr int64_t kTile = 256;
  float* const tile = ws.get<float>(Workspace::kDecodeTile, size_t(kTile) * size_t(d));
  for (int64_t a = i0; a < i1; a += kTile) {
    const int64_t b = std::min(i1, a + kTile);
    for (int64_t i = a; i < b; ++i) decode(i, tile + size_t(i - a) * size_t(d));
    use(a, b - a, tile);
  }
}

}  // namespace vq::kv
