// Saving and restoring a cache's stored state (the format of saved sessions and of the cache-load
// fuzz target). Internal: the byte writer and reader are the library's own, and the public
// cache.h does not promise this format to anyone.
#pragma once

#include "src/core/byte_io.h"
#include "veloxquant/kv/cache.h"

namespace vq::kv {

// The stored state of one layer (streams and position), and back into a fresh cache built with
// the same method and config; loading refuses (vq::Error, data) anything that does not fit.
void save_layer(const LayerCache& cache, ByteWriter& w);
void load_layer(LayerCache& cache, ByteReader& r);

// The method spec, its calibration's fingerprint and every layer; loading needs a fresh cache of
// the same method, calibration and layout.
void save_cache(const KvCache& cache, ByteWriter& w);
void load_cache(KvCache& cache, ByteReader& r);

}  // namespace vq::kv
