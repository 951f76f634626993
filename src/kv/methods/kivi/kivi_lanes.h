// KIVI's 2-, 3- and 4-bit codes laid out for integer byte dot products (vpdpbusd), and the
// kernels that read them (kivi_key_kernels.cpp, kivi_value_kernels.cpp). KIVI's quantizer
// (kivi.cpp) is unchanged; only where its codes sit is, and how the fused paths multiply them.
//
// Both layouts put four codes of one 32-bit lane in its four bytes, several codes of b bits per
// byte (8/b "fields", field j at bits b*j). A shift by b*j and a mask (0x03030303 or 0x0F0F0F0F)
// leave field j's four codes as the lane's bytes, ready to multiply four signed bytes of the
// other operand held in 16-bit fixed point (two byte planes).
//
//   keys (per channel, a block of R tokens): [R/G groups x d channels x (fp16 scale, fp16 zero)]
//        then R/16 sub-blocks of 16 tokens, tokens in the lanes: per chunk of C = 32/b channels,
//        16 words, word t holding token t's codes of the chunk, channel k of the chunk in byte
//        k % 4 at field k / 4. Scores fold a group's scales into the query once per group and
//        row (q_c s_c, held in fixed point) and add sum_c q_c z_c; per token, the dot product
//        of its codes with the held query.
//   values (per token, a block of 16 tokens): the codes with channels in the lanes: per chunk
//        of 16 channels, b/2 vectors of 16 words, word c of vector h holding channel c's codes
//        of tokens h*32/b + 4j + k at byte k, field j. Then [d/G groups x 16 tokens x (fp16
//        scale, fp16 zero)]. Accumulation holds w * scale per token and group in fixed point per
//        run of 256 tokens and sums over tokens inside each lane (no horizontal sums); the
//        zeros' share, sum w * zero per group, is summed in float apart and added back to the
//        group's channels at the end.
//
//   3 bits: a code is lo + 4 hi, its two low bits in a 2-bit plane and its high bit in a 1-bit
//        plane after it, each plane in the layout above for its width (keys: chunks of 16 and of
//        32 channels; values: the 1-bit plane of chunks 2k and 2k + 1 shares one vector of 16
//        words, chunk 2k in fields 0-3 and 2k + 1 in fields 4-7). The kernels join a field of
//        the 2-bit plane and the matching field of the 1-bit plane into one byte a code (a shift,
//        a mask and an or) and take one dot product per field, as at 2 bits: exact sums.
//
// The bytes per token are exactly those of the packed layout, so bits per element are
// unchanged. Applies when b is 2, 3 or 4 and (keys) d % C == 0 (d % 32 at 3 bits), R and G
// multiples of 16, (values) d and G multiples of 16 (d of 32 at 3 bits); otherwise KIVI keeps
// its packed layout.
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
