// Integer dot products of quantized weight rows with quantized activations, the way llama.cpp's
// CPU backend multiplies: the activations of a matmul are quantized once to 8 bits per element
// (Q8_K blocks of 256 for the K-quants, Q8_0 blocks of 32 for Q4_0, Q5_0 and Q8_0 weights), and
// each weight block meets them in byte multiply-adds with exact 32-bit integer sums. Floats enter
// only once per block: the integer sums of eight lanes are scaled by the two blocks' scales and
// added into eight float accumulators, which are summed in a fixed order at the end.
//
// Every target (AVX2, AVX-512, AVX-512 VNNI and the portable fallback) forms the same eight
// lane sums and the same float operations, so the result does not depend on the CPU, the number
// of threads or how many tokens share a call: qdot_row_reference states the arithmetic in plain
// C++ and the vector kernels equal it bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vq::engine {

// How a matmul's activations are quantized for a weight type.
enum class ActQuant { kNone, kQ8_0, kQ8_K };

#pragma pack(push, 1)
// 32 activations: x ~ d * qs (d is rounded to fp16 precision, as ggml's block_q8_0 stores it).
struct BlockQ8_0Act { float d; int8_t qs[32]; };
// 256 activations: x ~ d * qs, and bsums[k] = sum of qs[16k .. 16k+15] (ggml's block_q8_K).
struct BlockQ8_KAct { float d; int8_t qs[256]; int16_t bsums[16]; };
#pragma pack(pop)

// kNone for types without an integer kernel (F32, F16, BF16, Q4_1, Q5_1): those stay in float.
ActQuant act_quant_for(uint32_t weight_type);

// Bytes of one quantized activation row of n elements (n a multiple of the block size).
size_t act_row_bytes(ActQuant q, int64_t n);

// Quantizes x[0..n) into `out` (act_row_bytes(q, n) bytes). Follows ggml's quantize_row_q8_0 and
// quantize_row_q8_K: Q8_0 scales by max|x| / 127 and rounds half to even; Q8_K scales by the
// element of largest magnitude so that it maps to -127 (its sign kept), clamps at 127 and rounds
// half to even. A block holding NaN or infinity gets a NaN scale, so the products come out NaN
// instead of quietly wrong.
void quantize_activations(ActQuant q, const float* x, int64_t n, uint8_t* out);

// The floats a quantized activation row stands for (d * qs), for references and tests.
void dequantize_activations(ActQuant q, const uint8_t* in, int64_t n, float* x);

// The most activation rows one qdot_row call takes.
constexpr int kQDotMaxTokens = 8;

// out[t * out_stride] = dot(weight row, activation row t) for t < n_tok (1 to kQDotMaxTokens). The
// activation rows lie act_stride bytes apart, quantized with act_quant_for(type). Vector kernels.
// act_scales may be null, or (for ActQuant::kQ8_0 rows) hold the rows' block scales by block:
// act_scales[b * kQDotMaxTokens + t] = row t's d of block b, any finite value for t >= n_tok
// (act_scale_table makes it). It saves each token one vector operation per block; the result is
// the same.
void qdot_row(uint32_t type, const uint8_t* w, int64_t n, const uint8_t* acts, size_t act_stride, int n_tok,
              float* out, int64_t out_stride, const float* act_scales = nullptr);

// The act_scales table of qdot_row for the n_tok (at most kQDotMaxTokens) kQ8_0 rows at acts:
// (n / 32) * kQDotMaxTokens floats into `table`.
void act_scale_table(const uint8_t* acts, size_t act_stride, int n_tok, int64_t n, float* table);

// The same in plain scalar code: the specification the kernels are tested against.
void qdot_row_reference(uint32_t type, const uint8_t* w, int64_t n, const uint8_t* acts, size_t act_stride,
                        int n_tok, float* out, int64_t out_stride);

}  // namespace vq::engine
