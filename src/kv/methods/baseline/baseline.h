// Shared shape of the baseline methods (fp16, bf16, q8, q4): per-token codecs with an optional
// randomized Hadamard rotation, a residual window and sinks taken from the spec.
#pragma once

#include <functional>
#include <memory>

#include "src/kv/registry.h"
#include "veloxquant/kv/method.h"

namespace vq::kv {

struct BaselineCodecs {
  std::function<std::unique_ptr<KeyCodec>(int head_dim)> key;
  std::function<std::unique_ptr<ValueCodec>(int head_dim)> value;
  std::function<double(int head_dim)> bits;  // the method's bits-per-element formula
  std::function<double(int head_dim)> value_bits = {};  // where values are laid out differently
};

// Builds the MethodImpl of a baseline from its codec factories and parsed values
// (rot, seed, residual, sink).
std::unique_ptr<MethodImpl> make_baseline(BaselineCodecs codecs, const ParamValues& values);

// The parameter list every baseline takes.
std::vector<ParamInfo> baseline_params();

// The fp16 method (fp16.cpp), which RateQuant keeps for its uncompressed layers.
const MethodDef& fp16_method();

}  // namespace vq::kv
