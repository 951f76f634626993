// RateQuant: a per-layer bit allocation over a base method that takes a bit width, chosen by a
// sensitivity probe and a reverse water-filling (rate-distortion) allocation, the classic way
// to split a bit budget over independent sources (Cover & Thomas, "Elements of Information
// Theory", 10.3.3; for mixed-precision KV caches cf. KVTuner, Li et al., ICML 2025,
// https://arxiv.org/abs/2502.04420, which also searches per-layer key/value precisions).
//
//   ratequant:base=kivi,avg=2.5[,lo=2,hi=4]        (base=turbo and base=kvquant also)
//   ratequant:base=kvquant,avg=2.5,ctx=2048[,sink=S][,residual=R][,unit=head]
//
// Units are (layer, side): a layer's keys and its values each get a width in [lo, hi], and the
// widths average exactly `avg` over all 2 * n_layer units (avg may be written to four decimals:
// 2.1389 for 77 bits over 36 units). With unit=head the units are (layer, side, KV head): each KV
// head's keys and values get their own width, probed with only that head compressed, over
// 2 * n_layer * n_kv_heads units (a model with one KV head per layer, as Gemma 3 270M, allocates
// the same either way). With ctx=N, avg is instead the budget in bits per element
// everything counted when a sequence holds N tokens (Method::bits_counted: codes, scales, outlier
// slots, every stored parameter, and the base's fp16 sinks and window as their share of N): the
// widths then sum to the largest whole total whose bits stay within avg. sink=S and residual=R set
// the base's fp16 sinks and window (defaults: the base's own), so the tokens kept in fp16 are part
// of the budget they are paid from: a longer window leaves fewer bits for the codes. Every base's
// bits grow by the same amount per width step on both sides (the codes are the width; scales,
// outliers and windows do not depend on it), so all allocations with one total of widths cost the
// same bits, and the allocation below is unchanged. `veloxquant calibrate` measures, on calibration text, the
// mean KL of the next-token distribution when only one unit is compressed by the base method at
// one width (everything else fp16), for every unit and width, against the same cache with no unit
// compressed (ratequant_probe_reference: the base's fp16 sinks and windows kept); the allocation
// minimizes the summed probe KL under the budget (additive sensitivities, the usual first-order
// assumption; src/kv/calib/rate_allocation.h solves it exactly). The probe table and the
// allocation live in the calibration file; `veloxquant inspect --calib FILE` prints them.
//
// Bases: kivi (kbits for keys, vbits for values), turbo (bits) and kvquant (bits), every other
// base parameter at its default (kivi: group=32, residual=128; turbo: seed, no window, no sinks;
// kvquant: 1% dense-and-sparse outliers, one fp16 sink, Q-Norm at 2 bits, weighted datatypes).
// KVQuant learns its datatype per width: `calibrate` first learns kvquant:bits=w on the samples
// for every candidate width w, the probe runs each width with its own datatype, and the file keeps
// per layer the key ranges (they depend on the outlier fraction, not on the width) and the levels
// learned at the width allocated to that layer's keys and to its values, which is what KVQuant's
// codecs read from CodecContext::calib.
//
// Deviations from the issue's wording: the sizes of the sinks and the window are chosen by the user
// and paid from the budget, not chosen by the allocation (the probe would need a run per window
// size and unit). Per KV head, a base that learns its datatype per width (KVQuant) keeps one per
// head and side at the head's width, learned on the layer's samples pooled over its heads, as
// KVQuant's per-layer calibration is; the key ranges stay per layer. The water-
// filling is kept as the Lagrangian view; the budget is met by an exact dynamic program, since
// the Lagrangian can miss a discrete budget.
//
// Bits per element are honest: keys report the mean over layers of the base's own formula at the
// allocated widths (scales and zeros included), likewise values; every layer receives every
// token, so that is the mean over stored elements (a sliding-window layer that drops old pages
// holds fewer, which bench's measured bytes show). Before a calibration is attached the bits are
// the base's formula at `avg` (exact for all three bases, whose formulas are linear in the width;
// KVQuant's outlier slots and scales do not depend on it).
#include "src/kv/methods/ratequant/ratequant.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>

#include "src/kv/calib/rate_allocation.h"
#include "src/kv/methods/baseline/baseline.h"
#include "src/kv/registry.h"
#include "veloxquant/error.h"

namespace vq::kv {

// The bases RateQuant allocates bits for (kivi/kivi.cpp, turbo/turbo.cpp).
const MethodDef& kivi_method();
const MethodDef& turbo_method();
const MethodDef& kvquant_method();

namespace {

struct Base {
  const MethodDef& (*def)();
  const char* key_param;
  const char* value_param;
  bool learns_per_width;  // its datatype is calibrated per width (kvquant)
};
const Base kBases[] = {{&kivi_method, "kbits", "vbits", false},
                       {&turbo_method, "bits", "bits", false},
                       {&kvquant_method, "bits", "bits", true}};
const char* const kBaseNames[] = {"kivi", "turbo", "kvquant"};

// avg may be written to four decimals (77/36 as 2.1389): the budget is the nearest whole number
// of bits when avg * units lies within that rounding of it.
bool whole_budget(double avg, int units, int* total) {
  const double t = avg * units;
  *total = int(std::lround(t));
  return std::fabs(t - std::round(t)) <= 5e-5 * units + 1e-9;
}

const ParamInfo* find_param(const MethodDef& def, const std::string& name) {
  for (const auto& p : def.info.params) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

const ParamInfo& param_of(const MethodDef& def, const std::string& name) {
  if (const ParamInfo* p = find_param(def, name)) return *p;
  throw_internal(name.c_str(), __FILE__, __LINE__);
}

class RateQuantMethod final : public MethodImpl {
 public:
  explicit RateQuantMethod(const ParamValues& v)
      : base_(size_t(param_int(v, "base"))), avg_(param_float(v, "avg")), lo_(param_int(v, "lo")),
        hi_(param_int(v, "hi")), ctx_(param_int(v, "ctx")), per_head_(param_int(v, "unit") == 1) {
    const Base& b = kBases[base_];
    const MethodDef& def = b.def();
    VQ_CHECK(lo_ <= hi_, fmt::format("ratequant: lo={} is above hi={}", lo_, hi_));
    // A budget counted at ctx tokens is checked against the bits once head_dim is known
    // (ratequant_budget), since the base's scales and outliers depend on it.
    VQ_CHECK(ctx_ > 0 || (avg_ >= lo_ && avg_ <= hi_),
             fmt::format("ratequant: avg={:g} is outside [lo, hi] = [{}, {}]", avg_, lo_, hi_));
    const ParamInfo& kp = param_of(def, b.key_param);
    VQ_CHECK(lo_ >= kp.min && hi_ <= kp.max, fmt::format("ratequant: {} takes {} in [{}, {}], not [{}, {}]", def.info.name,
                                                         kp.name, int(kp.min), int(kp.max), lo_, hi_));
    ParamValues given;  // the base's fp16 sinks and window, where the spec sets them
    for (const char* name : {"sink", "residual"}) {
      const int x = param_int(v, name);
      if (x < 0) continue;
      const ParamInfo* p = find_param(def, name);
      VQ_CHECK(p, fmt::format("ratequant: {} has no {} parameter", def.info.name, name));
      VQ_CHECK(x >= p->min && x <= p->max,
               fmt::format("ratequant: {} takes {} in [{}, {}], not {}", def.info.name, name, int(p->min), int(p->max), x));
      given[name] = x;
    }
    for (int w = lo_; w <= hi_; ++w) {
      ParamValues bv;
      for (const auto& p : def.info.params) bv[p.name] = p.default_value;
      for (const auto& [name, x] : given) bv[name] = x;
      bv[b.key_param] = w;
      bv[b.value_param] = w;
      by_width_.push_back(std::shared_ptr<const MethodImpl>(def.make(bv)));
    }
    for (const auto& [name, x] : given) base_params_ += fmt::format(",{}={}", name, int(x));
    ParamValues fv;
    for (const auto& p : fp16_method().info.params) fv[p.name] = p.default_value;
    fp16_ = std::shared_ptr<const MethodImpl>(fp16_method().make(fv));
  }

  std::unique_ptr<KeyCodec> key_codec(const CodecContext& ctx) const override {
    return codec(ctx, 0, [](const MethodImpl& m, const CodecContext& c) { return m.key_codec(c); });
  }
  std::unique_ptr<ValueCodec> value_codec(const CodecContext& ctx) const override {
    return codec(ctx, 1, [](const MethodImpl& m, const CodecContext& c) { return m.value_codec(c); });
  }
  // Per KV head, the heads' codecs differ in width (and in block bytes: LayerCache gives each
  // head's streams their own codec's blocks).
  bool per_head_codecs() const override { return per_head_; }
  double key_bits(int d) const override {
    return mean_bits(d, 0, [&](const MethodImpl& m) { return m.key_bits(d); });
  }
  double value_bits(int d) const override {
    return mean_bits(d, 1, [&](const MethodImpl& m) { return m.value_bits(d); });
  }
  // The window and sinks do not depend on the width for kivi and turbo.
  int key_keep() const override { return at(lo_).key_keep(); }
  int value_keep() const override { return at(lo_).value_keep(); }
  int sink_tokens() const override { return at(lo_).sink_tokens(); }
  bool needs_calibration() const override { return true; }

  std::shared_ptr<const MethodImpl> calibrated(const Calibration& c) const override {
    if (probe_) return nullptr;  // the probe's one-unit allocation; its calibration is the base's
    const size_t W = size_t(hi_ - lo_ + 1);
    std::vector<int> widths;
    for (int w = lo_; w <= hi_; ++w) widths.push_back(w);
    VQ_CHECK_DATA(c.probe_bits == widths,
                  fmt::format("the calibration for '{}' holds no RateQuant probe over widths {}..{}", c.spec, lo_, hi_));
    const int H = unit_heads(c.model.n_kv_heads);
    auto m = std::make_shared<RateQuantMethod>(*this);
    m->alloc_.clear();
    int64_t sum = 0;
    for (size_t l = 0; l < c.layers.size(); ++l) {
      const LayerCalibration& lc = c.layers[l];
      VQ_CHECK_DATA(lc.key_probe_kl.size() == size_t(H) * W && lc.value_probe_kl.size() == size_t(H) * W &&
                        lc.key_head_bits.size() == (per_head_ ? size_t(H) : 0) &&
                        lc.value_head_bits.size() == lc.key_head_bits.size(),
                    fmt::format("the calibration for '{}': layer {} lacks its probe table or {}", c.spec, l,
                                per_head_ ? "its heads' widths" : "holds widths per head"));
      std::vector<std::array<int, 2>> heads;
      for (int h = 0; h < H; ++h) {
        const std::array<int, 2> w = per_head_ ? std::array<int, 2>{lc.key_head_bits[size_t(h)], lc.value_head_bits[size_t(h)]}
                                               : std::array<int, 2>{lc.key_bits, lc.value_bits};
        for (int b : w) {
          VQ_CHECK_DATA(b >= lo_ && b <= hi_, fmt::format("the calibration for '{}': layer {} has a width of {} bits, "
                                                          "outside [{}, {}]",
                                                          c.spec, l, b, lo_, hi_));
          sum += b;
        }
        if (kBases[base_].learns_per_width) {
          const auto& kl = per_head_ ? lc.key_head_levels[size_t(h)] : lc.key_levels;
          const auto& vl = per_head_ ? lc.value_head_levels[size_t(h)] : lc.value_levels;
          VQ_CHECK_DATA(kl.size() == size_t(1) << w[0] && vl.size() == size_t(1) << w[1],
                        fmt::format("the calibration for '{}': layer {} lacks the datatypes of its widths", c.spec, l));
        }
        heads.push_back(w);
      }
      m->alloc_.push_back(std::move(heads));
    }
    const int units = 2 * H * int(c.layers.size());
    int total = 0;
    if (ctx_ > 0) {
      VQ_CHECK_DATA(!c.layers.empty() && c.model.head_dim > 0,
                    fmt::format("the calibration for '{}' holds no head size", c.spec));
      total = counted_budget(units, c.model.head_dim);
    }
    VQ_CHECK_DATA(!c.layers.empty() && (ctx_ > 0 || whole_budget(avg_, units, &total)) && sum == total,
                  fmt::format("the calibration for '{}' allocates {} bits over {} units, not the {} its budget gives",
                              c.spec, sum, units, total));
    return m;
  }

  // For the probe: one unit at `bits` (a layer's keys or values, or with unit=head one KV head's),
  // fp16 elsewhere; with layer = -1, no unit (the reference).
  std::shared_ptr<const MethodImpl> probe(int n_layers, int layer, int head, int side, int bits) const {
    VQ_CHECK(n_layers >= 1 && layer >= -1 && layer < n_layers && side >= 0 && side < 2 &&
                 (layer < 0 || (bits >= lo_ && bits <= hi_ && (head >= 0) == per_head_)),
             "ratequant probe: unit or width out of range");
    auto m = std::make_shared<RateQuantMethod>(*this);
    m->probe_ = true;
    m->probe_head_ = head;
    m->alloc_.assign(size_t(n_layers), {{0, 0}});
    if (layer >= 0) m->alloc_[size_t(layer)][0][size_t(side)] = bits;
    return m;
  }
  bool per_head() const { return per_head_; }
  int unit_heads(int n_kv_heads) const { return per_head_ ? n_kv_heads : 1; }
  bool learns_per_width() const { return kBases[base_].learns_per_width; }
  // The base method at width w with the spec's sinks and window, its other parameters at their
  // defaults.
  std::string base_spec(int w) const {
    const Base& b = kBases[base_];
    return (b.key_param == std::string(b.value_param)
                ? fmt::format("{}:{}={}", kBaseNames[base_], b.key_param, w)
                : fmt::format("{}:{}={},{}={}", kBaseNames[base_], b.key_param, w, b.value_param, w)) +
           base_params_;
  }
  int lo() const { return lo_; }
  int hi() const { return hi_; }
  double avg() const { return avg_; }
  int ctx() const { return ctx_; }

  // With ctx set: the largest whole total of widths over `units` units (2 per layer) whose bits
  // per element, everything counted at ctx tokens, stay within avg; refused (kUsage, one line)
  // when even every unit at lo spends more.
  int counted_budget(int units, int head_dim) const {
    VQ_CHECK(ctx_ > 0 && units >= 2 && units % 2 == 0 && head_dim >= 1, "ratequant: counted budget out of range");
    const int W = hi_ - lo_ + 1;
    // Every base's bits rise by one step per width on both sides; held here, since the budget
    // below relies on it (all allocations with one total then cost the same bits).
    const double step = W > 1 ? at(lo_ + 1).key_bits(head_dim) - at(lo_).key_bits(head_dim) : 0.0;
    for (int i = 0; i < W; ++i) {
      const MethodImpl& m = at(lo_ + i);
      if (std::fabs(m.key_bits(head_dim) - at(lo_).key_bits(head_dim) - i * step) > 1e-9 ||
          std::fabs(m.value_bits(head_dim) - at(lo_).value_bits(head_dim) - i * step) > 1e-9) {
        throw_internal("ratequant: a base whose bits are not one step per width", __FILE__, __LINE__);
      }
    }
    const double lo_bits = 0.5 * (at(lo_).key_bits(head_dim) + at(lo_).value_bits(head_dim));
    int best = -1;
    for (int total = units * lo_; total <= units * hi_; ++total) {
      const double mean = lo_bits + step * double(total - units * lo_) / double(units);
      if (bits_with_fp16_tokens(mean, fp16_tokens(), ctx_) <= avg_ + 1e-9) best = total;
    }
    VQ_CHECK(best >= 0, fmt::format("ratequant: avg={:g} bits everything counted at ctx={} is below the least it "
                                    "can spend, {:.4f} (every unit at lo={}, {} fp16 tokens)",
                                    avg_, ctx_, bits_with_fp16_tokens(lo_bits, fp16_tokens(), ctx_), lo_, fp16_tokens()));
    return best;
  }

 private:
  const MethodImpl& at(int w) const { return *by_width_[size_t(w - lo_)]; }
  int fp16_tokens() const { return kv::fp16_tokens(at(lo_), at(lo_)); }
  int width(int layer, int head, int side) const {
    VQ_CHECK(!alloc_.empty(), "ratequant: the codecs need the allocation of a calibration (veloxquant calibrate)");
    VQ_CHECK_DATA(layer >= 0 && size_t(layer) < alloc_.size(),
                  fmt::format("ratequant: the allocation covers {} layers, not layer {}", alloc_.size(), layer));
    const auto& heads = alloc_[size_t(layer)];
    if (probe_) return probe_head_ < 0 || head == probe_head_ ? heads[0][size_t(side)] : 0;
    if (!per_head_) return heads[0][size_t(side)];
    VQ_CHECK_DATA(head >= 0 && size_t(head) < heads.size(),
                  fmt::format("ratequant: the allocation covers {} KV heads, not head {}", heads.size(), head));
    return heads[size_t(head)][size_t(side)];
  }
  // make(base, ctx) at the width of the unit ctx names on `side`: fp16 where the probe leaves the
  // unit out; with per-head datatypes, under the layer's calibration with the head's levels in
  // place of the layer's (the base's codecs copy what they read from it).
  template <class Make>
  std::invoke_result_t<Make, const MethodImpl&, const CodecContext&> codec(const CodecContext& ctx, int side,
                                                                           Make make) const {
    const int w = width(ctx.layer, ctx.kv_head, side);
    if (w == 0) return make(*fp16_, ctx);
    if (!head_datatypes()) return make(at(w), ctx);
    const LayerCalibration lc = head_calibration(ctx);
    CodecContext c = ctx;
    c.calib = &lc;
    return make(at(w), c);
  }
  // Whether a codec's datatypes are its KV head's (a per-head allocation over a base that learns
  // per width), not the layer's.
  bool head_datatypes() const { return per_head_ && !probe_ && kBases[base_].learns_per_width; }
  // The layer's calibration with the datatypes learned at the head's widths in place of the
  // layer's.
  static LayerCalibration head_calibration(const CodecContext& ctx) {
    VQ_CHECK_DATA(ctx.calib && ctx.kv_head >= 0 && size_t(ctx.kv_head) < ctx.calib->key_head_levels.size() &&
                      size_t(ctx.kv_head) < ctx.calib->value_head_levels.size(),
                  fmt::format("ratequant: the calibration of layer {} holds no datatypes for KV head {}", ctx.layer,
                              ctx.kv_head));
    LayerCalibration lc = *ctx.calib;
    lc.key_levels = lc.key_head_levels[size_t(ctx.kv_head)];
    lc.value_levels = lc.value_head_levels[size_t(ctx.kv_head)];
    return lc;
  }
  template <typename Bits>
  double mean_bits(int d, int side, Bits bits) const {
    if (alloc_.empty()) {
      // Before calibration: the base's formula at the mean width the budget allows (avg itself, or
      // with ctx set, the width whose bits everything counted are avg), interpolated between lo
      // and hi.
      const double b_lo = bits(at(lo_)), b_hi = bits(at(hi_));
      if (hi_ == lo_) return b_lo;
      double w = avg_;
      if (ctx_ > 0) {
        const double m_lo = 0.5 * (at(lo_).key_bits(d) + at(lo_).value_bits(d));
        const double m_hi = 0.5 * (at(hi_).key_bits(d) + at(hi_).value_bits(d));
        const int64_t kept = std::min<int64_t>(fp16_tokens(), ctx_);
        const double codes = kept >= ctx_ ? m_lo : (avg_ * ctx_ - 16.0 * double(kept)) / double(ctx_ - kept);
        w = std::clamp(lo_ + (codes - m_lo) * (hi_ - lo_) / (m_hi - m_lo), double(lo_), double(hi_));
      }
      return b_lo + (w - lo_) * (b_hi - b_lo) / (hi_ - lo_);
    }
    double s = 0;
    size_t n = 0;
    for (const auto& heads : alloc_) {
      for (const auto& a : heads) {
        const int w = a[size_t(side)];
        s += w == 0 ? bits(*fp16_) : bits(at(w));
        ++n;
      }
    }
    return s / double(n);
  }

  size_t base_;
  double avg_;
  int lo_, hi_;
  int ctx_;                  // 0: avg is the mean width; else the bits everything counted at ctx tokens
  std::string base_params_;  // ",sink=S,residual=R" as the spec sets them, for base_spec
  bool per_head_;             // unit=head: widths per layer, KV head and side
  std::vector<std::shared_ptr<const MethodImpl>> by_width_;
  std::shared_ptr<const MethodImpl> fp16_;
  // [layer][KV head, or one entry per layer]: the (key, value) widths; 0: fp16 (the probe).
  std::vector<std::vector<std::array<int, 2>>> alloc_;
  bool probe_ = false;
  int probe_head_ = -1;       // the probe's KV head (-1: the whole layer)
};

const RateQuantMethod& ratequant_impl(const Method& m) {
  const auto* r = dynamic_cast<const RateQuantMethod*>(&m.keys());
  VQ_CHECK(r, fmt::format("'{}' is not a ratequant method", m.spec()));
  return *r;
}

}  // namespace

bool is_ratequant(const Method& m) { return dynamic_cast<const RateQuantMethod*>(&m.keys()) != nullptr; }

std::vector<int> ratequant_widths(const Method& m) {
  const RateQuantMethod& r = ratequant_impl(m);
  std::vector<int> w;
  for (int b = r.lo(); b <= r.hi(); ++b) w.push_back(b);
  return w;
}

int ratequant_budget(const Method& m, int units, int head_dim) {
  const RateQuantMethod& r = ratequant_impl(m);
  if (r.ctx() > 0) {
    VQ_CHECK(head_dim >= 1, fmt::format("'{}': a budget counted at ctx tokens needs the head size", m.spec()));
    return r.counted_budget(units, head_dim);
  }
  int total = 0;
  VQ_CHECK(whole_budget(r.avg(), units, &total),
           fmt::format("'{}': avg={:g} over {} units (keys and values of each layer) is {:g} bits, not a whole number; "
                       "choose an avg that is a multiple of 1/{} (to four decimals)",
                       m.spec(), r.avg(), units, r.avg() * units, units));
  return total;
}

bool ratequant_learns_per_width(const Method& m) { return ratequant_impl(m).learns_per_width(); }

Method ratequant_base_method(const Method& m, int bits) {
  const RateQuantMethod& r = ratequant_impl(m);
  VQ_CHECK(bits >= r.lo() && bits <= r.hi(), "ratequant: base width out of range");
  return parse_method(r.base_spec(bits));
}

bool ratequant_per_head(const Method& m) { return ratequant_impl(m).per_head(); }

int ratequant_unit_heads(const Method& m, int n_kv_heads) { return ratequant_impl(m).unit_heads(n_kv_heads); }

int ratequant_units(const Method& m, int n_layers, int n_kv_heads) {
  return 2 * n_layers * ratequant_unit_heads(m, n_kv_heads);
}

Method ratequant_probe_reference(const Method& m, int n_layers) {
  auto p = ratequant_impl(m).probe(n_layers, -1, -1, 0, 0);
  return Method(fmt::format("{} probe reference", m.spec()), p, p);
}

Method ratequant_probe_method(const Method& m, int n_layers, int layer, int side, int bits,
                              std::shared_ptr<const Calibration> base_calib, int head) {
  const RateQuantMethod& r = ratequant_impl(m);
  auto p = r.probe(n_layers, layer, head, side, bits);
  Method probe(fmt::format("{} probe: layer {}{} {} at {} bits", m.spec(), layer,
                           head >= 0 ? fmt::format(" KV head {}", head) : "", side == 0 ? "keys" : "values", bits),
               p, p);
  if (!r.learns_per_width()) return probe;
  const std::string base = ratequant_base_method(m, bits).spec();
  VQ_CHECK(base_calib && base_calib->spec == base && int(base_calib->layers.size()) == n_layers,
           fmt::format("ratequant probe: the unit at {} bits needs the calibration of '{}'", bits, base));
  auto c = std::make_shared<Calibration>(*base_calib);
  c->spec = probe.spec();
  return probe.with_calibration(c);
}

namespace {

// The calibration of allocation `alloc` (widths in unit order: per layer, keys then values, each
// per KV head with unit=head) with its probe table, and for a base that learns per width the
// datatypes at the allocated widths.
Calibration assemble(const Method& m, const ModelIdentity& model, const std::string& source, int64_t tokens,
                     const RateProbe& probe, const std::vector<int>& alloc,
                     const std::vector<std::shared_ptr<const Calibration>>& base_calibs) {
  const std::vector<int> widths = ratequant_widths(m);
  const int L = int(probe.size());
  const bool per_width = ratequant_learns_per_width(m), per_head = ratequant_per_head(m);
  const int H = ratequant_unit_heads(m, model.n_kv_heads);
  VQ_CHECK(!per_width || base_calibs.size() == widths.size(),
           fmt::format("ratequant: '{}' needs its base's calibration at each of {} widths", m.spec(), widths.size()));
  Calibration c;
  c.spec = m.spec();
  c.model = model;
  c.source = source;
  c.tokens = tokens;
  c.probe_bits = widths;
  for (int l = 0; l < L; ++l) {
    LayerCalibration lc;
    lc.head_dim = model.head_dim;
    for (int side = 0; side < 2; ++side) {
      std::vector<float>& row = side == 0 ? lc.key_probe_kl : lc.value_probe_kl;
      for (double x : probe[size_t(l)][size_t(side)]) row.push_back(float(x));
    }
    const auto unit = [&](int side, int h) { return alloc[size_t((2 * l + side) * H + h)]; };
    const auto base = [&](int w) -> const LayerCalibration& {
      const Calibration& b = *base_calibs[size_t(w - widths.front())];
      VQ_CHECK(b.spec == ratequant_base_method(m, w).spec() && int(b.layers.size()) == L,
               fmt::format("ratequant: the base calibration at {} bits is '{}' of {} layers", w, b.spec, b.layers.size()));
      return b.layers[size_t(l)];
    };
    if (per_head) {
      for (int h = 0; h < H; ++h) {
        lc.key_head_bits.push_back(unit(0, h));
        lc.value_head_bits.push_back(unit(1, h));
        lc.key_head_levels.push_back(per_width ? base(unit(0, h)).key_levels : std::vector<float>());
        lc.value_head_levels.push_back(per_width ? base(unit(1, h)).value_levels : std::vector<float>());
      }
    } else {
      lc.key_bits = unit(0, 0);
      lc.value_bits = unit(1, 0);
      if (per_width) {
        lc.key_levels = base(lc.key_bits).key_levels;
        lc.value_levels = base(lc.value_bits).value_levels;
      }
    }
    if (per_width) {
      // KVQuant's key ranges depend on the outlier fraction, not on the width.
      const LayerCalibration& k = base(unit(0, 0));
      lc.head_dim = k.head_dim;
      lc.key_lo = k.key_lo;
      lc.key_hi = k.key_hi;
    }
    c.layers.push_back(std::move(lc));
  }
  return c;
}

}  // namespace

Calibration ratequant_calibration(const Method& m, const ModelIdentity& model, const std::string& source,
                                  int64_t tokens, const RateProbe& probe,
                                  const std::vector<std::shared_ptr<const Calibration>>& base_calibs) {
  const std::vector<int> widths = ratequant_widths(m);
  const int L = int(probe.size()), H = ratequant_unit_heads(m, model.n_kv_heads);
  const size_t W = widths.size();
  VQ_CHECK(L == model.n_layer, fmt::format("ratequant: a probe of {} layers for a model of {}", L, model.n_layer));
  const int total = ratequant_budget(m, ratequant_units(m, L, model.n_kv_heads), model.head_dim);
  // The allocation is computed from the stored (float) values, so that a file's allocation
  // follows from its own table.
  std::vector<std::vector<double>> loss;
  for (int l = 0; l < L; ++l) {
    for (int side = 0; side < 2; ++side) {
      const auto& kl = probe[size_t(l)][size_t(side)];
      VQ_CHECK(kl.size() == size_t(H) * W, "ratequant: a probe row without one KL per unit and width");
      for (int h = 0; h < H; ++h) {
        loss.emplace_back();
        for (size_t i = 0; i < W; ++i) loss.back().push_back(double(float(kl[size_t(h) * W + i])));
      }
    }
  }
  return assemble(m, model, source, tokens, probe, allocate_bits(loss, widths.front(), total), base_calibs);
}

Calibration ratequant_even_calibration(const Method& m, const ModelIdentity& model, const std::string& source,
                                       const std::vector<std::shared_ptr<const Calibration>>& base_calibs) {
  const std::vector<int> widths = ratequant_widths(m);
  const int L = model.n_layer, H = ratequant_unit_heads(m, model.n_kv_heads), U = 2 * L * H, lo = widths.front();
  VQ_CHECK(L >= 1 && H >= 1, "ratequant: no layers or no KV heads");
  const int extra = ratequant_budget(m, U, model.head_dim) - lo * U;  // within [0, (hi - lo) * U]: avg is in [lo, hi]
  // Unit u is (layer, side, head) in that order; the extra bits are spread over the order keys of
  // every layer and head, then values, so both sides and all depths and heads get their share.
  std::vector<int> alloc;
  for (int u = 0; u < U; ++u) {
    const int l = u / (2 * H), side = (u / H) % 2, h = u % H;
    const int64_t p = int64_t(side) * L * H + int64_t(l) * H + h;
    alloc.push_back(lo + int((p + 1) * extra / U - p * extra / U));
  }
  const RateProbe probe(static_cast<size_t>(L), {std::vector<double>(size_t(H) * widths.size(), 0.0),
                                                 std::vector<double>(size_t(H) * widths.size(), 0.0)});
  return assemble(m, model, source, 0, probe, alloc, base_calibs);
}

const MethodDef& ratequant_method() {
  static const MethodDef def{
      {"ratequant",
       "RateQuant: per-layer (or per-KV-head) key and value bit widths over a base method, from a KL sensitivity probe "
       "(needs calibrate)",
       {
           {"base", ParamType::kChoice, 0, 0, 2, "base method (its other parameters at their defaults)",
            {kBaseNames[0], kBaseNames[1], kBaseNames[2]}},
           {"avg", ParamType::kFloat, 3, 1, 16,
            "average bit width over all layers' keys and values (met exactly); with ctx, the bits per element "
            "everything counted",
            {}},
           {"lo", ParamType::kInt, 2, 1, 8, "fewest bits a unit may get", {}},
           {"hi", ParamType::kInt, 4, 1, 8, "most bits a unit may get", {}},
           {"ctx", ParamType::kInt, 0, 0, 1 << 20,
            "tokens a sequence holds when avg counts everything, fp16 sinks and window included (0: avg is the mean "
            "width)",
            {}},
           {"sink", ParamType::kInt, -1, -1, 1 << 16, "the base's fp16 sink tokens (-1: the base's default)", {}},
           {"residual", ParamType::kInt, -1, -1, 1 << 20, "the base's fp16 window (-1: the base's default)", {}},
           {"unit", ParamType::kChoice, 0, 0, 1,
            "what gets a width: each layer's keys and values, or each KV head's of each layer", {"layer", "head"}},
       }},
      [](const ParamValues& v) -> std::unique_ptr<MethodImpl> { return std::make_unique<RateQuantMethod>(v); }};
  return def;
}

}  // namespace vq::kv
