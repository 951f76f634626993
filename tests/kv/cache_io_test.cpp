// Saving and restoring a cache: a restored cache attends exactly like the original and keeps
// growing the same way, for every kind of stream (partial q4 blocks, KIVI key blocks waiting in
// the window, sinks, sliding windows that dropped pages); a cache of another shape or method,
// or inconsistent counters, is refused.
#include <gtest/gtest.h>

#include <vector>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "fuzz/cache_load_setup.h"
#include "src/core/byte_io.h"
#include "src/kv/cache_io.h"
#include "src/core/rng.h"
#include "veloxquant/error.h"
#include "veloxquant/kv/cache.h"

namespace vq::kv {
namespace {

std::vector<float> random_rows(size_t n, Rng& rng) {
  std::vector<float> x(n);
  for (auto& v : x) v = float(rng.normal());
  return x;
}

std::vector<float> attend_last(const LayerCache& c, int q_heads, const std::vector<float>& q) {
  std::vector<float> out(q.size());
  const int64_t pos = c.n_tokens() - 1;
  c.attend(q.data(), 1, q_heads, &pos, 0.125f, out.data());
  return out;
}

TEST(CacheIo, RestoredCacheAttendsAndGrowsIdentically) {
  const int H = 2, QH = 4, d = 64;
  for (const char* spec : {"fp16", "q4", "q4:rot=1,residual=5,sink=2", "q8:residual=9", "kivi:residual=32",
                           "k=kivi:residual=20,v=q4"}) {
    for (int window : {0, 40}) {
      SCOPED_TRACE(std::string(spec) + " window " + std::to_string(window));
      const Method m = parse_method(spec);
      const LayerConfig cfg{H, d, 0, window};
      LayerCache a(m, cfg);
      Rng rng(3);
      for (int n : {7, 300, 1, 45}) {
        const auto k = random_rows(size_t(n) * H * d, rng), v = random_rows(size_t(n) * H * d, rng);
        a.append(k.data(), v.data(), n);
      }
      ByteWriter w;
      save_layer(a, w);
      LayerCache b(m, cfg);
      ByteReader r(w.data().data(), w.data().size(), "test");
      load_layer(b, r);
      EXPECT_EQ(r.remaining(), 0u);
      EXPECT_EQ(b.n_tokens(), a.n_tokens());
      EXPECT_EQ(b.memory().total(), a.memory().total());
      for (int step = 0; step < 3; ++step) {
        const auto q = random_rows(size_t(QH) * d, rng);
        EXPECT_EQ(attend_last(a, QH, q), attend_last(b, QH, q));
        const auto k = random_rows(size_t(17) * H * d, rng), v = random_rows(size_t(17) * H * d, rng);
        a.append(k.data(), v.data(), 17);
        b.append(k.data(), v.data(), 17);
      }
    }
  }
}

TEST(CacheIo, RefusesOtherShapesMethodsAndBadCounters) {
  const LayerConfig cfg{2, 64, 0, 0};
  LayerCache a(parse_method("q4"), cfg);
  Rng rng(1);
  const auto x = random_rows(size_t(50) * 2 * 64, rng);
  a.append(x.data(), x.data(), 50);
  ByteWriter w;
  save_layer(a, w);
  const auto refused = [&](const Method& m, const LayerConfig& c, std::vector<uint8_t> bytes) {
    LayerCache b(m, c);
    ByteReader r(bytes.data(), bytes.size(), "test");
    try {
      load_layer(b, r);
    } catch (const Error& e) {
      return e.kind() == ErrorKind::kData;
    }
    return false;
  };
  EXPECT_TRUE(refused(parse_method("q8"), cfg, w.data()));
  EXPECT_TRUE(refused(parse_method("q4"), {2, 128, 0, 0}, w.data()));
  EXPECT_TRUE(refused(parse_method("q4"), {1, 64, 0, 0}, w.data()));
  auto cut = w.data();
  cut.resize(cut.size() / 2);
  EXPECT_TRUE(refused(parse_method("q4"), cfg, cut));
  // The layer's token count (after n_kv_heads, head_dim, window) set past what the streams hold.
  auto bad = w.data();
  bad[24] ^= 0x01;
  EXPECT_TRUE(refused(parse_method("q4"), cfg, bad));
  // A compressed-token counter that implies more pages than stored.
  bad = w.data();
  bad[32 + 7 * 8 + 2 * 8] ^= 0x40;
  EXPECT_TRUE(refused(parse_method("q4"), cfg, bad));
}

// The committed seeds of fuzz_cache_load are valid payloads of the current format (a format change
// must regenerate them: VQ_FUZZ_MAKE_SEEDS, see fuzz/README.md), so fuzzing starts deep.
TEST(CacheIo, FuzzSeedsLoad) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(VQ_SOURCE_DIR) + "/fuzz/corpus/fuzz_cache_load")) {
    std::ifstream f(e.path(), std::ios::binary);
    const std::vector<uint8_t> b{std::istreambuf_iterator<char>(f), {}};
    ASSERT_GE(b.size(), 1u);
    KvCache c(parse_method(vq::fuzz::kCacheLoadSpecs[b[0] % vq::fuzz::kCacheLoadNumSpecs]),
              vq::fuzz::cache_load_layout());
    ByteReader r(b.data() + 1, b.size() - 1, e.path().string());
    EXPECT_NO_THROW(load_cache(c, r)) << e.path();
    ++n;
  }
  EXPECT_GE(n, 12);
}

}  // namespace
}  // namespace vq::kv
