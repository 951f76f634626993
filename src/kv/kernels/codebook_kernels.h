// Kernels of product vector quantizers: the nearest-centroid search that encodes a sub-vector,
// and the lookup-table sum that scores a run of tokens from their centroid indices.
#pragma once

#include <cstddef>
#include <cstdint>

#include "veloxquant/kv/codec.h"

namespace vq::kv {

// Index of the centroid nearest x (sub floats) among k (a multiple of 16) centroids given
// transposed, [sub][k], with their squared norms: the smallest |c|^2 - 2 x.c, the first index on
// ties. The running minimum and its index stay in registers; no distance row is stored.
int nearest_centroid(const float* centroids_t, const float* norms, int k, int sub, const float* x);

// Scoring from byte tables (the quantized lookup table of FAISS's fast scan and Quick ADC, here
// at 256 centroids). Once per step and query row, the float table T[s][c] = <q_s, c> becomes
// bytes: u[s][c] = round((T[s][c] - lo_s) / step), lo_s = min_c T[s][c], one step per row
// (the widest sub-vector's range / 255), so that a token's score is
//   bias + step * sum_s u[s][idx_s],   bias = sum_s lo_s,
// an integer sum until one multiply and one add (kept apart): every SIMD target gives the same
// bits. Each entry is off by at most step / 2, a score by at most n_sub * step / 2.
//
// A query row's state: kLutHeaderFloats floats (bias, step, padding), then the n_sub tables of
// 256 bytes. Tokens come in blocks of kLutBlockTokens, the index bytes sub-vector-major
// ([s][64 tokens]), so one vector load holds 64 tokens' indices of a sub-vector.
constexpr int kLutCentroids = 256;
constexpr int kLutBlockTokens = 64;
constexpr size_t kLutHeaderFloats = 16;
inline size_t lut_u8_state_floats(int n_sub) { return kLutHeaderFloats + size_t(n_sub) * kLutCentroids / 4; }
inline const uint8_t* lut_u8_tables(const float* state) { return reinterpret_cast<const uint8_t*>(state + kLutHeaderFloats); }
inline float lut_u8_bias(const float* state) { return state[0]; }
inline float lut_u8_step(const float* state) { return state[1]; }
// The state of one query row y (n_sub * sub floats, already in the codebook's space) against
// centroids given transposed per sub-vector ([s][j][256]): the float table, then its bytes. The
// table's dot products add j = 0, 1, ... with multiplies and adds kept apart, the same bits on
// every target. The float table is scratch from the workspace's kLutTable and kLutLow slots.
void lut_u8_prepare(const float* centroids_t, int n_sub, int sub, const float* y, float* state, Workspace& ws);
// lut_u8_prepare for n rows (y_stride apart) into states (state_stride apart), each with its bits;
// the rows share passes over the centroids (prefill's query rows).
void lut_u8_prepare_rows(const float* centroids_t, int n_sub, int sub, const float* ys, size_t y_stride, int n,
                         float* states, size_t state_stride, Workspace& ws);

// Values from their centroid indices, into rows of d = n_sub * sub floats: acc[r * acc_stride +
// s * sub + j] += the sum over the tokens i in [i0, i1) of w[r * w_stride + (i - i0)] *
// codebook[(s * 256 + c_s(i)) * sub + j], c_s(i) token i's index of sub-vector s, for the n_q rows
// and a run of blocks laid out as above. A run of at least kLutSumsMinTokens tokens adds each
// token's attention weight to its centroids first: four rows at a time, one 16-byte add per
// token and sub-vector into a table of [centroid][row] sums (eight sub-vectors' tables, 32 KB,
// stay in L1), each table then multiplied through its codebook once per pass of kLutWeightRun
// tokens (two partial sums, even and odd centroids, each in centroid order by fused
// multiply-adds, std::fma on targets without them). That product is a fixed cost per pass, so the
// value codec asks the attention loop for runs this long (ValueCodec::preferred_run_tokens).
// Shorter runs (prefill's tiles) decode each token's value and add it times each row's weight,
// multiplies and adds kept apart. Every sum runs in a fixed order: the same bits on every target.
constexpr int kLutWeightRun = 4096;
constexpr int64_t kLutSumsMinTokens = 512;
constexpr int kLutMaxDim = 4096;  // the largest d the kernels take (a short run decodes a value into a stack row)
void lut_centroid_accumulate(const float* w, size_t w_stride, int n_q, int n_sub, int sub, const float* codebook,
                             const uint8_t* blocks, size_t block_bytes, int64_t i0, int64_t i1, float* acc,
                             size_t acc_stride);
// out[r * out_stride + (i - i0)] = the score of token i in [i0, i1) of a run of blocks of
// `block_bytes` bytes (the indices at the start of each block), for the n_q rows whose states
// lie state_floats apart. The AVX-512 VBMI target looks the bytes up 64 tokens at a time (vpermi2b,
// or vpermb on Intel CPUs: lut_u8_scores_use_vpermb below), two rows per load of the indices;
// AVX2 (32 tokens) and AVX-512 without VBMI (64) at a time by 16-byte shuffles (vpshufb) of each
// table's 16 slices; the others add the bytes in scalar registers, four tokens at a time.
void lut_u8_scores(const float* states, size_t state_floats, int n_q, int n_sub, const uint8_t* blocks,
                   size_t block_bytes, int64_t i0, int64_t i1, float* out, size_t out_stride);
// How the AVX-512 VBMI scores look a 256-byte table up: two vpermi2b (128 entries each) and a
// blend, or four vpermb (64 entries each) and three blends. The same bytes either way; on Intel
// cores vpermi2b takes about twice as long as vpermb (docs/performance.md, VecInfer), so Intel
// CPUs take the second form (set at start-up; tests set both).
void lut_u8_scores_use_vpermb(bool on);
bool lut_u8_scores_uses_vpermb();

}  // namespace vq::kv
