// The caches fuzz_cache_load loads into (shared with the test that keeps its seeds loadable).
#pragma once

#include <vector>

#include "veloxquant/kv/cache.h"

namespace vq::fuzz {

// New specs go at the end: a seed's first byte picks its spec modulo the count.
inline const char* const kCacheLoadSpecs[] = {"fp16", "q4", "q4:rot=1,residual=3,sink=2", "q8:residual=5",
                                              "kivi:residual=16", "k=kivi:residual=8,v=q4",
                                              "qjl:m=32,outliers=4,group=8", "turbo:bits=2,outliers=16,group=16"};
constexpr int kCacheLoadNumSpecs = sizeof(kCacheLoadSpecs) / sizeof(kCacheLoadSpecs[0]);

// One global layer and one sliding-window layer.
inline std::vector<kv::LayerConfig> cache_load_layout() { return {{2, 32, 0, 0}, {1, 32, 1, 24}}; }

}  // namespace vq::fuzz
