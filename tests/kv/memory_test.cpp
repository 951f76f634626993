// Memory accounting: bytes really allocated for compressed blocks agree with each method's
// bits-per-element formula (within 2% at 32,768 tokens), windows and sinks counted apart.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "src/core/rng.h"
#include "src/kv/calib/calibrate.h"
#include "veloxquant/kv/cache.h"
#include "veloxquant/kv/calibration.h"

namespace vq::kv {
namespace {

void check_formula(const Method& m, int d, int64_t tokens, RopeSpec rope = {}) {
  SCOPED_TRACE(m.spec());
  const int H = 2;
  LayerCache cache(m, LayerConfig(H, d, 0, 0, rope));
  std::vector<float> k(size_t(1024) * H * d), v(k.size());
  Rng rng(3);
  for (auto& x : k) x = float(rng.normal());
  for (auto& x : v) x = float(rng.normal());
  for (int64_t t = 0; t < tokens; t += 1024) cache.append(k.data(), v.data(), int(std::min<int64_t>(1024, tokens - t)));
  const MemoryUsage mem = cache.memory();
  const double formula = mem.key_elements_compressed * m.keys().key_bits(d) / 8 +
                         mem.value_elements_compressed * m.values().value_bits(d) / 8;
  EXPECT_NEAR(double(mem.block_bytes), formula, 0.02 * formula);
  EXPECT_EQ(mem.elements_retained, 2 * tokens * H * d);
  // Nothing is compressed twice or lost: compressed + window + sinks cover every token.
  EXPECT_LE(mem.key_elements_compressed, tokens * H * d);
}
void check_formula(const std::string& spec, int d, int64_t tokens) { check_formula(parse_method(spec), d, tokens); }

TEST(Memory, BlocksMatchFormulaAt32kTokens) {
  for (const char* spec : {"fp16", "bf16", "q8", "q4", "q8:rot=1", "q4:rot=1", "k=q8,v=q4"}) {
    check_formula(spec, 128, 32768);
  }
  check_formula("q4", 80, 32768);
  check_formula("q4:residual=128,sink=4", 128, 32768);
  for (const char* spec : {"kivi", "kivi:kbits=3,vbits=4,group=64", "kivi:kaxis=token", "k=kivi,v=q8"}) {
    check_formula(spec, 128, 32768);
  }
  for (const char* spec : {"turbo", "turbo:bits=2", "k=turbo:bits=3,v=turbo:bits=2", "turbo-rvq", "turbo-rvq:bits=1",
                           "polar", "polar:levels=2,bits1=3", "turbo:bits=2,outliers=64", "turbo:bits=1,outliers=32,group=16"}) {
    check_formula(spec, 128, 32768);
  }
  for (const char* spec : {"qjl", "qjl:outliers=0,m=128", "turbo-prod", "k=turbo-prod:bits=2,m=64,v=turbo"}) {
    check_formula(spec, 128, 32768);
  }
  for (const char* spec : {"rabitq", "rabitq:bits=3", "k=rabitq:bits=1,v=rabitq:bits=4"}) check_formula(spec, 128, 32768);
  // KVQuant, calibrated on synthetic tokens, under RoPE.
  RopeSpec rope;
  rope.style = RopeSpec::Style::kNeox;
  for (const char* spec : {"kvquant", "kvquant:bits=2,outliers=0", "kvquant:bits=4,outliers=0.02,sink=4"}) {
    const Method m = parse_method(spec);
    std::vector<float> k(size_t(512) * 128), v(k.size());
    Rng rng(5);
    for (auto& x : k) x = float(rng.normal());
    for (auto& x : v) x = float(rng.normal());
    auto c = calibrate_on_synthetic(m, LayerConfig(1, 128, 0, 0, rope), k.data(), v.data(), 512, 1, "test");
    check_formula(m.with_calibration(c), 128, 32768, rope);
  }
  // SpectralQuant and CommVQ: per-head bases or codebooks (two KV heads); SpectralQuant's rank
  // fixed by the calibration.
  for (const char* spec : {"spectral", "spectral:hi=3,lo=1,rank=12", "spectral:lo=0",
                           "commvq:kbits=1,vbits=2,rounds=1,residual=0"}) {
    const Method m = parse_method(spec);
    std::vector<float> k(size_t(512) * 2 * 128), v(k.size());
    Rng rng(6);
    for (size_t i = 0; i < k.size(); ++i) k[i] = float(rng.normal() * (i % 128 < 8 ? 6.0 : 1.0));
    for (auto& x : v) x = float(rng.normal());
    auto c = calibrate_on_synthetic(m, LayerConfig(2, 128, 0, 0, rope), k.data(), v.data(), 512, 1, "test");
    check_formula(m.with_calibration(c), 128, 32768, rope);
  }
}

TEST(Memory, WindowAndSinksCountedApart) {
  const Method m = parse_method("q4:residual=128,sink=4");
  LayerCache cache(m, {1, 64, 0, 0});
  std::vector<float> x(64 * 300, 0.5f);
  cache.append(x.data(), x.data(), 300);
  const MemoryUsage mem = cache.memory();
  // Window capacity keep + 1 rows of fp16 per stream, sinks 4 rows, for keys and values.
  EXPECT_EQ(mem.window_bytes, 2u * ((129 * 64 * 2 + 63) / 64 * 64));
  EXPECT_EQ(mem.sink_bytes, 2u * 4 * 64 * 2);
  EXPECT_EQ(mem.key_elements_compressed, (300 - 4 - 128) * 64);
}

TEST(Memory, CompressedIsSmaller) {
  const int d = 128;
  std::vector<float> x(size_t(4096) * d, 1.0f);
  size_t fp16 = 0, q4 = 0;
  for (const char* spec : {"fp16", "q4"}) {
    LayerCache c(parse_method(spec), {1, d, 0, 0});
    c.append(x.data(), x.data(), 4096);
    (std::string(spec) == "fp16" ? fp16 : q4) = c.memory().total();
  }
  EXPECT_NEAR(double(fp16) / double(q4), 16.0 / 4.5, 0.05);
}

}  // namespace
}  // namespace vq::kv

namespace vq::kv {
namespace {

// The budget check's estimate bounds what a cache really allocates, and is close to it.
TEST(Memory, EstimateBoundsAllocation) {
  for (const char* spec : {"fp16", "q4:rot=1", "kivi", "q8:residual=64,sink=4"}) {
    SCOPED_TRACE(spec);
    const Method m = parse_method(spec);
    const std::vector<LayerConfig> layers = {{2, 64, 0, 0}, {2, 64, 1, 100}};
    KvCache cache(m, layers);
    const int64_t n = 3000;
    std::vector<float> x(size_t(n) * 2 * 64, 0.25f);
    for (int64_t t = 0; t < n; t += 500) {  // as an engine appends: one micro-batch at a time
      for (size_t l = 0; l < layers.size(); ++l) cache.layer(l).append(x.data(), x.data(), int(std::min<int64_t>(500, n - t)));
    }
    const size_t actual = cache.memory().total();
    const size_t estimate = estimate_kv_bytes(m, layers, n, 500);
    EXPECT_GE(estimate, actual);
    EXPECT_LE(double(estimate), 1.25 * double(actual));
  }
}

}  // namespace
}  // namespace vq::kv
