// Fuzzes the saved-cache parser behind the checksum (what a crafted file with a valid CRC
// reaches): the first byte picks a method, the rest is loaded into a fresh two-layer cache. The
// load either succeeds, and the cache then attends and grows, or is refused with vq::Error.
//
// Seeds: VQ_FUZZ_MAKE_SEEDS=DIR ./fuzz_cache_load writes valid payloads for every method to DIR.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz/cache_load_setup.h"
#include "src/core/byte_io.h"
#include "src/kv/cache_io.h"
#include "veloxquant/error.h"
#include "veloxquant/kv/cache.h"

namespace {

using vq::fuzz::kCacheLoadNumSpecs;
using vq::fuzz::kCacheLoadSpecs;
std::vector<vq::kv::LayerConfig> layout() { return vq::fuzz::cache_load_layout(); }

void exercise(vq::kv::KvCache& c) {
  std::vector<float> x(2 * 32, 0.5f), q(4 * 32, 0.25f), out(4 * 32);
  for (size_t l = 0; l < c.n_layers(); ++l) {
    auto& layer = c.layer(l);
    const int64_t pos = layer.n_tokens();
    layer.append(x.data(), x.data(), 1);
    layer.attend(q.data(), 1, 4, &pos, 0.2f, out.data());
  }
}

void make_seeds(const char* dir) {
  for (int m = 0; m < kCacheLoadNumSpecs; ++m) {
    for (int n : {0, 5, 40}) {
      vq::kv::KvCache c(vq::kv::parse_method(kCacheLoadSpecs[m]), layout());
      std::vector<float> x(2 * 32);
      for (int t = 0; t < n; ++t) {
        for (size_t i = 0; i < x.size(); ++i) x[i] = float((t * 31 + int(i) * 7) % 13) - 6.0f;
        for (size_t l = 0; l < c.n_layers(); ++l) c.layer(l).append(x.data(), x.data(), 1);
      }
      vq::ByteWriter w;
      w.raw(&m, 1);
      vq::kv::save_cache(c, w);
      const std::string path = std::string(dir) + "/" + std::to_string(m) + "_" + std::to_string(n);
      std::FILE* f = std::fopen(path.c_str(), "wb");
      if (!f) std::exit(1);
      std::fwrite(w.data().data(), 1, w.data().size(), f);
      std::fclose(f);
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
  if (size < 1) return 0;
  const char* spec = kCacheLoadSpecs[data[0] % kCacheLoadNumSpecs];
  vq::kv::KvCache c(vq::kv::parse_method(spec), layout());
  vq::ByteReader r(data + 1, size - 1, "fuzz");
  try {
    vq::kv::load_cache(c, r);
  } catch (const vq::Error&) {
    return 0;
  }
  exercise(c);
  return 0;
}
