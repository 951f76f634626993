// What the methods share: the window and rotation parameters, head-size checks, seeds, and the
// windowed/rotated method bases. The list of methods (registered_methods()) is generated from the
// vq_kv_method lines of src/kv/methods/*/CMakeLists.txt; each method file defines its
// `const MethodDef& <name>_method()`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "veloxquant/kv/method.h"

namespace vq::kv {

// Parameters every baseline shares: the fp16 residual window, sinks, and the optional
// randomized Hadamard rotation with its seed.
std::vector<ParamInfo> window_params();
std::vector<ParamInfo> rotation_params();
// A windowed method's parameters: its own, then the window's (residual defaulting to
// residual_default).
std::vector<ParamInfo> windowed_method_params(std::vector<ParamInfo> own, int residual_default = 0);
// A rotated method's parameters: its own, then the rotation's seed and the window's.
std::vector<ParamInfo> rotated_method_params(std::vector<ParamInfo> own);
// Refuses (vq::Error) a head_dim that is not a power of two in [lo, 4096], which a method whose
// rotation is a Hadamard transform needs.
void check_hadamard_dim(const char* method, int d, int lo = 4);
// Refuses a head_dim that the rotation wrappers (rotation.h) cannot rotate: below lo, a power of
// two above 4096, or any other dimension above RandomRotation::kMaxDense (a dense matrix).
void check_rotation_dim(const char* method, int d, int lo = 4);
// Whether the rotation wrappers can rotate R^d (d >= 1): a power of two up to 4096, or any other
// dimension up to RandomRotation::kMaxDense.
bool rotatable_dim(int d);

// Reading a parsed value (already type- and range-checked by the parser).
inline int param_int(const ParamValues& v, const std::string& key) { return int(v.at(key)); }
inline double param_float(const ParamValues& v, const std::string& key) { return v.at(key); }
inline bool param_bool(const ParamValues& v, const std::string& key) { return v.at(key) != 0; }

// The tokens a cache keeps in fp16 with `keys` and `values` as its sides: the sinks and the larger
// side's residual window (Method::fp16_tokens's rule, for a method's parts).
int fp16_tokens(const MethodImpl& keys, const MethodImpl& values);
// Bits per element when `fp16_tokens` of the `ctx` tokens a sequence holds stay in fp16 and the
// rest take `bits` (Method::bits_counted's rule, for a method's parts).
double bits_with_fp16_tokens(double bits, int64_t fp16_tokens, int64_t ctx);

// Seeds for per-layer random state, distinct for keys and values.
uint64_t layer_seed(uint64_t seed, int layer, int side);

// What a method with window_params shares: the fp16 window (`residual` newest tokens) and
// `sink` leading tokens, the same for keys and values.
class WindowedMethod : public MethodImpl {
 public:
  explicit WindowedMethod(const ParamValues& v)
      : residual_(param_int(v, "residual")), sink_(param_int(v, "sink")) {}
  int key_keep() const override { return residual_; }
  int value_keep() const override { return residual_; }
  int sink_tokens() const override { return sink_; }

 private:
  int residual_, sink_;
};

// What the rotation-based methods (rotated_method_params) share: the seed of their per-layer,
// per-side rotations, and the window.
class RotatedMethod : public WindowedMethod {
 public:
  explicit RotatedMethod(const ParamValues& v) : WindowedMethod(v), seed_(uint64_t(param_int(v, "seed"))) {}

 protected:
  // side 0: keys, 1: values.
  uint64_t rotation_seed(int layer, int side) const { return layer_seed(seed_, layer, side); }

 private:
  uint64_t seed_;
};

}  // namespace vq::kv
