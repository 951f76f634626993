// Saving a standalone cache and loading it back as a new one. The file is a checked file
// (src/core/checked_file.h); its payload is the cache's configuration (so that loading can build
// the cache it was saved from), then the stored state as src/kv/cache_io.h writes it.
#include <cmath>
#include <cstdint>

#include "src/capi/handles.h"
#include "src/core/byte_io.h"
#include "src/core/checked_file.h"
#include "src/kv/cache_io.h"

using namespace vq::capi;

namespace {

constexpr char kMagic[9] = "VQKVCACH";
constexpr uint32_t kVersion = 3;  // 2: QJL keys with outlier channels keep tokens in lanes;
                                  // 3: KVQuant keeps tokens in lanes, its outlier slots hold the
                                  //    difference from the dense decode

vq::kv::RopeSpec::Style rope_style(vq::ByteReader& r) {
  const int64_t s = r.i64_in("rope style", 0, 2);
  return s == 1 ? vq::kv::RopeSpec::Style::kNeox : s == 2 ? vq::kv::RopeSpec::Style::kNorm : vq::kv::RopeSpec::Style::kNone;
}

float finite_float(vq::ByteReader& r, const char* field) {
  float f;
  r.raw(&f, sizeof f, field);
  r.check(std::isfinite(f) && f >= 0, field, "not a finite non-negative number");
  return f;
}

}  // namespace

extern "C" {

VQ_API vq_status vq_cache_save(const vq_cache* cache, const char* path) {
  return guard([&] {
    require_ptr(cache, "cache");
    require_ptr(path, "path");
    vq::ByteWriter w;
    const vq::kv::LayerConfig& first = cache->layers[0];
    w.i64(int64_t(cache->layers.size()));
    w.i64(first.n_kv_heads);
    w.i64(first.head_dim);
    w.i64(int64_t(first.rope.style));
    w.raw(&first.rope.base, sizeof(float));
    w.raw(&first.rope.freq_scale, sizeof(float));
    w.raw(&first.logit_softcap, sizeof(float));
    for (size_t l = 0; l < cache->layers.size(); ++l) {
      w.i64(cache->layers[l].sliding_window);
      w.i64(cache->last_append[l]);
    }
    vq::kv::save_cache(*cache->cache, w);
    // The checked writer reports a file it cannot create as a usage error; tell it apart as I/O.
    try {
      vq::write_checked_file(path, kMagic, kVersion, w.data());
    } catch (const vq::Error& e) {
      throw IoError(e.what());
    }
  });
}

VQ_API vq_status vq_cache_load(const char* path, const char* calib_path, vq_cache** out) {
  return guard([&] {
    require_ptr(out, "out");
    *out = nullptr;
    require_readable(path, "path");
    const std::vector<uint8_t> payload = vq::read_checked_file(path, kMagic, kVersion);
    vq::ByteReader r(payload.data(), payload.size(), path);
    const int64_t n_layers = r.i64_in("layer count", 1, 4096);
    const int64_t heads = r.i64_in("KV heads", 1, 1024);
    const int64_t dim = r.i64_in("head dim", 1, 4096);
    const vq::kv::RopeSpec::Style style = rope_style(r);
    std::vector<int32_t> windows;
    std::vector<int64_t> last_append;
    vq_cache_config c;
    vq_cache_config_init(&c);
    c.rope_base = finite_float(r, "rope base");
    c.rope_freq_scale = finite_float(r, "rope frequency scale");
    c.logit_softcap = finite_float(r, "logit soft-cap");
    r.check(c.rope_base > 0 && c.rope_freq_scale > 0, "rope", "base and scale must be positive");
    for (int64_t l = 0; l < n_layers; ++l) {
      windows.push_back(int32_t(r.i64_in("sliding window", 0, INT32_MAX)));
      last_append.push_back(r.i64_in("last append", 0, int64_t(1) << 40));
    }
    // The spec heads the cache_io part; it is read again (and checked) by load_cache.
    vq::ByteReader peek = r;
    const std::string spec = peek.str("method", 4096);
    c.spec = spec.c_str();
    c.n_layers = int32_t(n_layers);
    c.n_kv_heads = int32_t(heads);
    c.head_dim = int32_t(dim);
    c.sliding_window = windows.data();
    c.calib_path = calib_path;
    c.rope_style = style == vq::kv::RopeSpec::Style::kNeox   ? VQ_ROPE_NEOX
                   : style == vq::kv::RopeSpec::Style::kNorm ? VQ_ROPE_NORM
                                                             : VQ_ROPE_NONE;
    try {
      vq::kv::parse_method(spec);
    } catch (const vq::Error& e) {
      r.fail("method", e.what());
    }
    vq_cache* made = nullptr;
    if (const vq_status s = vq_cache_create(&c, &made); s != VQ_OK) {
      const std::string why = fmt::format("{}: {}", path, vq_last_error());
      if (s == VQ_ERR_IO) throw IoError(why);
      vq::throw_error(s == VQ_ERR_DATA ? vq::ErrorKind::kData : vq::ErrorKind::kUsage, why);
    }
    std::unique_ptr<vq_cache> h(made);
    vq::kv::load_cache(*h->cache, r);
    r.check(r.remaining() == 0, "end", fmt::format("{} bytes after the cache", r.remaining()));
    h->last_append = last_append;
    *out = h.release();
  });
}

}  // extern "C"
