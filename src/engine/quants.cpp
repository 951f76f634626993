// Scalar dequantization of the ggml block formats: readable, slow, exact. The arithmetic order
// matches ggml's reference dequantizers so results are bit-identical to them.
#include "src/engine/quants.h"

#include <fmt/format.h>

#include <cstring>

#include "src/core/fp16.h"
#include "veloxquant/error.h"

namespace vq::engine {
namespace {

float h2f(uint16_t h) { return f16_to_f32(h); }

// The 6-bit scale and min of sub-block j of a Q4_K/Q5_K super-block.
void scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

template <typename B>
const B* blocks(const uint8_t* p) {
  return reinterpret_cast<const B*>(p);
}

}  // namespace

bool is_supported_weight_type(uint32_t t) {
  switch (GgmlType(t)) {
    case GgmlType::kF32: case GgmlType::kF16: case GgmlType::kBF16: case GgmlType::kQ4_0:
    case GgmlType::kQ4_1: case GgmlType::kQ5_0: case GgmlType::kQ5_1: case GgmlType::kQ8_0:
    case GgmlType::kQ4_K: case GgmlType::kQ5_K: case GgmlType::kQ6_K:
      return true;
    default:
      return false;
  }
}

size_t row_bytes(uint32_t type, int64_t n) {
  const GgmlTypeInfo* info = ggml_type_info(type);
  VQ_ASSERT(info && n % info->block_elems == 0);
  return size_t(n / info->block_elems) * size_t(info->block_bytes);
}

void dequantize_row_scalar(uint32_t type, const uint8_t* src, float* y, int64_t n) {
  switch (GgmlType(type)) {
    case GgmlType::kF32:
      std::memcpy(y, src, size_t(n) * 4);
      return;
    case GgmlType::kF16:
      for (int64_t i = 0; i < n; ++i) y[i] = h2f(reinterpret_cast<const uint16_t*>(src)[i]);
      return;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(reinterpret_cast<const uint16_t*>(src)[i]);
      return;
    case GgmlType::kQ4_0:
      for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
        const auto& x = blocks<BlockQ4_0>(src)[b];
        const float d = h2f(x.d);
        for (int j = 0; j < kQK / 2; ++j) {
          y[j] = float((x.qs[j] & 0x0F) - 8) * d;
          y[j + kQK / 2] = float((x.qs[j] >> 4) - 8) * d;
        }
      }
      return;
    case GgmlType::kQ4_1:
      for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
        const auto& x = blocks<BlockQ4_1>(src)[b];
        const float d = h2f(x.d), m = h2f(x.m);
        for (int j = 0; j < kQK / 2; ++j) {
          y[j] = float(x.qs[j] & 0x0F) * d + m;
          y[j + kQK / 2] = float(x.qs[j] >> 4) * d + m;
        }
      }
      return;
    case GgmlType::kQ5_0:
      for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
        const auto& x = blocks<BlockQ5_0>(src)[b];
        const float d = h2f(x.d);
        uint32_t qh;
        std::memcpy(&qh, x.qh, 4);
        for (int j = 0; j < kQK / 2; ++j) {
          const uint8_t xh0 = uint8_t(((qh >> (j + 0)) << 4) & 0x10);
          const uint8_t xh1 = uint8_t(((qh >> (j + 12))) & 0x10);
          y[j] = float(((x.qs[j] & 0x0F) | xh0) - 16) * d;
          y[j + kQK / 2] = float(((x.qs[j] >> 4) | xh1) - 16) * d;
        }
      }
      return;
    case GgmlType::kQ5_1:
      for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
        const auto& x = blocks<BlockQ5_1>(src)[b];
        const float d = h2f(x.d), m = h2f(x.m);
        uint32_t qh;
        std::memcpy(&qh, x.qh, 4);
        for (int j = 0; j < kQK / 2; ++j) {
          const uint8_t xh0 = uint8_t(((qh >> (j + 0)) << 4) & 0x10);
          const uint8_t xh1 = uint8_t(((qh >> (j + 12))) & 0x10);
          y[j] = float((x.qs[j] & 0x0F) | xh0) * d + m;
          y[j + kQK / 2] = float((x.qs[j] >> 4) | xh1) * d + m;
        }
      }
      return;
    case GgmlType::kQ8_0:
      for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
        const auto& x = blocks<BlockQ8_0>(src)[b];
        const float d = h2f(x.d);
        for (int j = 0; j < kQK; ++j) y[j] = float(x.qs[j]) * d;
      }
      return;
    case GgmlType::kQ4_K:
      for (int64_t b = 0; b < n / kQK_K; ++b) {
        const auto& x = blocks<BlockQ4_K>(src)[b];
        const float d = h2f(x.d), dmin = h2f(x.dmin);
        const uint8_t* q = x.qs;
        int is = 0;
        for (int j = 0; j < kQK_K; j += 64) {
          uint8_t sc, m;
          scale_min_k4(is + 0, x.scales, &sc, &m);
          const float d1 = d * sc, m1 = dmin * m;
          scale_min_k4(is + 1, x.scales, &sc, &m);
          const float d2 = d * sc, m2 = dmin * m;
          for (int l = 0; l < 32; ++l) *y++ = d1 * float(q[l] & 0xF) - m1;
          for (int l = 0; l < 32; ++l) *y++ = d2 * float(q[l] >> 4) - m2;
          q += 32;
          is += 2;
        }
      }
      return;
    case GgmlType::kQ5_K:
      for (int64_t b = 0; b < n / kQK_K; ++b) {
        const auto& x = blocks<BlockQ5_K>(src)[b];
        const float d = h2f(x.d), dmin = h2f(x.dmin);
        const uint8_t* ql = x.qs;
        const uint8_t* qh = x.qh;
        int is = 0;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < kQK_K; j += 64) {
          uint8_t sc, m;
          scale_min_k4(is + 0, x.scales, &sc, &m);
          const float d1 = d * sc, m1 = dmin * m;
          scale_min_k4(is + 1, x.scales, &sc, &m);
          const float d2 = d * sc, m2 = dmin * m;
          for (int l = 0; l < 32; ++l) *y++ = d1 * float((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
          for (int l = 0; l < 32; ++l) *y++ = d2 * float((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
          ql += 32;
          is += 2;
          u1 = uint8_t(u1 << 2);
          u2 = uint8_t(u2 << 2);
        }
      }
      return;
    case GgmlType::kQ6_K:
      for (int64_t b = 0; b < n / kQK_K; ++b) {
        const auto& x = blocks<BlockQ6_K>(src)[b];
        const float d = h2f(x.d);
        const uint8_t* ql = x.ql;
        const uint8_t* qh = x.qh;
        const int8_t* sc = x.scales;
        for (int half = 0; half < kQK_K; half += 128) {
          for (int l = 0; l < 32; ++l) {
            const int is = l / 16;
            const int q1 = int((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            const int q2 = int((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q3 = int((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l + 0] = d * float(sc[is + 0]) * float(q1);
            y[l + 32] = d * float(sc[is + 2]) * float(q2);
            y[l + 64] = d * float(sc[is + 4]) * float(q3);
            y[l + 96] = d * float(sc[is + 6]) * float(q4);
          }
          y += 128;
          ql += 64;
          qh += 32;
          sc += 8;
        }
      }
      return;
    default:
      throw_error(ErrorKind::kData, fmt::format("weight type {} is not supported", type));
  }
}

}  // namespace vq::engine
