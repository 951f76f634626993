// The method registry: one MethodDef per method file, listed once in registry.cpp.
#pragma once

#include <string>
#include <vector>

#include "veloxquant/kv/method.h"

namespace vq::kv {

const MethodDef& fp16_method();
const MethodDef& bf16_method();
const MethodDef& q8_method();
const MethodDef& q4_method();
const MethodDef& kivi_method();
const MethodDef& kvquant_method();
const MethodDef& turbo_method();
const MethodDef& turbo_rvq_method();
const MethodDef& polar_method();
const MethodDef& vecinfer_method();
const MethodDef& qjl_method();
const MethodDef& turbo_prod_method();
const MethodDef& rabitq_method();
const MethodDef& ratequant_method();

// Parameters every baseline shares: the fp16 residual window, sinks, and the optional
// randomized Hadamard rotation with its seed.
std::vector<ParamInfo> window_params();
std::vector<ParamInfo> rotation_params();
// A rotated method's parameters: its own, then the rotation's seed and the window's.
std::vector<ParamInfo> rotated_method_params(std::vector<ParamInfo> own);
// Refuses (vq::Error) a head_dim that is not a power of two in [lo, 4096], which a method whose
// rotation is a Hadamard transform needs.
void check_hadamard_dim(const char* method, int d, int lo = 4);

// Reading a parsed value (already type- and range-checked by the parser).
inline int param_int(const ParamValues& v, const std::string& key) { return int(v.at(key)); }
inline double param_float(const ParamValues& v, const std::string& key) { return v.at(key); }
inline bool param_bool(const ParamValues& v, const std::string& key) { return v.at(key) != 0; }

// Seeds for per-layer random state, distinct for keys and values.
uint64_t layer_seed(uint64_t seed, int layer, int side);

}  // namespace vq::kv
