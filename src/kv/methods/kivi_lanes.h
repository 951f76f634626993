// KIVI's 2- and 4-bit codes laid out with tokens in the vector lanes, and the kernels that read
// them (kivi_lanes.cpp). KIVI's quantizer (kivi.cpp) is unchanged; only where its codes sit is.
//
// A sub-block holds 16 tokens: for each chunk of C = 32/b channels, 16 u32 words, word t holding
// token t's codes of the chunk (channel k of the chunk at bits b*k .. b*k+b-1). One 64-byte load
// then gives C channels of 16 tokens, and a channel's 16 codes become floats with one shift and
// one 16-entry table lookup (vpermps reads the low four bits of each lane; the table repeats the
// 2^b code values, so the bits of the next channel above them do not matter).
//
//   keys (per channel, a block of R tokens): [R/G groups x d channels x (fp16 scale, fp16 zero)]
//        then R/16 sub-blocks. Scores fold a group's scales into the query once per group
//        (q'_c = q_c s_c) and add sum_c q_c z_c, so each token costs only the code FMAs.
//   values (per token, a block of 16 tokens): one sub-block, then [d/G groups x 16 tokens x
//        (fp16 scale, fp16 zero)]. Accumulation stages w * scale per token and group and sums
//        w * zero per group apart, added back to the group's channels once at the end.
//
// The bytes per token are exactly those of the packed layout when d is a multiple of C, so bits
// per element are unchanged. Applies when b is 2 or 4, d % C == 0, and (keys) R and G are
// multiples of 16, (values) G is a multiple of C; otherwise KIVI keeps its packed layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "veloxquant/kv/codec.h"

namespace vq::kv {

bool kivi_lanes_keys_apply(int d, int bits, int group, int block);
bool kivi_lanes_values_apply(int d, int bits, int group);
std::unique_ptr<KeyCodec> make_kivi_lanes_key_codec(int d, int bits, int group, int block);
std::unique_ptr<ValueCodec> make_kivi_lanes_value_codec(int d, int bits, int group);

}  // namespace vq::kv
