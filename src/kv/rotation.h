// Wrappers that put a seeded random rotation (randomized Hadamard for power-of-two head dims, a
// dense random orthogonal matrix otherwise) in front of any codec: keys and values are
// rotated before encoding, the query is rotated once per step (never the keys back), and the
// value accumulator is rotated back once at the end.
#pragma once

#include <cstdint>
#include <memory>

#include "veloxquant/kv/codec.h"

namespace vq::kv {

std::unique_ptr<KeyCodec> rotate_keys(std::unique_ptr<KeyCodec> inner, uint64_t seed);
std::unique_ptr<ValueCodec> rotate_values(std::unique_ptr<ValueCodec> inner, uint64_t seed);

}  // namespace vq::kv
