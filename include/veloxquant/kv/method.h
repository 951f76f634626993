// Methods and their spec strings. A spec names a method and its parameters,
// `name[:key=value[,key=value...]]` (e.g. `q4:rot=1`), or gives keys and values separate
// methods, `k=SPEC,v=SPEC` (e.g. `k=q8,v=q4`). Spec strings are stable: they appear in reports.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "veloxquant/kv/codec.h"

namespace vq::kv {

struct Calibration;
struct LayerSamples;

enum class ParamType { kInt, kFloat, kBool, kChoice };

struct ParamInfo {
  std::string name;
  ParamType type = ParamType::kInt;
  double default_value = 0;
  double min = 0, max = 0;  // inclusive range
  std::string help;
  std::vector<std::string> choices;  // kChoice: the names; the value is the index
};

struct MethodInfo {
  std::string name;
  std::string summary;
  std::vector<ParamInfo> params;
};

using ParamValues = std::map<std::string, double>;

// One side (keys or values) of a parsed spec: the method's own object, built from its values.
class MethodImpl {
 public:
  virtual ~MethodImpl() = default;
  virtual std::unique_ptr<KeyCodec> key_codec(const CodecContext& ctx) const = 0;
  virtual std::unique_ptr<ValueCodec> value_codec(const CodecContext& ctx) const = 0;
  // Bits per stored element of a compressed token, from the method's formula (not from the
  // codec's byte layout, so a test can hold one to the other).
  virtual double key_bits(int head_dim) const = 0;
  virtual double value_bits(int head_dim) const = 0;
  // Residual-window policy: after a flush, `*_keep` newest tokens stay in fp16; the oldest
  // block_tokens() leave the window together when it holds keep + block_tokens().
  virtual int key_keep() const = 0;
  virtual int value_keep() const = 0;
  // Leading tokens kept in fp16 forever (attention sinks).
  virtual int sink_tokens() const { return 0; }
  // Whether codecs need a calibration (CodecContext::calib) made for this spec, and how the
  // key side and the value side learn theirs from a layer's samples.
  virtual bool needs_calibration() const { return false; }
  virtual void calibrate_keys(const LayerSamples&, LayerCalibration*) const {}
  virtual void calibrate_values(const LayerSamples&, LayerCalibration*) const {}
  // A method whose codecs and bits depend on what its calibration holds as a whole (RateQuant's
  // per-layer widths) returns itself bound to it, after checking it (vq::Error, kData); null
  // when nothing changes (codecs read CodecContext::calib per layer).
  virtual std::shared_ptr<const MethodImpl> calibrated(const Calibration&) const { return nullptr; }
  // Whether each KV head gets its own codecs (built with CodecContext::kv_head set), e.g. a
  // basis learned per head, or a width per head (RateQuant's unit=head). The heads' codecs may
  // differ in shape (blocks, query states, accumulators): each head's streams and attention use
  // its own codecs'. param_bytes() counts once per head.
  virtual bool per_head_codecs() const { return false; }
};

struct MethodDef {
  MethodInfo info;
  std::unique_ptr<MethodImpl> (*make)(const ParamValues& values);
};

// A parsed spec: the key side and the value side (the same method unless `k=...,v=...`).
class Method {
 public:
  Method(std::string spec, std::shared_ptr<const MethodImpl> keys,
         std::shared_ptr<const MethodImpl> values)
      : spec_(std::move(spec)), keys_(std::move(keys)), values_(std::move(values)) {}

  // The canonical spec string (parameters at their defaults omitted).
  const std::string& spec() const { return spec_; }
  const MethodImpl& keys() const { return *keys_; }
  const MethodImpl& values() const { return *values_; }
  int sink_tokens() const;
  // Average of key and value bits per element for compressed tokens.
  double bits_per_element(int head_dim) const;
  // The newest tokens a sequence keeps in fp16: the larger side's residual window.
  int window_tokens() const;
  // Tokens a sequence keeps in fp16: the sinks and the residual window (the larger side's).
  int fp16_tokens() const;
  // Bits per element everything counted when a sequence holds `ctx` tokens: bits_per_element for
  // the compressed tokens and 16 for the fp16_tokens(), as their share of ctx (all of them fp16
  // when ctx is at most fp16_tokens()). ctx must be at least 1.
  double bits_counted(int head_dim, int64_t ctx) const;

  bool needs_calibration() const { return keys_->needs_calibration() || values_->needs_calibration(); }
  // The same method carrying a calibration; refuses (vq::Error, kUsage) one made for another spec.
  Method with_calibration(std::shared_ptr<const Calibration> calib) const;
  const Calibration* calibration() const { return calib_.get(); }

 private:
  std::string spec_;
  std::shared_ptr<const MethodImpl> keys_, values_;
  std::shared_ptr<const Calibration> calib_;
};

// Parses a spec; a bad one throws vq::Error (kind kUsage) naming the bad part.
Method parse_method(const std::string& spec);
// The canonical form of a spec (as Method::spec() gives it), or the text itself when it does not
// parse: for comparing a stored spec with the one asked for, whatever spelling stored it.
std::string canonical_spec(const std::string& spec);

// Every registered method, in registry order.
const std::vector<const MethodDef*>& registered_methods();

}  // namespace vq::kv
