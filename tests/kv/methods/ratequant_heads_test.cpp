// RateQuant per KV head (unit=head): the units are (layer, side, KV head); the allocation follows
// each head's probe row and meets the budget over all of them; a cache gives each head the codec
// of its width (its own block bytes, query states and accumulators), with KVQuant's datatype of
// that width, and attention over heads of different widths equals the reference; the probe
// compresses one head; the file keeps the widths and refuses damaged ones.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "src/kv/calib/calibrate.h"
#include "src/kv/methods/ratequant/ratequant.h"
#include "tests/kv/calibrated_fixture.h"
#include "tests/kv/codec_harness.h"
#include "tests/kv/methods/ratequant_fixture.h"
#include "veloxquant/kv/cache.h"
#include "veloxquant/kv/calibration.h"

namespace vq::kv::testing {
namespace {

// A per-head calibration of L layers of H KV heads from a probe whose unit (layer, side, head)
// loses steep[(2 l + side) H + h] * 4^-i at width lo + i.
Calibration per_head(const Method& m, int L, int H, int d, const std::vector<double>& steep,
                     const std::vector<std::shared_ptr<const Calibration>>& base_calibs = {}) {
  const size_t W = ratequant_widths(m).size();
  RateProbe probe(static_cast<size_t>(L));
  for (int l = 0; l < L; ++l) {
    for (int s = 0; s < 2; ++s) {
      for (int h = 0; h < H; ++h) {
        for (size_t i = 0; i < W; ++i) {
          probe[size_t(l)][size_t(s)].push_back(steep[size_t((2 * l + s) * H + h)] * std::pow(0.25, double(i)));
        }
      }
    }
  }
  return ratequant_calibration(m, ModelIdentity{"synthetic", "test", 1, L, H, d}, "synthetic probe", 100, probe,
                               base_calibs);
}

// Two layers of two KV heads: layer 0's values of head 1 and layer 1's keys of head 0 are the
// sensitive units.
const std::vector<double> kSteep = {0.1, 0.1, 0.1, 3.0, 2.5, 0.1, 0.1, 0.1};

void expect_attention_equals_reference(const LayerCache& layer, int n_q_heads, double tol) {
  const int d = layer.config().head_dim;
  const auto q = make_data(Data::kGaussian, size_t(2 * n_q_heads), d, 4);
  std::vector<float> out(q.size()), ref(q.size());
  const int64_t pos[2] = {layer.n_tokens() - 2, layer.n_tokens() - 1};
  layer.attend(q.data(), 2, n_q_heads, pos, 0.125f, out.data());
  layer.attend_reference(q.data(), 2, n_q_heads, pos, 0.125f, ref.data());
  for (size_t j = 0; j < out.size(); ++j) ASSERT_NEAR(out[j], ref[j], tol) << j;
}

TEST(Method_ratequant_heads, TheAllocationIsPerKvHead) {
  const Method m = parse_method("ratequant:avg=2.5,unit=head");
  EXPECT_EQ(m.spec(), "ratequant:avg=2.5,unit=head");
  EXPECT_TRUE(ratequant_per_head(m));
  EXPECT_FALSE(ratequant_per_head(parse_method("ratequant:avg=2.5")));
  EXPECT_EQ(ratequant_units(m, 2, 2), 8);
  EXPECT_EQ(ratequant_units(parse_method("ratequant:avg=2.5"), 2, 2), 4);
  const Calibration c = per_head(m, 2, 2, 64, kSteep);
  int total = 0;
  for (const auto& lc : c.layers) {
    EXPECT_EQ(lc.key_bits, 0);
    EXPECT_EQ(lc.value_bits, 0);
    ASSERT_EQ(lc.key_head_bits.size(), 2u);
    ASSERT_EQ(lc.value_head_bits.size(), 2u);
    EXPECT_EQ(lc.key_probe_kl.size(), 6u);  // [head][width]
    for (int h = 0; h < 2; ++h) total += lc.key_head_bits[size_t(h)] + lc.value_head_bits[size_t(h)];
  }
  EXPECT_EQ(total, 20);  // 2.5 x 8 units
  EXPECT_EQ(c.layers[0].value_head_bits, (std::vector<int>{2, 4}));
  EXPECT_EQ(c.layers[1].key_head_bits, (std::vector<int>{4, 2}));
  EXPECT_EQ(c.layers[0].key_head_bits, (std::vector<int>{2, 2}));
  // A per-layer spec takes one probe row per layer and side, not per head.
  EXPECT_THROW(per_head(parse_method("ratequant:avg=2.5"), 2, 2, 64, kSteep), Error);
}

TEST(Method_ratequant_heads, ACacheGivesEachHeadItsWidth) {
  const Method bare = parse_method("ratequant:avg=2.5,unit=head");
  const int d = 64;
  auto c = std::make_shared<Calibration>(per_head(bare, 2, 2, d, kSteep));
  const Method m = bare.with_calibration(c);
  // Bits: the base's formula, averaged over every (layer, head): two 4-bit units of eight.
  const double k2 = parse_method("kivi").keys().key_bits(d), k4 = parse_method("kivi:kbits=4").keys().key_bits(d);
  EXPECT_DOUBLE_EQ(m.keys().key_bits(d), (3 * k2 + k4) / 4);
  EXPECT_DOUBLE_EQ(m.values().value_bits(d), (3 * k2 + k4) / 4);
  KvCache cache(m, {LayerConfig(2, d, 0), LayerConfig(2, d, 1)});
  // Gaussian tokens: KIVI's lane kernels hold the query in 16-bit fixed point (kivi_test.cpp).
  const auto x = make_data(Data::kGaussian, 300 * 2, d, 3);
  for (size_t l = 0; l < 2; ++l) {
    LayerCache& layer = cache.layer(l);
    layer.append(x.data(), x.data(), 300);
    expect_attention_equals_reference(layer, 4, 1e-4);
  }
  EXPECT_GT(cache.layer(0).value_codec(1).block_bytes(), cache.layer(0).value_codec(0).block_bytes());
  EXPECT_GT(cache.layer(1).key_codec(0).block_bytes(), cache.layer(1).key_codec(1).block_bytes());
  EXPECT_EQ(cache.layer(0).key_codec(0).block_bytes(), cache.layer(0).key_codec(1).block_bytes());
  // The estimate counts each head's own blocks: at least what the cache holds in blocks.
  const MemoryUsage mem = cache.memory();
  EXPECT_GE(estimate_kv_bytes(m, {LayerConfig(2, d, 0), LayerConfig(2, d, 1)}, 300, 1),
            mem.block_bytes + mem.window_bytes + mem.sink_bytes);
  // The file keeps the widths (format version 5) and binds the same method.
  const std::string path = ::testing::TempDir() + "/calib_rq_heads.vqcal";
  save_calibration(path, *c);
  const Calibration r = load_calibration(path);
  for (size_t l = 0; l < 2; ++l) {
    EXPECT_EQ(r.layers[l].key_head_bits, c->layers[l].key_head_bits);
    EXPECT_EQ(r.layers[l].value_head_bits, c->layers[l].value_head_bits);
    EXPECT_EQ(r.layers[l].key_probe_kl, c->layers[l].key_probe_kl);
  }
  EXPECT_EQ(calibration_crc32(r), calibration_crc32(*c));
  EXPECT_DOUBLE_EQ(bare.with_calibration(std::make_shared<Calibration>(r)).keys().key_bits(d), m.keys().key_bits(d));
  std::remove(path.c_str());
  // A per-head calibration does not bind a per-layer spec, nor the other way round.
  EXPECT_THROW(parse_method("ratequant:avg=2.5").with_calibration(c), Error);
}

// Over KVQuant each head's codecs are KVQuant's at the head's widths with the datatype learned at
// that width: the same bytes as kvquant:bits=w under that width's calibration, fused paths equal
// to the reference, and attention over the layer's mixed heads equal to the reference.
TEST(Method_ratequant_heads, KvquantHeadsUseTheirWidthsDatatype) {
  const Method bare = parse_method("ratequant:base=kvquant,avg=2.5,unit=head");
  const int L = 2, H = 2, d = 64;
  const auto bases = kvquant_at_each_width(bare, L, d);
  auto c = std::make_shared<Calibration>(per_head(bare, L, H, d, kSteep, bases));
  const Method m = bare.with_calibration(c);
  for (int l = 0; l < L; ++l) {
    const LayerCalibration& lc = c->layers[size_t(l)];
    EXPECT_TRUE(lc.key_levels.empty());
    for (int h = 0; h < H; ++h) {
      const int kw = lc.key_head_bits[size_t(h)], vw = lc.value_head_bits[size_t(h)];
      EXPECT_EQ(lc.key_head_levels[size_t(h)], bases[size_t(kw - 2)]->layers[size_t(l)].key_levels);
      EXPECT_EQ(lc.value_head_levels[size_t(h)], bases[size_t(vw - 2)]->layers[size_t(l)].value_levels);
      CodecContext ctx{d, l, neox(), &lc};
      ctx.kv_head = h;
      const auto x = make_data(Data::kOutliers, 16, d, 40 + uint64_t(l));
      const auto encoded = [&](const auto& codec) {
        std::vector<uint8_t> block(codec->block_bytes());
        codec->encode(x.data(), 0, block.data());
        return block;
      };
      for (int side = 0; side < 2; ++side) {
        const int w = side == 0 ? kw : vw;
        const Method at = parse_method(fmt::format("kvquant:bits={}", w));
        const CodecContext bctx{d, l, neox(), &bases[size_t(w - 2)]->layers[size_t(l)]};
        if (side == 0) {
          EXPECT_EQ(encoded(m.keys().key_codec(ctx)), encoded(at.keys().key_codec(bctx))) << l << " " << h;
        } else {
          EXPECT_EQ(encoded(m.values().value_codec(ctx)), encoded(at.values().value_codec(bctx))) << l << " " << h;
        }
      }
      check_fused_equals_reference(m, ctx, Data::kOutliers, 300 + uint64_t(2 * l + h), 256, 5, 1e-5);
    }
  }
  KvCache cache(m, {LayerConfig(H, d, 0, 0, neox()), LayerConfig(H, d, 1, 0, neox())});
  const auto x = make_data(Data::kOutliers, 200 * H, d, 5);
  for (size_t l = 0; l < 2; ++l) {
    cache.layer(l).append(x.data(), x.data(), 200);
    expect_attention_equals_reference(cache.layer(l), 2 * H, 1e-4);
  }
  // A head's datatypes must be there, and of its width.
  for (int which = 0; which < 2; ++which) {
    auto bad = std::make_shared<Calibration>(*c);
    if (which == 0) bad->layers[1].key_head_levels[0].clear();
    if (which == 1) bad->layers[0].value_head_levels[1].pop_back();
    EXPECT_THROW(bare.with_calibration(bad), Error) << which;
  }
}

// The probe of one head: only that head's keys or values of that layer at the width, fp16 for
// the other heads and layers; attention over the mixed layer (an fp16 head beside a compressed
// one: different query states and accumulators) equals the reference.
TEST(Method_ratequant_heads, ProbeCompressesOneHead) {
  const Method bare = parse_method("ratequant:avg=2.5,unit=head");
  const Method p = ratequant_probe_method(bare, 3, 1, 1, 3, nullptr, 1);
  const int d = 64;
  const Method fp16 = parse_method("fp16"), kivi3 = parse_method("kivi:kbits=3,vbits=3");
  for (int l = 0; l < 3; ++l) {
    for (int h = 0; h < 2; ++h) {
      CodecContext ctx{d, l};
      ctx.kv_head = h;
      EXPECT_EQ(p.keys().key_codec(ctx)->block_bytes(), fp16.keys().key_codec(ctx)->block_bytes());
      EXPECT_EQ(p.values().value_codec(ctx)->block_bytes(),
                (l == 1 && h == 1 ? kivi3 : fp16).values().value_codec(ctx)->block_bytes());
    }
  }
  LayerCache layer(p, LayerConfig(2, d, 1));
  const auto x = make_data(Data::kGaussian, 300 * 2, d, 6);
  layer.append(x.data(), x.data(), 300);
  expect_attention_equals_reference(layer, 4, 1e-4);
  // A per-head spec probes one head; a per-layer spec probes whole layers.
  EXPECT_THROW(ratequant_probe_method(bare, 3, 1, 1, 3), Error);
  EXPECT_THROW(ratequant_probe_method(parse_method("ratequant:avg=2.5"), 3, 1, 1, 3, nullptr, 0), Error);
}

// With one KV head per layer (Gemma 3 270M) a per-head allocation is the per-layer one: the same
// widths from the same probe, and the same cache bytes and attention.
TEST(Method_ratequant_heads, OneKvHeadAllocatesAsPerLayer) {
  const int L = 4, d = 64;
  const std::vector<double> steep = {3, 0.1, 0.2, 2, 1, 0.3, 0.1, 0.5};
  const Method by_layer = parse_method("ratequant:base=kvquant,avg=2.75");
  const Method by_head = parse_method("ratequant:base=kvquant,avg=2.75,unit=head");
  const auto bases = kvquant_at_each_width(by_layer, L, d);
  auto cl = std::make_shared<Calibration>(per_head(by_layer, L, 1, d, steep, bases));
  auto ch = std::make_shared<Calibration>(per_head(by_head, L, 1, d, steep, bases));
  const Method ml = by_layer.with_calibration(cl), mh = by_head.with_calibration(ch);
  EXPECT_DOUBLE_EQ(ml.bits_per_element(d), mh.bits_per_element(d));
  const auto x = make_data(Data::kOutliers, 200, d, 9);
  const auto q = make_data(Data::kGaussian, 4, d, 10);
  for (int l = 0; l < L; ++l) {
    EXPECT_EQ(ch->layers[size_t(l)].key_head_bits, (std::vector<int>{cl->layers[size_t(l)].key_bits}));
    EXPECT_EQ(ch->layers[size_t(l)].value_head_bits, (std::vector<int>{cl->layers[size_t(l)].value_bits}));
    LayerCache a(ml, LayerConfig(1, d, l, 0, neox())), b(mh, LayerConfig(1, d, l, 0, neox()));
    a.append(x.data(), x.data(), 200);
    b.append(x.data(), x.data(), 200);
    std::vector<float> oa(q.size()), ob(q.size());
    const int64_t pos[2] = {198, 199};
    a.attend(q.data(), 2, 2, pos, 0.125f, oa.data());
    b.attend(q.data(), 2, 2, pos, 0.125f, ob.data());
    EXPECT_EQ(oa, ob) << "layer " << l;
  }
}

// With no model to probe, the budget is spread over every head of every layer.
TEST(Method_ratequant_heads, SyntheticCalibrationSpreadsOverTheHeads) {
  for (const char* spec : {"ratequant:avg=2.25,unit=head", "ratequant:base=kvquant,avg=2.75,unit=head"}) {
    const Method bare = parse_method(spec);
    const int L = 3, H = 4, d = 64;
    auto x = make_data(Data::kOutliers, 512 * H, d, 5);
    const auto c = calibrate_on_synthetic(bare, LayerConfig(H, d, 0, 0, neox()), x.data(), x.data(), 512, L, "test");
    int total = 0, lo = 99, hi = 0;
    for (const auto& lc : c->layers) {
      ASSERT_EQ(lc.key_head_bits.size(), size_t(H)) << spec;
      for (int h = 0; h < H; ++h) {
        for (int b : {lc.key_head_bits[size_t(h)], lc.value_head_bits[size_t(h)]}) {
          total += b;
          lo = std::min(lo, b);
          hi = std::max(hi, b);
        }
      }
    }
    EXPECT_EQ(total, ratequant_budget(bare, ratequant_units(bare, L, H), d)) << spec;
    EXPECT_LE(hi - lo, 1) << spec;
    const Method m = bare.with_calibration(c);
    KvCache cache(m, {LayerConfig(H, d, 0, 0, neox()), LayerConfig(H, d, 1, 0, neox()), LayerConfig(H, d, 2, 0, neox())});
    for (size_t l = 0; l < 3; ++l) {
      cache.layer(l).append(x.data(), x.data(), 100);
      expect_attention_equals_reference(cache.layer(l), H, 1e-4);
    }
  }
}

// Damaged per-head fields under a good checksum are refused.
TEST(CalibrationFile, PerHeadWidthsAreChecked) {
  const Calibration c = per_head(parse_method("ratequant:avg=2.5,unit=head"), 2, 2, 64, kSteep);
  EXPECT_NO_THROW(parse_calibration(serialize_calibration(c), "test"));
  for (int which = 0; which < 6; ++which) {
    Calibration b = c;
    if (which == 0) b.layers[1].key_head_bits[0] = 5;                // outside the probe's widths
    if (which == 1) b.layers[0].key_probe_kl.pop_back();             // not one KL per head and width
    if (which == 2) b.layers[0].key_bits = 3;                        // a layer width beside head widths
    if (which == 3) b.layers[1].value_head_levels[0] = {0.5f, 0.1f};  // not ascending
    if (which == 4) b.layers[1].value_head_levels[1] = {-0.5f, 0.5f};  // 2 levels for a 2-bit width
    if (which == 5) b.probe_bits.clear();                            // head widths without their probe
    try {
      parse_calibration(serialize_calibration(b), "test");
      ADD_FAILURE() << which << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kData) << which;
    }
  }
  // A serializer refuses a layer without one width per model KV head.
  Calibration b = c;
  b.layers[0].value_head_bits.pop_back();
  EXPECT_THROW(serialize_calibration(b), Error);
}

}  // namespace
}  // namespace vq::kv::testing
