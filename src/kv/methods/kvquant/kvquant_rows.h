// KVQuant's row layouts and the helpers its codecs (kvquant_codecs.cpp) and its calibration
// (kvquant.cpp, where the method and its deviations from the paper are described) share.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "src/core/fp16.h"
#include "src/kv/calib/nuq.h"
#include "src/kv/kernels/lut_kernels.h"
#include "veloxquant/kv/codec.h"

namespace vq::kv::kvquant {

constexpr int kBlockTokens = 16;
constexpr int kRun = 16;  // rows per step of the fused paths: decoded by one kernel call, 8 KB at d = 128
constexpr int kMaxHeadDim = 4096;

struct Settings {
  int bits = 3;
  double outliers = 0.01;
  bool weighted = true;
  bool qnorm = false;
};

inline int outlier_slots(double outliers, int d) {
  if (outliers <= 0.0) return 0;
  return std::clamp(int(std::lround(outliers * d)), 1, d / 2);
}
inline int index_bytes(int d) { return d <= 256 ? 1 : 2; }
inline size_t code_bytes(int d, int bits) { return size_t(bits) * plane_bytes(d); }  // bit planes
inline size_t key_row_bytes(int d, const Settings& s) {
  const int S = outlier_slots(s.outliers, d);
  return code_bytes(d, s.bits) + (S > 0 ? 1 + size_t(S) * (2 + index_bytes(d)) : 0);
}
inline size_t value_row_bytes(int d, const Settings& s) {
  const int S = outlier_slots(s.outliers, d);
  return 4 + code_bytes(d, s.bits) + size_t(S) * (2 + index_bytes(d));
}

inline void put_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
// fp16 of x, saturated to the largest finite fp16 (an exact outlier must not become infinite).
inline uint16_t to_f16(float x) { return f32_to_f16(std::clamp(x, -65504.0f, 65504.0f)); }
inline uint16_t get_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline void put_index(uint8_t* p, int ib, int c) {
  if (ib == 1) {
    *p = uint8_t(c);
  } else {
    put_u16(p, uint16_t(c));
  }
}
inline int get_index(const uint8_t* p, int ib) { return ib == 1 ? int(*p) : int(get_u16(p)); }

// The outlier slots of one row: S fp16 values then S indices. A slot's value is the sparse part of
// dense-and-sparse: the channel's value minus its dense decode (the code's level in the range),
// so dense + sparse gives the value back to the precision of fp16 on the difference.
struct Sparse {
  uint8_t* values;
  uint8_t* indices;
};

// The first n outlier slots added to the dense decode x: slot i's fp16 value at values + 2 i stride
// and its channel index (ib bytes) at indices + ib i stride (stride 1: a row's slots side by side;
// 16: a lane block's, slot-major); an index outside the head (a damaged cache) is skipped.
inline void add_outliers(const uint8_t* values, const uint8_t* indices, size_t stride, int n, int ib, int d, float* x) {
  for (int i = 0; i < n; ++i) {
    const int c = get_index(indices + size_t(ib) * i * stride, ib);
    if (c < d) x[c] += f16_to_f32(get_u16(values + 2 * i * stride));
  }
}

// Per token: which channels are outliers (removing them shrinks the range most) and the range of
// the rest. `order` receives the channels sorted by value.
struct TokenSplit {
  float lo, hi;
  int n_low;  // the n_low smallest and S - n_low largest values are outliers
};
TokenSplit split_token(const float* x, int d, int S, std::vector<int>* order);

// Levels and their midpoints for the nearest-level rule.
struct Datatype {
  std::vector<float> levels, mids;
  explicit Datatype(std::vector<float> l) : levels(std::move(l)), mids(level_midpoints(levels)) {}
  uint8_t code(float u) const { return uint8_t(nearest_level(mids.data(), int(mids.size()), u)); }
};

// One token quantized, as both layouts store it: its codes, and its sparse slots (fp16 difference
// from the dense decode, channel), the used ones first in channel order, unused ones (0, 0).
struct SparseSlot {
  uint16_t value = 0;
  int channel = 0;
};
// A key before RoPE (pre): each channel in its range [mid - half, mid + half], the S channels
// farthest outside their range (ties: lower channel first) sparse, the rest clipped. Returns how
// many slots are used.
int quantize_key(const float* pre, int d, int S, const Datatype& type, const float* mid, const float* half,
                 uint8_t* codes, SparseSlot* slots);
// A value: the fp16 scale and zero of its inliers (the range left after removing the S values
// whose removal narrows it most; codes are chosen against the stored scale and zero), and the S
// removed values as slots.
void quantize_value(const float* x, int d, int S, const Datatype& type, uint16_t* scale, uint16_t* zero,
                    uint8_t* codes, SparseSlot* slots);

// The codecs, built from a layer's calibration (checked by the method before): the lane codecs
// (kvquant_lanes.cpp) where they apply, the row codecs (kvquant_codecs.cpp) otherwise.
std::unique_ptr<KeyCodec> make_key_codec(const CodecContext& ctx, const Settings& s);
std::unique_ptr<ValueCodec> make_value_codec(const CodecContext& ctx, const Settings& s);
// The lanes need whole groups of 32 channels, and NeoX pairs (i, i + d/2) whole groups in each half.
bool key_lanes_apply(int d, const RopeSpec& rope);
bool value_lanes_apply(int d);
std::unique_ptr<KeyCodec> make_lane_key_codec(const CodecContext& ctx, const Settings& s);
std::unique_ptr<ValueCodec> make_lane_value_codec(const CodecContext& ctx, const Settings& s);

}  // namespace vq::kv::kvquant
