// The arithmetic of the integer dot products (qdot.h) in plain C++: the specification the vector
// kernels in qdot.cpp equal bit for bit, and the kernel of targets without one.
//
// A block's products land in eight 32-bit integer lanes. Lane l takes bytes 4l..4l+3 of each
// 32-byte group of weights, which is where a 256-bit byte multiply-add (vpmaddubsw then
// vpmaddwd, or vpdpbusd) puts them. Then, per block, each lane's float accumulator gets
// fma(float(lane sum), d_w * d_x); the K-quants with mins subtract fma(float(min sum), dmin_w * d_x)
// the same way. The row's value is ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)).
#include <cmath>
#include <cstring>

#include "src/core/fp16.h"
#include "src/engine/gguf.h"
#include "src/engine/qdot.h"
#include "src/engine/quants.h"
#include "veloxquant/error.h"

namespace vq::engine {
namespace {

constexpr int kLanes = 8;

struct Lanes {
  float acc[kLanes] = {};
  void add(const int32_t* isum, float scale) {
    for (int l = 0; l < kLanes; ++l) acc[l] = std::fma(float(isum[l]), scale, acc[l]);
  }
  void sub(const int32_t* isum, float scale) {
    for (int l = 0; l < kLanes; ++l) acc[l] = std::fma(-float(isum[l]), scale, acc[l]);
  }
  float total() const {
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
  }
};

float h2f(uint16_t h) { return f16_to_f32(h); }

// The eight 6-bit scales and mins of a Q4_K/Q5_K super-block (ggml's get_scale_min_k4).
void scales_mins_k4(const uint8_t* q, int* sc, int* m) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = q[j] & 63;
    m[j] = q[j + 4] & 63;
    sc[j + 4] = (q[j + 8] & 0xF) | ((q[j] >> 6) << 4);
    m[j + 4] = (q[j + 8] >> 4) | ((q[j + 4] >> 6) << 4);
  }
}

// Q4_K (kHigh false) and Q5_K: value = d * sc_j * q - dmin * m_j in sub-block j of 32.
template <typename Block, bool kHigh>
float dot_k45(const Block* w, int64_t nb, const BlockQ8_KAct* y) {
  Lanes lanes;
  for (int64_t b = 0; b < nb; ++b) {
    int sc[8], m[8];
    scales_mins_k4(w[b].scales, sc, m);
    int32_t isum[kLanes] = {}, imin[kLanes] = {};
    for (int k = 0; k < 4; ++k) {  // 64 elements: low nibbles, then high nibbles, of 32 bytes
      for (int i = 0; i < 32; ++i) {
        int lo = w[b].qs[32 * k + i] & 0xF, hi = w[b].qs[32 * k + i] >> 4;
        if constexpr (kHigh) {
          lo |= ((w[b].qh[i] >> (2 * k)) & 1) << 4;
          hi |= ((w[b].qh[i] >> (2 * k + 1)) & 1) << 4;
        }
        isum[i / 4] += sc[2 * k] * lo * y[b].qs[64 * k + i] + sc[2 * k + 1] * hi * y[b].qs[64 * k + 32 + i];
      }
    }
    for (int l = 0; l < kLanes; ++l) imin[l] = m[l] * (y[b].bsums[2 * l] + y[b].bsums[2 * l + 1]);
    lanes.add(isum, h2f(w[b].d) * y[b].d);
    lanes.sub(imin, h2f(w[b].dmin) * y[b].d);
  }
  return lanes.total();
}

// Q6_K: value = d * sc_k * (q - 32) in group k of 16; q - 32 is taken as q times x minus 32 times
// the group's activation sum (bsums), so the byte products stay unsigned by signed.
float dot_q6_k(const BlockQ6_K* w, int64_t nb, const BlockQ8_KAct* y) {
  Lanes lanes;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t isum[kLanes] = {};
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = w[b].ql + 64 * half;
      const uint8_t* qh = w[b].qh + 32 * half;
      const int8_t* sc = w[b].scales + 8 * half;
      const int8_t* x = y[b].qs + 128 * half;
      for (int i = 0; i < 32; ++i) {
        const int q[4] = {(ql[i] & 0xF) | ((qh[i] & 3) << 4), (ql[i + 32] & 0xF) | (((qh[i] >> 2) & 3) << 4),
                          (ql[i] >> 4) | (((qh[i] >> 4) & 3) << 4), (ql[i + 32] >> 4) | (((qh[i] >> 6) & 3) << 4)};
        for (int j = 0; j < 4; ++j) isum[i / 4] += sc[2 * j + i / 16] * q[j] * x[32 * j + i];
      }
    }
    for (int l = 0; l < kLanes; ++l) {
      isum[l] -= 32 * (w[b].scales[2 * l] * y[b].bsums[2 * l] + w[b].scales[2 * l + 1] * y[b].bsums[2 * l + 1]);
    }
    lanes.add(isum, h2f(w[b].d) * y[b].d);
  }
  return lanes.total();
}

// Q4_0, Q5_0, Q8_0: signed values of 32 elements, one scale.
template <typename Block>
int value_legacy(const Block& x, int i);
template <>
int value_legacy(const BlockQ8_0& x, int i) { return x.qs[i]; }
template <>
int value_legacy(const BlockQ4_0& x, int i) { return (i < 16 ? x.qs[i] & 0xF : x.qs[i - 16] >> 4) - 8; }
template <>
int value_legacy(const BlockQ5_0& x, int i) {
  uint32_t qh;
  std::memcpy(&qh, x.qh, 4);
  const int nib = i < 16 ? x.qs[i] & 0xF : x.qs[i - 16] >> 4;
  return (nib | int((qh >> i) & 1) << 4) - 16;
}

template <typename Block>
float dot_legacy(const Block* w, int64_t nb, const BlockQ8_0Act* y) {
  Lanes lanes;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t isum[kLanes] = {};
    for (int i = 0; i < 32; ++i) isum[i / 4] += value_legacy(w[b], i) * y[b].qs[i];
    lanes.add(isum, h2f(w[b].d) * y[b].d);
  }
  return lanes.total();
}

}  // namespace

void qdot_row_reference(uint32_t type, const uint8_t* w, int64_t n, const uint8_t* acts, size_t act_stride,
                        int n_tok, float* out, int64_t out_stride) {
  for (int t = 0; t < n_tok; ++t) {
    const uint8_t* a = acts + size_t(t) * act_stride;
    const auto* y8 = reinterpret_cast<const BlockQ8_0Act*>(a);
    const auto* yk = reinterpret_cast<const BlockQ8_KAct*>(a);
    float v = 0;
    switch (GgmlType(type)) {
      case GgmlType::kQ8_0: v = dot_legacy(reinterpret_cast<const BlockQ8_0*>(w), n / kQK, y8); break;
      case GgmlType::kQ4_0: v = dot_legacy(reinterpret_cast<const BlockQ4_0*>(w), n / kQK, y8); break;
      case GgmlType::kQ5_0: v = dot_legacy(reinterpret_cast<const BlockQ5_0*>(w), n / kQK, y8); break;
      case GgmlType::kQ4_K: v = dot_k45<BlockQ4_K, false>(reinterpret_cast<const BlockQ4_K*>(w), n / kQK_K, yk); break;
      case GgmlType::kQ5_K: v = dot_k45<BlockQ5_K, true>(reinterpret_cast<const BlockQ5_K*>(w), n / kQK_K, yk); break;
      case GgmlType::kQ6_K: v = dot_q6_k(reinterpret_cast<const BlockQ6_K*>(w), n / kQK_K, yk); break;
      default: VQ_ASSERT(false);
    }
    out[t * out_stride] = v;
  }
}

}  // namespace vq::engine
