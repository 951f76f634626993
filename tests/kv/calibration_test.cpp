// Calibration machinery: the RoPE table (the model's rotation, and its exact inverse), weighted
// 1-D k-means and Q-Norm, the sensitivity the collector records (checked against brute force),
// and calibration files (round trip; damage, foreign kinds and bad values refused; RateQuant's
// probe table and allocation kept, and refused when damaged, inconsistent or for another model).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "src/core/rng.h"
#include "src/engine/ops.h"
#include "src/kv/calib/calibrate.h"
#include "src/kv/calib/nuq.h"
#include "src/kv/methods/ratequant/ratequant.h"
#include "src/kv/rope_table.h"
#include "veloxquant/error.h"
#include "veloxquant/kv/calibration.h"
#include "veloxquant/kv/method.h"

namespace vq::kv {
namespace {

RopeSpec spec(RopeSpec::Style style, float base, float scale = 1.0f) {
  RopeSpec r;
  r.style = style;
  r.base = base;
  r.freq_scale = scale;
  return r;
}

// The table rotates as the engine's RoPE does (which builds its angles in float, ggml's way),
// at positions up to 100k, and the inverse undoes it.
TEST(RopeTable, MatchesTheModelsRotation) {
  Rng rng(1);
  for (auto style : {RopeSpec::Style::kNeox, RopeSpec::Style::kNorm}) {
    for (float base : {10000.0f, 1e6f, 500000.0f}) {
      const int d = 256;
      RopeSpec rs = spec(style, base, 0.125f);
      // Llama 3's per-pair frequency divisors, with the base they come with.
      if (base == 500000.0f) {
        for (int i = 0; i < d / 2; ++i) rs.freq_factors.push_back(1.0f + 7.0f * float(i) / float(d / 2));
      }
      const float* factors = rs.freq_factors.empty() ? nullptr : rs.freq_factors.data();
      const RopeTable t(d, rs);
      for (int64_t pos : {int64_t(0), int64_t(1), int64_t(255), int64_t(256), int64_t(4097), int64_t(100000)}) {
        std::vector<float> x(static_cast<size_t>(d)), y;
        for (auto& v : x) v = float(rng.normal());
        y = x;
        t.rotate(y.data(), pos, false);
        std::vector<float> e = x;
        if (style == RopeSpec::Style::kNeox) {
          engine::rope_neox(e.data(), 1, d, pos, base, 0.125f, factors);
        } else {
          engine::rope_norm(e.data(), 1, d, pos, base, 0.125f, factors);
        }
        // ggml's float angle at position p is off by about p * 6e-8 radians.
        const double tol = 1e-5 + 2e-7 * double(pos);
        for (int j = 0; j < d; ++j) EXPECT_NEAR(y[size_t(j)], e[size_t(j)], tol) << "pos " << pos << " j " << j;
        t.rotate(y.data(), pos, true);
        for (int j = 0; j < d; ++j) EXPECT_NEAR(y[size_t(j)], x[size_t(j)], 2e-6);
      }
    }
  }
}

// Rotating a run of rows by consecutive low-table angles gives each row the bits that rotating
// it alone gives, for both pairings and either direction.
TEST(RopeTable, LowRowsEqualOneRowAtATime) {
  Rng rng(2);
  for (auto style : {RopeSpec::Style::kNeox, RopeSpec::Style::kNorm}) {
    for (int d : {64, 100, 128}) {
      const RopeTable t(d, spec(style, 10000.0f));
      const int n = 7, b0 = 249;
      const size_t stride = size_t(d) + 3;
      std::vector<float> x(stride * n);
      for (auto& v : x) v = float(rng.normal());
      for (bool inverse : {false, true}) {
        std::vector<float> rows = x, one = x;
        t.rotate_low_rows(rows.data(), stride, n, b0, inverse);
        for (int r = 0; r < n; ++r) {
          const float* a = t.low(b0 + r);
          t.rotate_by(one.data() + size_t(r) * stride, a, a + d / 2, inverse);
        }
        EXPECT_EQ(rows, one) << "d " << d << " inverse " << inverse;
      }
      EXPECT_THROW(t.rotate_low_rows(x.data(), stride, 8, 250, false), Error);
    }
  }
}

TEST(Nuq, KMeansFindsClustersAndFollowsWeights) {
  std::vector<WeightedSample> s;
  Rng rng(2);
  for (int i = 0; i < 3000; ++i) s.push_back({float(-0.6 + 0.02 * rng.normal()), 1.0f});
  for (int i = 0; i < 3000; ++i) s.push_back({float(0.5 + 0.02 * rng.normal()), 1.0f});
  auto copy = s;
  const auto two = weighted_kmeans_1d(copy, 2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_NEAR(two[0], -0.6, 0.005);
  EXPECT_NEAR(two[1], 0.5, 0.005);
  // Uniform data, one level: weight on the right half pulls it right.
  std::vector<WeightedSample> u;
  for (int i = 0; i <= 1000; ++i) u.push_back({float(i) / 1000.0f, i > 500 ? 3.0f : 1.0f});
  auto uw = u;
  for (auto& x : u) x.w = 1.0f;
  const auto plain = weighted_kmeans_1d(u, 4), weighted = weighted_kmeans_1d(uw, 4);
  for (size_t j = 0; j < 4; ++j) EXPECT_NEAR(plain[j], (j + 0.5) / 4, 0.01);  // Lloyd on uniform: cell centers
  EXPECT_GT(weighted[1], plain[1]);  // the heavier half gets more of the levels
  EXPECT_EQ(level_midpoints(plain).size(), 3u);
}

TEST(Nuq, QNormMatchesMeanAndDeviation) {
  std::vector<WeightedSample> s;
  Rng rng(3);
  for (int i = 0; i < 20000; ++i) s.push_back({float(0.1 + 0.3 * rng.normal()), 1.0f});
  const std::vector<float> crude = {-0.5f, 0.0f, 0.2f, 0.9f};
  const auto fixed = qnorm_levels(crude, s);
  const auto mids = level_midpoints(fixed);
  // Q-Norm is affine and increasing, so the codes are those of the crude levels.
  double m = 0, q = 0;
  const auto cm = level_midpoints(crude);
  for (const auto& x : s) {
    const double y = fixed[size_t(nearest_level(cm.data(), 3, x.x))];
    m += y;
    q += y * y;
  }
  m /= double(s.size());
  const double sd = std::sqrt(q / double(s.size()) - m * m);
  EXPECT_NEAR(m, 0.1, 0.01);
  EXPECT_NEAR(sd, 0.3, 0.01);
}

// The key-channel sensitivity is the mean, over (query head, visible key) pairs, of the square of
// the query turned back by the key's rotation: the collector's closed form against brute force.
TEST(SampleCollector, KeyWeightsEqualBruteForce) {
  const int d = 16, H = 1, QH = 2, n = 40, W = 9;
  const LayerConfig cfg(H, d, 0, W, spec(RopeSpec::Style::kNeox, 100.0f));
  SampleCollector col({cfg});
  Rng rng(4);
  std::vector<float> k(size_t(n) * d), v(k.size()), q(size_t(n) * QH * d);
  for (auto* a : {&k, &v, &q}) {
    for (auto& x : *a) x = float(rng.normal());
  }
  col.on_append(0, k.data(), v.data(), n, 0);
  std::vector<int64_t> pos(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) pos[size_t(i)] = i;
  col.on_attend(0, q.data(), n, QH, pos.data(), 0.25f);
  const auto samples = col.take();
  const RopeTable t(d, cfg.rope);
  std::vector<double> want(size_t(d), 0.0);
  double pairs = 0;
  for (int i = 0; i < n; ++i) {
    for (int h = 0; h < QH; ++h) {
      for (int p = std::max(0, i - W + 1); p <= i; ++p) {
        std::vector<float> r(q.begin() + (size_t(i) * QH + h) * d, q.begin() + (size_t(i) * QH + h + 1) * d);
        t.rotate(r.data(), p, true);  // R(p)^T q
        for (int c = 0; c < d; ++c) want[size_t(c)] += double(r[size_t(c)]) * r[size_t(c)];
        pairs += 1;
      }
    }
  }
  ASSERT_EQ(samples.size(), 1u);
  for (int c = 0; c < d; ++c) EXPECT_NEAR(samples[0].key_channel_weight[size_t(c)], want[size_t(c)] / pairs, 1e-4);
  // Value weights: each query row's squared attention weights sum to at most 1.
  double total = 0;
  for (double w : samples[0].value_token_weight) total += w;
  EXPECT_GT(total, 0.0);
  EXPECT_LE(total, double(n) * QH + 1e-6);
  // The keys are stored as they were before RoPE.
  std::vector<float> back(k.begin() + 5 * d, k.begin() + 6 * d);
  t.rotate(back.data(), 5, true);
  for (int c = 0; c < d; ++c) EXPECT_NEAR(samples[0].keys[size_t(5 * d + c)], back[size_t(c)], 1e-6);
}

Calibration small_calibration() {
  Calibration c;
  c.spec = "kvquant:bits=2";
  c.model = ModelIdentity{"m", "gemma3", 0x1234, 2, 1, 4};
  c.source = "text";
  c.tokens = 10;
  for (int l = 0; l < 2; ++l) {
    LayerCalibration lc;
    lc.head_dim = 4;
    lc.key_lo = {-1, -2, -3, -4};
    lc.key_hi = {1, 2, 3, 4};
    lc.key_levels = {-0.9f, -0.3f, 0.3f, 0.9f};
    lc.value_levels = {-0.8f, -0.2f, 0.25f, 0.85f};
    c.layers.push_back(lc);
  }
  return c;
}

TEST(CalibrationFile, RoundTripsAndRefusesBadFiles) {
  const std::string path = ::testing::TempDir() + "/calib_test.vqcal";
  const Calibration c = small_calibration();
  save_calibration(path, c);
  const Calibration r = load_calibration(path);
  EXPECT_EQ(r.spec, c.spec);
  EXPECT_EQ(r.model, c.model);
  ASSERT_EQ(r.layers.size(), 2u);
  EXPECT_EQ(r.layers[1].value_levels, c.layers[1].value_levels);
  EXPECT_EQ(r.layers[0].key_hi, c.layers[0].key_hi);
  // Any flipped byte is caught by the checksum.
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  for (size_t at : {size_t(3), size_t(20), bytes.size() / 2, bytes.size() - 1}) {
    std::string bad = bytes;
    bad[at] = char(bad[at] ^ 0x10);
    std::ofstream(path, std::ios::binary) << bad;
    EXPECT_THROW(load_calibration(path), Error) << at;
  }
  // Values no calibration has are refused even under a good checksum.
  for (int which = 0; which < 3; ++which) {
    Calibration b = small_calibration();
    if (which == 0) b.layers[0].key_levels = {0.5f, 0.1f, 0.2f, 0.3f};  // not ascending
    if (which == 1) b.layers[1].key_lo[2] = NAN;
    if (which == 2) b.layers.pop_back();  // fewer layers than the model
    const auto payload = serialize_calibration(b);
    EXPECT_THROW(parse_calibration(payload, "test"), Error) << which;
  }
  std::remove(path.c_str());
}

// RateQuant's probe table and allocation survive a round trip and bind the method; a file for
// another spec or model, damaged, or inconsistent is refused.
TEST(CalibrationFile, RateQuantRoundTripsAndRefusesBadFiles) {
  const Method bare = parse_method("ratequant:avg=2.5");
  std::vector<std::array<std::vector<double>, 2>> probe(3);
  for (int l = 0; l < 3; ++l) {
    probe[size_t(l)] = {std::vector<double>{0.1 * (l + 1), 0.01, 0.001}, std::vector<double>{0.02, 0.01 / (l + 1), 0.005}};
  }
  const ModelIdentity model{"m", "gemma3", 0x1234, 3, 1, 8};
  const Calibration c = ratequant_calibration(bare, model, "text", 64, probe);
  const std::string path = ::testing::TempDir() + "/calib_rq.vqcal";
  save_calibration(path, c);
  const Calibration r = load_calibration(path);
  EXPECT_EQ(r.spec, "ratequant:avg=2.5");
  EXPECT_EQ(r.probe_bits, (std::vector<int>{2, 3, 4}));
  for (size_t l = 0; l < 3; ++l) {
    EXPECT_EQ(r.layers[l].key_bits, c.layers[l].key_bits);
    EXPECT_EQ(r.layers[l].value_bits, c.layers[l].value_bits);
    EXPECT_EQ(r.layers[l].key_probe_kl, c.layers[l].key_probe_kl);
    EXPECT_EQ(r.layers[l].value_probe_kl, c.layers[l].value_probe_kl);
  }
  EXPECT_EQ(calibration_crc32(r), calibration_crc32(c));
  const Method m = bare.with_calibration(std::make_shared<Calibration>(r));
  EXPECT_DOUBLE_EQ(m.bits_per_element(128), 3.5);  // 2.5 bits of code + the scales and zeros
  EXPECT_THROW(parse_method("ratequant:avg=3").with_calibration(std::make_shared<Calibration>(r)), Error);
  // The version-1 format (before RateQuant) is refused by its version.
  {
    std::string bytes;
    {
      std::ifstream in(path, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    bytes[8] = 1;  // the version field follows the 8-byte magic
    std::ofstream(path, std::ios::binary) << bytes;
    try {
      load_calibration(path);
      ADD_FAILURE() << "version 1 accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("version"), std::string::npos) << e.what();
    }
  }
  // Inconsistent payloads under a good checksum.
  for (int which = 0; which < 4; ++which) {
    Calibration b = c;
    if (which == 0) b.layers[1].key_probe_kl.pop_back();        // not one KL per width
    if (which == 1) b.layers[0].value_probe_kl[1] = -1.0f;      // negative KL
    if (which == 2) b.probe_bits = {3, 2, 4};                   // not ascending
    if (which == 3) b.layers[2].key_bits = 0;                   // an allocation with a hole
    EXPECT_THROW(parse_calibration(serialize_calibration(b), "test"), Error) << which;
  }
  std::remove(path.c_str());
}

// The committed seeds of fuzz_calibration are valid payloads of the current file format (a format
// change must regenerate them: VQ_FUZZ_MAKE_SEEDS, see fuzz/README.md), so fuzzing starts deep.
TEST(CalibrationFile, FuzzSeedsParse) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(VQ_SOURCE_DIR) + "/fuzz/corpus/fuzz_calibration")) {
    std::ifstream f(e.path(), std::ios::binary);
    const std::vector<uint8_t> b{std::istreambuf_iterator<char>(f), {}};
    EXPECT_NO_THROW(parse_calibration(b, e.path().string())) << e.path();
    ++n;
  }
  EXPECT_GE(n, 6);
}

}  // namespace
}  // namespace vq::kv
