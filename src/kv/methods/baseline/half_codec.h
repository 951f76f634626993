// Codecs that store each token as 16-bit floats (fp16 or bf16): one token per block,
// head_dim * 2 bytes. Used by the fp16 and bf16 methods.
#pragma once

#include <memory>

#include "src/kv/kernels/f16_kernels.h"
#include "veloxquant/kv/codec.h"

namespace vq::kv {

std::unique_ptr<KeyCodec> make_half_key_codec(HalfKind kind, int head_dim);
std::unique_ptr<ValueCodec> make_half_value_codec(HalfKind kind, int head_dim);

}  // namespace vq::kv
