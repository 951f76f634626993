// Random weight rows of a ggml type for kernel tests: random bytes, with the fp16 scale fields
// kept finite so that comparisons are about the codes.
#pragma once

#include <cstdint>
#include <vector>

#include "src/core/rng.h"
#include "src/engine/gguf.h"
#include "src/engine/quants.h"

namespace vq::engine {

inline std::vector<uint8_t> random_row(GgmlType t, int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint8_t> b(row_bytes(uint32_t(t), n));
  for (auto& x : b) x = uint8_t(rng.next_u64());
  // The fp16 scale fields sit at known offsets of each block.
  const auto* info = ggml_type_info(uint32_t(t));
  for (size_t blk = 0; blk < b.size() / size_t(info->block_bytes); ++blk) {
    uint8_t* p = b.data() + blk * size_t(info->block_bytes);
    auto finite = [&](uint8_t* h) { h[1] &= 0x3b; };  // exponent below the inf/NaN range
    switch (t) {
      case GgmlType::kQ6_K: finite(p + 208); break;
      case GgmlType::kQ4_1: case GgmlType::kQ5_1: case GgmlType::kQ4_K: case GgmlType::kQ5_K:
        finite(p);
        finite(p + 2);
        break;
      case GgmlType::kF16:
      case GgmlType::kBF16:
        for (int i = 0; i < info->block_bytes; i += 2) finite(p + i);
        break;
      default: finite(p); break;
    }
  }
  return b;
}

}  // namespace vq::engine
