// Fuzzes the calibration-file parser behind the checksum (what a crafted file with a valid CRC
// reaches). A payload that parses is put to use: a KVQuant cache of the calibration's shape
// (for the bit width its key levels fit), or for a RateQuant, SpectralQuant or CommVQ file the
// cache of the spec the file names, bound to its allocation, appends, attends and decodes. Either that works or the
// input is refused with vq::Error.
//
// Seeds: VQ_FUZZ_MAKE_SEEDS=DIR ./fuzz_calibration writes valid payloads (kvquant at 2, 3 and 4
// bits, with and without outliers, spectral at two settings, commvq, and ratequant over kivi and turbo
// per layer and over kivi and kvquant per KV head, two layers of head size 32) to DIR.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <algorithm>
#include <array>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "src/kv/calib/calibrate.h"
#include "src/kv/methods/ratequant/ratequant.h"
#include "veloxquant/error.h"
#include "veloxquant/kv/cache.h"
#include "veloxquant/kv/calibration.h"

namespace {

vq::kv::RopeSpec neox() {
  vq::kv::RopeSpec r;
  r.style = vq::kv::RopeSpec::Style::kNeox;
  return r;
}

void write_seed(const char* dir, int i, const std::vector<uint8_t>& bytes) {
  const std::string path = std::string(dir) + "/" + std::to_string(i);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::exit(1);
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

void make_seeds(const char* dir) {
  int i = 0;
  for (const char* spec : {"kvquant:bits=2", "kvquant", "kvquant:bits=4", "kvquant:outliers=0", "spectral",
                           "spectral:hi=3,lo=0,rank=5", "commvq:kbits=1,vbits=2,rounds=2"}) {
    const int d = 32, n = 64;
    std::vector<float> k(size_t(n) * d), v(k.size());
    for (size_t j = 0; j < k.size(); ++j) {
      k[j] = float(int(j * 37 % 29) - 14) * (j % d == 3 ? 9.0f : 1.0f);
      v[j] = float(int(j * 11 % 23) - 11);
    }
    const vq::kv::LayerConfig cfg(1, d, 0, 0, neox());
    const auto s = vq::kv::unweighted_samples(cfg, k.data(), v.data(), n, 0);
    const auto c = vq::kv::calibrate(vq::kv::parse_method(spec), {s, s}, vq::kv::ModelIdentity{"seed", "fuzz", 7, 2, 1, d},
                                     "fuzz seed");
    write_seed(dir, i++, vq::kv::serialize_calibration(c));
  }
  for (const char* spec : {"ratequant:avg=2.5", "ratequant:base=turbo,avg=2.5,lo=1,hi=4", "ratequant:avg=2.5,unit=head",
                           "ratequant:base=kvquant,avg=3,unit=head"}) {
    const vq::kv::Method m = vq::kv::parse_method(spec);
    const size_t W = vq::kv::ratequant_widths(m).size();
    const int heads = vq::kv::ratequant_per_head(m) ? 2 : 1, d = 32;
    vq::kv::RateProbe probe(2);
    for (size_t l = 0; l < 2; ++l) {
      for (size_t s = 0; s < 2; ++s) {
        for (int h = 0; h < heads; ++h) {
          for (size_t w = 0; w < W; ++w) probe[l][s].push_back(double(l * 2 + s + 1 + h) / double(1 << (2 * w)));
        }
      }
    }
    std::vector<std::shared_ptr<const vq::kv::Calibration>> bases;
    if (vq::kv::ratequant_learns_per_width(m)) {
      const int n = 64;
      std::vector<float> k(size_t(n) * d), v(k.size());
      for (size_t j = 0; j < k.size(); ++j) {
        k[j] = float(int(j * 37 % 29) - 14) * (j % d == 3 ? 9.0f : 1.0f);
        v[j] = float(int(j * 11 % 23) - 11);
      }
      for (int w : vq::kv::ratequant_widths(m)) {
        bases.push_back(vq::kv::calibrate_on_synthetic(vq::kv::ratequant_base_method(m, w),
                                                       vq::kv::LayerConfig(1, d, 0, 0, neox()), k.data(), v.data(), n, 2,
                                                       "fuzz seed"));
      }
    }
    const auto c = vq::kv::ratequant_calibration(m, vq::kv::ModelIdentity{"seed", "fuzz", 7, 2, heads, d}, "fuzz seed", 64,
                                                 probe, bases);
    write_seed(dir, i++, vq::kv::serialize_calibration(c));
  }
}

void exercise(std::shared_ptr<vq::kv::Calibration> c) {
  const int d = c->model.head_dim;
  if (d > 512 || d % 2 != 0 || c->layers.empty()) return;
  vq::kv::Method m = vq::kv::parse_method("fp16");
  if (!c->probe_bits.empty() || c->layers[0].key_rank > 0 || !c->layers[0].key_commvq.empty()) {
    m = vq::kv::parse_method(c->spec).with_calibration(c);  // RateQuant, SpectralQuant, CommVQ: the file's own spec
  } else {
    const size_t levels = c->layers[0].key_levels.size();
    const int bits = levels == 4 ? 2 : levels == 8 ? 3 : levels == 16 ? 4 : 0;
    if (bits == 0) return;
    const vq::kv::Method bare = vq::kv::parse_method("kvquant:bits=" + std::to_string(bits));
    c->spec = bare.spec();
    m = bare.with_calibration(c);
  }
  // Up to two KV heads: a per-head allocation gives them codecs of their own widths.
  const int heads = std::min(c->model.n_kv_heads, 2);
  std::vector<vq::kv::LayerConfig> layout;
  for (int l = 0; l < int(c->layers.size()) && l < 3; ++l) layout.emplace_back(heads, d, l, l == 1 ? 8 : 0, neox());
  vq::kv::KvCache cache(m, layout);
  std::vector<float> x(static_cast<size_t>(heads) * d), q(size_t(2 * heads) * d, 0.25f), out(q.size());
  for (int t = 0; t < 20; ++t) {
    for (size_t j = 0; j < x.size(); ++j) {
      x[j] = float((t * 13 + int(j) * 5) % 11) - 5.0f + (j % size_t(d) == 1 ? 300.0f : 0.0f);
    }
    for (size_t l = 0; l < cache.n_layers(); ++l) {
      auto& layer = cache.layer(l);
      const int64_t pos = layer.n_tokens();
      layer.append(x.data(), x.data(), 1);
      layer.attend(q.data(), 1, 2 * heads, &pos, 0.2f, out.data());
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("VQ_FUZZ_MAKE_SEEDS")) {
    make_seeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto c = std::make_shared<vq::kv::Calibration>(
        vq::kv::parse_calibration(std::vector<uint8_t>(data, data + size), "fuzz"));
    exercise(std::move(c));
  } catch (const vq::Error&) {
  }
  return 0;
}
