// RateQuant: the allocation meets its budget exactly and is optimal (against brute force, and
// against water-filling where the Lagrangian meets the budget), gives bits to the units whose
// probe KL falls steeply; the calibrated method's codecs follow the allocation (fused paths equal
// the reference, bits per element are the base's formula averaged), the probe's one-unit method,
// and spec and calibration errors.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "src/core/rng.h"
#include "src/kv/calib/calibrate.h"
#include "src/kv/calib/rate_allocation.h"
#include "src/kv/methods/ratequant/ratequant.h"
#include "src/kv/registry.h"
#include "tests/kv/calibrated_fixture.h"
#include "tests/kv/codec_harness.h"
#include "tests/kv/methods/ratequant_fixture.h"
#include "veloxquant/kv/cache.h"
#include "veloxquant/kv/calibration.h"

namespace vq::kv::testing {
namespace {

using Table = std::vector<std::vector<double>>;

double total_loss(const Table& loss, const std::vector<int>& w, int lo) {
  double s = 0;
  for (size_t u = 0; u < loss.size(); ++u) s += loss[u][size_t(w[u] - lo)];
  return s;
}

int sum(const std::vector<int>& w) {
  int s = 0;
  for (int x : w) s += x;
  return s;
}

// Least summed loss over every allocation meeting `total`, by enumeration.
double brute_force(const Table& loss, int lo, int total) {
  const int U = int(loss.size()), W = int(loss[0].size());
  double best = std::numeric_limits<double>::infinity();
  std::vector<int> w(static_cast<size_t>(U), lo);
  std::function<void(int)> rec = [&](int u) {
    if (u == U) {
      if (sum(w) == total) best = std::min(best, total_loss(loss, w, lo));
      return;
    }
    for (int i = 0; i < W; ++i) {
      w[size_t(u)] = lo + i;
      rec(u + 1);
    }
  };
  rec(0);
  return best;
}

// KL-like curves: falling with bits, random scale and steepness, optionally not convex.
Table random_table(Rng& rng, int units, int widths, bool convex) {
  Table t;
  for (int u = 0; u < units; ++u) {
    const double scale = std::exp(3 * rng.normal()), rate = 0.5 + 2 * rng.uniform();
    std::vector<double> row;
    for (int i = 0; i < widths; ++i) {
      double v = scale * std::exp(-rate * i);
      if (!convex) v *= 0.5 + rng.uniform();
      row.push_back(v);
    }
    t.push_back(row);
  }
  return t;
}

TEST(RateAllocation, MeetsTheBudgetExactlyAndMatchesBruteForce) {
  Rng rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int U = 1 + int(rng.uniform() * 6), W = 1 + int(rng.uniform() * 4), lo = 1 + int(rng.uniform() * 3);
    const Table t = random_table(rng, U, W, trial % 2 == 0);
    const int total = lo * U + int(rng.uniform() * ((W - 1) * U + 1));
    const std::vector<int> w = allocate_bits(t, lo, total);
    ASSERT_EQ(int(w.size()), U);
    ASSERT_EQ(sum(w), total) << "trial " << trial;
    for (int x : w) ASSERT_TRUE(x >= lo && x < lo + W);
    ASSERT_NEAR(total_loss(t, w, lo), brute_force(t, lo, total), 1e-9 * (1 + brute_force(t, lo, total)))
        << "trial " << trial;
  }
}

TEST(RateAllocation, MeetsTheBudgetAtModelSize) {
  Rng rng(8);
  for (int trial = 0; trial < 50; ++trial) {
    const Table t = random_table(rng, 36, 3, false);
    for (int total = 72; total <= 108; total += 1 + trial % 5) {
      ASSERT_EQ(sum(allocate_bits(t, 2, total)), total);
    }
  }
}

TEST(RateAllocation, AgreesWithWaterFillingWhereTheLagrangianMeetsTheBudget) {
  Rng rng(9);
  int compared = 0;
  for (int trial = 0; trial < 100; ++trial) {
    const Table t = random_table(rng, 12, 3, true);
    for (double lambda : {1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0}) {
      const std::vector<int> wf = water_fill(t, 2, lambda);
      const std::vector<int> dp = allocate_bits(t, 2, sum(wf));
      // Both optimal for the budget the water level spends.
      EXPECT_NEAR(total_loss(t, dp, 2), total_loss(t, wf, 2), 1e-9 * (1 + total_loss(t, wf, 2)));
      ++compared;
    }
  }
  EXPECT_EQ(compared, 600);
}

TEST(RateAllocation, SteepUnitsGetTheBits) {
  // Unit 0's KL falls steeply with bits, unit 1's hardly at all, unit 2 in between.
  const Table t = {{1.0, 0.1, 0.01}, {0.011, 0.010, 0.009}, {0.2, 0.05, 0.04}};
  EXPECT_EQ(allocate_bits(t, 2, 7), (std::vector<int>{3, 2, 2}));
  EXPECT_EQ(allocate_bits(t, 2, 8), (std::vector<int>{3, 2, 3}));  // 0.9 + 0.15 beats 0.99
  EXPECT_EQ(allocate_bits(t, 2, 9), (std::vector<int>{4, 2, 3}));
  EXPECT_EQ(allocate_bits(t, 2, 6), (std::vector<int>{2, 2, 2}));
  EXPECT_THROW(allocate_bits(t, 2, 5), Error);
  EXPECT_THROW(allocate_bits(t, 2, 13), Error);
}

// A ratequant calibration of `L` layers from a probe whose unit u loses steep[u] * 4^-i at width
// lo + i (each bit quarters the error, as for a uniform quantizer): larger steep, steeper fall.
// base_calibs: the base's calibration at each width, for a base that learns per width.
Calibration synthetic(const Method& m, int L, int d, const std::vector<double>& steep,
                      const std::vector<std::shared_ptr<const Calibration>>& base_calibs = {}) {
  std::vector<std::array<std::vector<double>, 2>> probe(static_cast<size_t>(L));
  const size_t W = ratequant_widths(m).size();
  for (int l = 0; l < L; ++l) {
    for (int s = 0; s < 2; ++s) {
      for (size_t i = 0; i < W; ++i) probe[size_t(l)][size_t(s)].push_back(steep[size_t(2 * l + s)] * std::pow(0.25, double(i)));
    }
  }
  return ratequant_calibration(m, ModelIdentity{"synthetic", "test", 1, L, 1, d}, "synthetic probe", 100, probe,
                               base_calibs);
}

TEST(Method_ratequant, CalibrationFollowsTheProbe) {
  const Method m = parse_method("ratequant:base=kivi,avg=2.5");
  EXPECT_EQ(m.spec(), "ratequant:avg=2.5");
  // Layer 1's keys and layer 2's values are the sensitive units.
  const Calibration c = synthetic(m, 4, 64, {0.1, 0.1, 3.0, 0.1, 0.1, 2.5, 0.1, 0.1});
  int total = 0;
  for (const auto& l : c.layers) total += l.key_bits + l.value_bits;
  EXPECT_EQ(total, 20);  // 2.5 x 8 units
  EXPECT_EQ(c.layers[1].key_bits, 4);
  EXPECT_EQ(c.layers[2].value_bits, 4);
  EXPECT_EQ(c.layers[0].key_bits, 2);
  EXPECT_EQ(c.layers[3].value_bits, 2);
  EXPECT_EQ(c.probe_bits, (std::vector<int>{2, 3, 4}));
}

TEST(Method_ratequant, CalibratedCodecsFollowTheAllocation) {
  for (const char* spec : {"ratequant:base=kivi,avg=2.75", "ratequant:base=turbo,avg=2.5,lo=1,hi=4"}) {
    const Method bare = parse_method(spec);
    const int d = 128;
    auto c = std::make_shared<Calibration>(synthetic(bare, 4, d, {3, 0.1, 0.2, 2, 1, 0.3, 0.1, 0.5}));
    const Method m = bare.with_calibration(c);
    const std::string base = std::string(spec).find("turbo") != std::string::npos ? "turbo" : "kivi";
    double kb = 0, vb = 0;
    for (int l = 0; l < 4; ++l) {
      const auto& lc = c->layers[size_t(l)];
      const Method at = parse_method(base == "kivi" ? fmt::format("kivi:kbits={},vbits={}", lc.key_bits, lc.value_bits)
                                                    : fmt::format("k=turbo:bits={},v=turbo:bits={}", lc.key_bits, lc.value_bits));
      const CodecContext ctx{d, l};
      // Same codec as the base at the allocated widths: same bytes per block.
      EXPECT_EQ(m.keys().key_codec(ctx)->block_bytes(), at.keys().key_codec(ctx)->block_bytes()) << spec << " layer " << l;
      EXPECT_EQ(m.values().value_codec(ctx)->block_bytes(), at.values().value_codec(ctx)->block_bytes());
      kb += at.keys().key_bits(d) / 4;
      vb += at.values().value_bits(d) / 4;
      // KIVI's 2- and 4-bit lane kernels hold the group-folded query and the weights in 16-bit
      // fixed point (kivi_test.cpp): 1e-3 of |q| |k| for scores, fixed_point_tol for accumulation.
      const bool kivi = base == "kivi";
      for (Data kind : {Data::kGaussian, Data::kOutliers, Data::kHuge}) {
        check_fused_equals_reference(m, ctx, kind, 100 + uint64_t(l), 256, 5, kivi ? 1e-3 : fixed_lane_tol(d),
                                     kivi ? fixed_point_tol(d) : fixed_lane_tol(d));
      }
      check_single_token_encode(m, ctx);
    }
    EXPECT_DOUBLE_EQ(m.keys().key_bits(d), kb) << spec;
    EXPECT_DOUBLE_EQ(m.values().value_bits(d), vb) << spec;
    // Before calibration: the base's formula at avg (both formulas are linear in the width).
    EXPECT_NEAR(bare.bits_per_element(d), m.bits_per_element(d), 1e-12) << spec;
  }
  // kivi at 2.5 bits of code, plus an fp16 scale and zero per 32 elements.
  EXPECT_DOUBLE_EQ(parse_method("ratequant:avg=2.5").bits_per_element(128), 3.5);
}

TEST(Method_ratequant, ACacheUsesItsAllocation) {
  const Method bare = parse_method("ratequant:avg=3");
  auto c = std::make_shared<Calibration>(synthetic(bare, 2, 64, {0.1, 3, 2, 0.1}));
  const Method m = bare.with_calibration(c);
  std::vector<LayerConfig> layout = {LayerConfig(1, 64, 0), LayerConfig(1, 64, 1)};
  KvCache cache(m, layout);
  const auto x = make_data(Data::kGaussian, 300, 64, 3);
  const auto q = make_data(Data::kGaussian, 2, 64, 4);
  for (size_t l = 0; l < 2; ++l) {
    cache.layer(l).append(x.data(), x.data(), 300);
    std::vector<float> out(q.size()), ref(q.size());
    const int64_t pos = 299;
    cache.layer(l).attend(q.data(), 1, 2, &pos, 0.125f, out.data());
    cache.layer(l).attend_reference(q.data(), 1, 2, &pos, 0.125f, ref.data());
    for (size_t j = 0; j < out.size(); ++j) EXPECT_NEAR(out[j], ref[j], 1e-4);
  }
  // The layer-0 value codec is 4-bit KIVI, layer 1's keys are 4-bit: their blocks are larger.
  EXPECT_EQ(c->layers[0].value_bits, 4);
  EXPECT_EQ(c->layers[1].key_bits, 4);
  EXPECT_GT(cache.layer(0).value_codec().block_bytes(), cache.layer(1).value_codec().block_bytes());
}

TEST(Method_ratequant, ProbeCompressesOneUnit) {
  const Method bare = parse_method("ratequant:avg=2.5");
  const Method p = ratequant_probe_method(bare, 3, 1, 1, 3);
  const int d = 64;
  const auto fp16 = parse_method("fp16");
  const auto kivi3 = parse_method("kivi:kbits=3,vbits=3");
  for (int l = 0; l < 3; ++l) {
    const CodecContext ctx{d, l};
    EXPECT_EQ(p.keys().key_codec(ctx)->block_bytes(), fp16.keys().key_codec(ctx)->block_bytes());
    EXPECT_EQ(p.values().value_codec(ctx)->block_bytes(),
              (l == 1 ? kivi3 : fp16).values().value_codec(ctx)->block_bytes());
  }
  EXPECT_THROW(ratequant_probe_method(bare, 3, 3, 0, 3), Error);
  EXPECT_THROW(ratequant_probe_method(bare, 3, 0, 0, 5), Error);
}

// Over KVQuant, each layer's codecs are KVQuant's at the allocated widths with the datatype learned
// at that width: the same bytes and the same decode as kvquant:bits=w under the base calibration
// of that width, fused paths equal to the reference, and the bits the formula's mean.
TEST(Method_ratequant, KvquantBaseUsesEachWidthsDatatype) {
  const Method bare = parse_method("ratequant:base=kvquant,avg=2.5");
  EXPECT_TRUE(ratequant_learns_per_width(bare));
  EXPECT_FALSE(ratequant_learns_per_width(parse_method("ratequant:avg=2.5")));
  EXPECT_EQ(ratequant_base_method(bare, 2).spec(), "kvquant:bits=2");
  const int L = 4, d = 128;
  const auto bases = kvquant_at_each_width(bare, L, d);
  auto c = std::make_shared<Calibration>(synthetic(bare, L, d, {3, 0.1, 0.2, 2, 1, 0.3, 0.1, 0.5}, bases));
  const Method m = bare.with_calibration(c);
  double kb = 0, vb = 0;
  std::vector<int> seen(3, 0);
  for (int l = 0; l < L; ++l) {
    const auto& lc = c->layers[size_t(l)];
    ++seen[size_t(lc.key_bits - 2)];
    ++seen[size_t(lc.value_bits - 2)];
    EXPECT_EQ(lc.key_levels, bases[size_t(lc.key_bits - 2)]->layers[size_t(l)].key_levels);
    EXPECT_EQ(lc.value_levels, bases[size_t(lc.value_bits - 2)]->layers[size_t(l)].value_levels);
    EXPECT_EQ(lc.key_lo, bases[0]->layers[size_t(l)].key_lo);
    const CodecContext ctx{d, l, neox(), &lc};
    for (int side = 0; side < 2; ++side) {
      const int w = side == 0 ? lc.key_bits : lc.value_bits;
      const Calibration& b = *bases[size_t(w - 2)];
      const Method at = parse_method(fmt::format("kvquant:bits={}", w));
      const CodecContext bctx{d, l, neox(), &b.layers[size_t(l)]};
      // The same codec: the same bytes for the same tokens.
      const auto x = make_data(Data::kOutliers, 16, d, 40 + uint64_t(l));
      const auto encoded = [&](const auto& codec) {
        std::vector<uint8_t> block(codec->block_bytes());
        codec->encode(x.data(), 0, block.data());
        return block;
      };
      std::vector<uint8_t> mine, theirs;
      if (side == 0) {
        mine = encoded(m.keys().key_codec(ctx));
        theirs = encoded(at.keys().key_codec(bctx));
        kb += at.keys().key_bits(d) / L;
      } else {
        mine = encoded(m.values().value_codec(ctx));
        theirs = encoded(at.values().value_codec(bctx));
        vb += at.values().value_bits(d) / L;
      }
      EXPECT_EQ(mine, theirs) << "layer " << l << " side " << side;
    }
    for (Data kind : {Data::kGaussian, Data::kOutliers, Data::kHuge}) {
      check_fused_equals_reference(m, ctx, kind, 300 + uint64_t(l), 256, 5, 1e-5);
    }
    check_single_token_encode(m, ctx);
  }
  EXPECT_GT(seen[0], 0);
  EXPECT_GT(seen[1] + seen[2], 0);
  EXPECT_DOUBLE_EQ(m.keys().key_bits(d), kb);
  EXPECT_DOUBLE_EQ(m.values().value_bits(d), vb);
  // A KVQuant allocation needs the datatypes: a file without them, or with another width's, is refused.
  for (int which = 0; which < 2; ++which) {
    auto bad = std::make_shared<Calibration>(*c);
    if (which == 0) bad->layers[1].key_levels.clear();
    if (which == 1) bad->layers[2].value_levels.push_back(bad->layers[2].value_levels.back() + 0.5f);
    try {
      bare.with_calibration(bad);
      ADD_FAILURE() << which << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kData) << which;
    }
  }
  // The allocation needs one base calibration per width, each of its own width.
  EXPECT_THROW(synthetic(bare, L, d, {1, 1, 1, 1, 1, 1, 1, 1}), Error);
  EXPECT_THROW(synthetic(bare, L, d, {1, 1, 1, 1, 1, 1, 1, 1}, {bases[1], bases[1], bases[2]}), Error);
}

TEST(Method_ratequant, KvquantProbeRunsEachWidthWithItsDatatype) {
  const Method bare = parse_method("ratequant:base=kvquant,avg=3");
  const int L = 3, d = 64;
  const auto bases = kvquant_at_each_width(bare, L, d);
  const Method p = ratequant_probe_method(bare, L, 1, 0, 4, bases[2]);
  ASSERT_NE(p.calibration(), nullptr);
  const auto fp16 = parse_method("fp16");
  const auto kv4 = parse_method("kvquant:bits=4");
  for (int l = 0; l < L; ++l) {
    const CodecContext ctx{d, l, neox(), &p.calibration()->layers[size_t(l)]};
    EXPECT_EQ(p.keys().key_codec(ctx)->block_bytes(), (l == 1 ? kv4 : fp16).keys().key_codec(ctx)->block_bytes());
    EXPECT_EQ(p.values().value_codec(ctx)->block_bytes(), fp16.values().value_codec(ctx)->block_bytes());
  }
  // Without its width's calibration, or with another width's, the probe is refused.
  EXPECT_THROW(ratequant_probe_method(bare, L, 1, 0, 4), Error);
  EXPECT_THROW(ratequant_probe_method(bare, L, 1, 0, 4, bases[0]), Error);
}

// Benchmarks on synthetic data have no model to probe: the budget is spread evenly, keys and
// values alternating, and a KVQuant base gets its datatypes learned on the same data.
TEST(Method_ratequant, SyntheticCalibrationSpreadsTheBudget) {
  for (const char* spec : {"ratequant:avg=2.5", "ratequant:base=kvquant,avg=2.25", "ratequant:base=turbo,avg=3.75,lo=1",
                           "ratequant:base=kvquant,avg=3,ctx=1024,residual=16"}) {
    const Method bare = parse_method(spec);
    const int L = 4, d = 64;
    auto x = make_data(Data::kOutliers, 512, d, 5);
    const auto c = calibrate_on_synthetic(bare, LayerConfig(1, d, 0, 0, neox()), x.data(), x.data(), 512, L, "test");
    ASSERT_EQ(int(c->layers.size()), L) << spec;
    int total = 0, lo = 99, hi = 0, keys = 0;
    for (const auto& lc : c->layers) {
      total += lc.key_bits + lc.value_bits;
      keys += lc.key_bits;
      lo = std::min({lo, lc.key_bits, lc.value_bits});
      hi = std::max({hi, lc.key_bits, lc.value_bits});
    }
    EXPECT_EQ(total, ratequant_budget(bare, 2 * L, d)) << spec;
    EXPECT_LE(hi - lo, 1) << spec;
    EXPECT_LE(std::abs(2 * keys - total), 1) << spec;  // both sides share the extra bits
    const Method m = bare.with_calibration(c);
    const CodecContext ctx{d, 1, neox(), &c->layers[1]};
    check_fused_equals_reference(m, ctx, Data::kGaussian, 9, 128, 5, 1e-3, fixed_lane_tol(d));
  }
}

TEST(Method_ratequant, SpecAndBudgetErrors) {
  for (const char* bad : {"ratequant:avg=5", "ratequant:avg=1.5", "ratequant:lo=4,hi=2", "ratequant:base=kvquant,lo=1,avg=2",
                          "ratequant:base=turbo,lo=0", "ratequant:lo=1,avg=2", "k=ratequant,v=fp16", "k=fp16,v=ratequant",
                          "ratequant:sink=1", "ratequant:base=kvquant,residual=-2", "ratequant:base=kvquant,sink=70000"}) {
    try {
      parse_method(bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUsage) << bad;
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << bad;
    }
  }
  const Method m = parse_method("ratequant:avg=2.3");
  EXPECT_THROW(ratequant_budget(m, 36), Error);  // 82.8 bits
  EXPECT_EQ(ratequant_budget(m, 10), 23);
  EXPECT_EQ(ratequant_budget(parse_method("ratequant:avg=2.5"), 36), 90);
  // avg to four decimals: 77/36 written as 2.1389 is 77 bits over 36 units; 2.139 is not.
  EXPECT_EQ(ratequant_budget(parse_method("ratequant:base=kvquant,avg=2.1389"), 36), 77);
  EXPECT_THROW(ratequant_budget(parse_method("ratequant:base=kvquant,avg=2.139"), 36), Error);
  // Codecs without an allocation are refused, not guessed.
  EXPECT_THROW(m.keys().key_codec(CodecContext{64, 0}), Error);
}

// With ctx set, avg is the bits per element everything counted: the widths sum to the largest
// total whose bits, with the base's fp16 sinks and window as their share of ctx, stay within avg;
// a longer window leaves fewer bits for the codes.
TEST(Method_ratequant, CountedBudgetPaysForTheFp16Tokens) {
  const int L = 18, d = 256, U = 2 * L;
  const auto counted_at = [&](const Method& bare, int total) {
    // An allocation with `total` widths; every base's bits rise one step a width on both sides,
    // so any allocation of that total costs the same.
    const std::vector<int> widths = ratequant_widths(bare);
    std::vector<int> alloc(static_cast<size_t>(U), widths.front());
    for (int extra = total - widths.front() * U, u = 0; extra > 0; u = (u + 1) % U) {
      if (alloc[size_t(u)] < widths.back()) {
        ++alloc[size_t(u)];
        --extra;
      }
    }
    double bits = 0;
    for (int u = 0; u < U; ++u) {
      const Method at = ratequant_base_method(bare, alloc[size_t(u)]);
      bits += u % 2 == 0 ? at.keys().key_bits(d) : at.values().value_bits(d);
    }
    return bits_with_fp16_tokens(bits / U, ratequant_base_method(bare, widths.front()).fp16_tokens(), 2048);
  };
  for (const char* spec : {"ratequant:base=kvquant,avg=2.5,ctx=2048", "ratequant:base=kvquant,avg=2.5,ctx=2048,sink=4",
                           "ratequant:base=kvquant,avg=3.5,ctx=2048,residual=128", "ratequant:avg=4,ctx=2048",
                           "ratequant:base=turbo,avg=3,ctx=2048,lo=1,sink=4,residual=64"}) {
    const Method bare = parse_method(spec);
    const int total = ratequant_budget(bare, U, d);
    const double avg = std::stod(std::string(spec).substr(std::string(spec).find("avg=") + 4));
    EXPECT_LE(counted_at(bare, total), avg + 1e-9) << spec;
    if (total < ratequant_widths(bare).back() * U) {
      EXPECT_GT(counted_at(bare, total + 1), avg) << spec;
    }
  }
  // KVQuant's one sink at 2048 tokens: 76 widths over 36 units is 2.477 bits, 77 would be 2.505.
  EXPECT_EQ(ratequant_budget(parse_method("ratequant:base=kvquant,avg=2.5,ctx=2048"), U, d), 76);
  // The window is the base's and is paid from the same budget.
  const Method windowed = parse_method("ratequant:base=kvquant,avg=3.5,ctx=2048,residual=128");
  EXPECT_EQ(windowed.fp16_tokens(), 129);
  EXPECT_EQ(ratequant_base_method(windowed, 2).spec(), "kvquant:bits=2,residual=128");
  EXPECT_LT(ratequant_budget(windowed, U, d),
            ratequant_budget(parse_method("ratequant:base=kvquant,avg=3.5,ctx=2048"), U, d));
  // Without a calibration the bits are the base's at the width the budget allows.
  EXPECT_NEAR(parse_method("ratequant:base=kvquant,avg=2.5,ctx=2048").bits_counted(d, 2048), 2.5, 1e-9);
  // A budget below every unit at lo, and one without the head size, are refused.
  EXPECT_THROW(ratequant_budget(parse_method("ratequant:base=kvquant,avg=2.3,ctx=2048"), U, d), Error);
  EXPECT_THROW(ratequant_budget(parse_method("ratequant:base=kvquant,avg=2.5,ctx=2048"), U), Error);
}

// A counted budget's calibration holds its allocation to it, on a real (synthetic) calibration
// with each width's datatypes: the codecs follow it, and its bits everything counted are within avg.
TEST(Method_ratequant, CountedBudgetCalibrates) {
  const Method bare = parse_method("ratequant:base=kvquant,avg=4.5,ctx=512,residual=32");
  const int L = 4, d = 64;
  const auto bases = kvquant_at_each_width(bare, L, d);
  const Calibration c = synthetic(bare, L, d, {0.1, 0.1, 3.0, 0.1, 0.1, 2.5, 0.1, 0.1}, bases);
  int total = 0;
  for (const auto& l : c.layers) total += l.key_bits + l.value_bits;
  EXPECT_EQ(total, ratequant_budget(bare, 2 * L, d));
  const Method m = bare.with_calibration(std::make_shared<Calibration>(c));
  EXPECT_LE(m.bits_counted(d, 512), 4.5 + 1e-9);
  EXPECT_EQ(m.fp16_tokens(), 33);
  auto bad = std::make_shared<Calibration>(c);
  bad->layers[0].key_bits += bad->layers[0].key_bits < 4 ? 1 : -1;
  bad->layers[0].key_levels = bases[size_t(bad->layers[0].key_bits - 2)]->layers[0].key_levels;
  EXPECT_THROW(bare.with_calibration(bad), Error);
}

TEST(Method_ratequant, RefusesAnAllocationThatMissesItsBudget) {
  const Method bare = parse_method("ratequant:avg=2.5");
  const Calibration good = synthetic(bare, 2, 64, {1, 2, 3, 4});
  EXPECT_NO_THROW(bare.with_calibration(std::make_shared<Calibration>(good)));
  for (int which = 0; which < 4; ++which) {
    auto c = std::make_shared<Calibration>(good);
    if (which == 0) c->layers[0].key_bits += c->layers[0].key_bits < 4 ? 1 : -1;  // budget missed
    if (which == 1) c->layers[1].value_bits = 5;                                  // outside [lo, hi]
    if (which == 2) c->probe_bits = {2, 3};                                       // another probe
    if (which == 3) c->layers[1].key_probe_kl.pop_back();
    try {
      bare.with_calibration(c);
      ADD_FAILURE() << which << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kData) << which;
    }
  }
  // A calibration made for another avg is refused by its spec.
  EXPECT_THROW(parse_method("ratequant:avg=3").with_calibration(std::make_shared<Calibration>(good)), Error);
}

}  // namespace
}  // namespace vq::kv::testing
