// Activation quantization for the integer matmul kernels (see qdot.h). Cheap next to the matmul
// that follows (one pass over n floats against a pass over rows x n weights), so plain C++.
#include <cmath>
#include <cstring>

#include "src/core/fp16.h"
#include "src/engine/gguf.h"
#include "src/engine/qdot.h"
#include "src/engine/quants.h"
#include "veloxquant/error.h"

namespace vq::engine {
namespace {

// Round half to even, exact for |v| <= 2^22 (ggml's nearest_int; callers stay within 128).
inline int nearest_int(float v) {
  const float big = v + 12582912.f;  // 1.5 * 2^23: the sum's low mantissa bits are the integer
  int32_t bits;
  std::memcpy(&bits, &big, 4);
  return (bits & 0x007fffff) - 0x00400000;
}

// Written so that the compiler vectorizes them (no early exits, no calls).
bool all_finite(const float* x, int n) {
  int bad = 0;
  for (int j = 0; j < n; ++j) bad |= !(std::fabs(x[j]) <= 3.4028235e38f);  // NaN compares false
  return bad == 0;
}
float max_abs(const float* x, int n) {
  float m = 0;
  for (int j = 0; j < n; ++j) {
    const float a = std::fabs(x[j]);
    m = a > m ? a : m;
  }
  return m;
}

void quantize_q8_0(const float* x, int64_t n, BlockQ8_0Act* out) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    BlockQ8_0Act& y = out[b];
    if (!all_finite(x, kQK)) {
      y.d = NAN;
      std::memset(y.qs, 0, sizeof y.qs);
      continue;
    }
    const float amax = max_abs(x, kQK);
    const float d = amax / 127.f;
    const float id = d != 0 ? 1.f / d : 0.f;
    y.d = f16_to_f32(f32_to_f16(d));
    for (int j = 0; j < kQK; ++j) y.qs[j] = int8_t(nearest_int(x[j] * id));
  }
}

void quantize_q8_k(const float* x, int64_t n, BlockQ8_KAct* out) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    BlockQ8_KAct& y = out[b];
    const bool finite = all_finite(x, kQK_K);
    const float amax = finite ? max_abs(x, kQK_K) : 0.f;
    float max = 0;  // the first element of largest magnitude, its sign kept
    for (int j = 0; j < kQK_K; ++j) {
      if (std::fabs(x[j]) == amax) {
        max = x[j];
        break;
      }
    }
    if (!finite || amax == 0) {
      y.d = finite ? 0.f : NAN;
      std::memset(y.qs, 0, sizeof y.qs);
      std::memset(y.bsums, 0, sizeof y.bsums);
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < kQK_K; ++j) {
      const int v = nearest_int(iscale * x[j]);
      y.qs[j] = int8_t(v < 127 ? v : 127);
    }
    for (int k = 0; k < kQK_K / 16; ++k) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += y.qs[16 * k + j];
      y.bsums[k] = int16_t(sum);
    }
    y.d = 1.f / iscale;
  }
}

}  // namespace

ActQuant act_quant_for(uint32_t weight_type) {
  switch (GgmlType(weight_type)) {
    case GgmlType::kQ4_0: case GgmlType::kQ5_0: case GgmlType::kQ8_0: return ActQuant::kQ8_0;
    case GgmlType::kQ4_K: case GgmlType::kQ5_K: case GgmlType::kQ6_K: return ActQuant::kQ8_K;
    default: return ActQuant::kNone;
  }
}

size_t act_row_bytes(ActQuant q, int64_t n) {
  switch (q) {
    case ActQuant::kQ8_0: VQ_ASSERT(n % kQK == 0); return size_t(n / kQK) * sizeof(BlockQ8_0Act);
    case ActQuant::kQ8_K: VQ_ASSERT(n % kQK_K == 0); return size_t(n / kQK_K) * sizeof(BlockQ8_KAct);
    case ActQuant::kNone: break;
  }
  return 0;
}

void quantize_activations(ActQuant q, const float* x, int64_t n, uint8_t* out) {
  switch (q) {
    case ActQuant::kQ8_0: quantize_q8_0(x, n, reinterpret_cast<BlockQ8_0Act*>(out)); return;
    case ActQuant::kQ8_K: quantize_q8_k(x, n, reinterpret_cast<BlockQ8_KAct*>(out)); return;
    case ActQuant::kNone: break;
  }
  VQ_ASSERT(false);
}

void act_scale_table(const uint8_t* acts, size_t act_stride, int n_tok, int64_t n, float* table) {
  VQ_ASSERT(n_tok >= 1 && n_tok <= kQDotMaxTokens && n % kQK == 0);
  for (int64_t b = 0; b < n / kQK; ++b) {
    for (int t = 0; t < kQDotMaxTokens; ++t) {
      table[b * kQDotMaxTokens + t] =
          t < n_tok ? reinterpret_cast<const BlockQ8_0Act*>(acts + size_t(t) * act_stride)[b].d : 0.f;
    }
  }
}

void dequantize_activations(ActQuant q, const uint8_t* in, int64_t n, float* x) {
  if (q == ActQuant::kQ8_0) {
    const auto* b = reinterpret_cast<const BlockQ8_0Act*>(in);
    for (int64_t i = 0; i < n; ++i) x[i] = b[i / kQK].d * float(b[i / kQK].qs[i % kQK]);
  } else if (q == ActQuant::kQ8_K) {
    const auto* b = reinterpret_cast<const BlockQ8_KAct*>(in);
    for (int64_t i = 0; i < n; ++i) x[i] = b[i / kQK_K].d * float(b[i / kQK_K].qs[i % kQK_K]);
  } else {
    VQ_ASSERT(false);
  }
}

}  // namespace vq::engine
