// Saving and restoring a compressed cache: the stored bytes as they are (packed pages, fp16
// sinks and windows) plus the counters that say what they hold. Loading trusts nothing: every
// count is checked against the shape of the fresh cache it is loaded into before anything is
// allocated or copied, and fp16 rows must hold finite values.
#include <fmt/format.h>

#include <cmath>

#include "src/core/byte_io.h"
#include "src/core/fp16.h"
#include "src/kv/cache_io.h"
#include "src/kv/stream.h"
#include "veloxquant/kv/calibration.h"

namespace vq::kv {

namespace {

void check_finite_half(ByteReader& r, const uint16_t* h, size_t n, const char* field) {
  for (size_t i = 0; i < n; ++i) {
    if ((h[i] & 0x7c00u) == 0x7c00u) r.fail(field, "holds a non-finite fp16 value");
  }
}

}  // namespace

void TokenStream::save(ByteWriter& w) const {
  for (int64_t v : {int64_t(d_), int64_t(block_tokens_), int64_t(keep_), int64_t(sinks_capacity_), int64_t(step_),
                    int64_t(block_bytes_), blocks_per_page_}) {
    w.i64(v);
  }
  w.i64(n_sink_);
  w.i64(first_block_);
  w.i64(n_comp_);
  w.i64(win_start_);
  w.i64(win_count_);
  w.i64(int64_t(pages_.size()));
  w.raw(sinks_.data(), size_t(n_sink_) * d_ * 2);
  for (const auto& p : pages_) w.raw(p.data(), size_t(blocks_per_page_) * block_bytes_);
  w.raw(window_.data(), window_.size() * 2);
}

void TokenStream::load(ByteReader& r) {
  const int64_t shape[] = {d_, block_tokens_, keep_, sinks_capacity_, step_, int64_t(block_bytes_), blocks_per_page_};
  const char* names[] = {"head_dim", "block_tokens", "keep", "sinks", "step", "block_bytes", "blocks_per_page"};
  for (int i = 0; i < 7; ++i) {
    const int64_t v = r.i64(names[i]);
    r.check(v == shape[i], names[i], fmt::format("{} in the file, {} for this method and model", v, shape[i]));
  }
  clear();
  const int64_t cap = keep_ + step_;
  const int64_t n_sink = r.i64_in("sink count", 0, sinks_capacity_);
  const int64_t first_block = r.i64_in("first block", 0, int64_t(1) << 40);
  const int64_t n_comp = r.i64_in("compressed tokens", 0, int64_t(1) << 40);
  const int64_t win_start = r.i64_in("window start", 0, cap - 1);
  const int64_t win_count = r.i64_in("window count", 0, cap - 1);
  const int64_t n_pages = r.i64_in("page count", 0, int64_t(1) << 32);
  r.check(n_sink == sinks_capacity_ || (n_comp == 0 && win_count == 0), "sink count",
          "tokens after unfilled sinks");
  r.check(n_comp % step_ == 0, "compressed tokens", "not a whole number of flushes");
  r.check(first_block % blocks_per_page_ == 0, "first block", "not at a page boundary");
  const int64_t blocks = (n_comp + block_tokens_ - 1) / block_tokens_;
  r.check(first_block <= blocks, "first block", "past the blocks written");
  const int64_t want_pages = (blocks - first_block + blocks_per_page_ - 1) / blocks_per_page_;
  r.check(n_pages == want_pages, "page count", fmt::format("{}, the counters imply {}", n_pages, want_pages));
  const size_t page_bytes = size_t(blocks_per_page_) * block_bytes_;
  r.check(size_t(n_pages) <= r.remaining() / std::max<size_t>(1, page_bytes), "page count", "more pages than bytes");

  r.raw(sinks_.data(), size_t(n_sink) * d_ * 2, "sinks");
  check_finite_half(r, sinks_.data(), size_t(n_sink) * d_, "sinks");
  for (int64_t p = 0; p < n_pages; ++p) {
    pages_.emplace_back(page_bytes);
    r.raw(pages_.back().data(), page_bytes, "pages");
  }
  r.raw(window_.data(), window_.size() * 2, "window");
  check_finite_half(r, window_.data(), window_.size(), "window");
  n_sink_ = n_sink;
  first_block_ = first_block;
  n_comp_ = n_comp;
  win_start_ = win_start;
  win_count_ = win_count;
}

// The friend of LayerCache that reaches its streams.
struct CacheIo {
  static void save(const LayerCache& c, ByteWriter& w) {
    w.i64(c.config_.n_kv_heads);
    w.i64(c.config_.head_dim);
    w.i64(c.config_.sliding_window);
    w.i64(c.n_tokens_);
    for (int h = 0; h < c.config_.n_kv_heads; ++h) {
      c.keys_[size_t(h)]->save(w);
      c.values_[size_t(h)]->save(w);
    }
  }

  static void load(LayerCache& c, ByteReader& r) {
    const int64_t shape[] = {c.config_.n_kv_heads, c.config_.head_dim, c.config_.sliding_window};
    const char* names[] = {"n_kv_heads", "head_dim", "sliding_window"};
    for (int i = 0; i < 3; ++i) {
      const int64_t v = r.i64(names[i]);
      r.check(v == shape[i], names[i], fmt::format("{} in the file, {} for this model", v, shape[i]));
    }
    const int64_t n = r.i64_in("token count", 0, int64_t(1) << 40);
    for (int h = 0; h < c.config_.n_kv_heads; ++h) {
      c.keys_[size_t(h)]->load(r);
      c.values_[size_t(h)]->load(r);
      r.check(c.keys_[size_t(h)]->n_positions() == n && c.values_[size_t(h)]->n_positions() == n, "token count",
              "streams disagree with the layer's position");
    }
    c.n_tokens_ = n;
  }
};

void save_layer(const LayerCache& cache, ByteWriter& w) { CacheIo::save(cache, w); }
void load_layer(LayerCache& cache, ByteReader& r) { CacheIo::load(cache, r); }

namespace {
// Codes stored under one calibration mean nothing under another: a saved cache names its own.
uint32_t calibration_fingerprint(const Method& m) {
  return m.calibration() ? calibration_crc32(*m.calibration()) : 0;
}
}  // namespace

void save_cache(const KvCache& cache, ByteWriter& w) {
  w.str(cache.method().spec());
  w.u32(calibration_fingerprint(cache.method()));
  w.i64(int64_t(cache.n_layers()));
  for (size_t l = 0; l < cache.n_layers(); ++l) save_layer(cache.layer(l), w);
}

void load_cache(KvCache& cache, ByteReader& r) {
  const Method& method = cache.method();
  const std::string spec = r.str("method", 4096);
  r.check(canonical_spec(spec) == method.spec(), "method", fmt::format("'{}' in the file, '{}' requested", spec, method.spec()));
  const uint32_t calib = r.u32("calibration");
  r.check(calib == calibration_fingerprint(method), "calibration",
          fmt::format("the cache was stored under calibration {:08x}, this run has {:08x}", calib,
                      calibration_fingerprint(method)));
  const int64_t n = r.i64("layer count");
  r.check(n == int64_t(cache.n_layers()), "layer count",
          fmt::format("{} in the file, {} in the model", n, cache.n_layers()));
  for (size_t l = 0; l < cache.n_layers(); ++l) load_layer(cache.layer(l), r);
}

}  // namespace vq::kv
