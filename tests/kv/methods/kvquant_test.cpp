// KVQuant: fused paths equal the plain reference at every bit width, with and without outliers,
// under RoPE; keys are stored before RoPE (the rotation comes back exactly); outliers are kept
// exactly; bits per element follow the row layout; the codec refuses to run uncalibrated.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "src/core/rng.h"
#include "src/kv/calib/calibrate.h"
#include "src/kv/kernels/lut_kernels.h"
#include "src/kv/methods/kvquant/kvquant_rows.h"
#include "src/kv/rope_table.h"
#include "tests/kv/calibrated_fixture.h"
#include "tests/kv/codec_harness.h"
#include "veloxquant/error.h"
#include "veloxquant/kv/cache.h"
#include "veloxquant/kv/calibration.h"

namespace vq::kv::testing {
namespace {

Calibrated calibrated(const std::string& spec, int d, RopeSpec rope = neox()) {
  return calibrated_on_synthetic(spec, d, 512, rope);
}

TEST(Method_kvquant, FusedEqualsReference) {
  for (const char* spec : {"kvquant", "kvquant:bits=2", "kvquant:bits=4", "kvquant:outliers=0", "kvquant:bits=2,outliers=0.05"}) {
    check_calibrated_codec(spec, {64, 100, 128, 256}, 1000, 512);
  }
}

// The bit-plane lookups that decode keys and values give, channel by channel, the scalar
// formula on plane_code's codes: every width the planes allow, channel counts with and without a
// tail, on every target this CPU runs. (The codec's reference decodes with these same
// kernels, so FusedEqualsReference alone would not see a wrong code.)
void check_plane_lookups() {
  Rng rng(17);
  for (int bits = 1; bits <= 4; ++bits) {
    for (int n : {8, 16, 64, 100, 128, 136, 1096}) {  // 1096: past the 128 code words made at once
      std::vector<uint8_t> codes(static_cast<size_t>(n)), planes(size_t(bits) * plane_bytes(n));
      for (auto& c : codes) c = uint8_t(rng.next_u64() % (1u << bits));
      pack_planes(codes.data(), n, bits, planes.data());
      std::vector<float> levels(size_t(1) << bits), base(static_cast<size_t>(n)), scale(static_cast<size_t>(n));
      for (auto& x : levels) x = float(rng.normal());
      for (auto& x : base) x = float(rng.normal());
      for (auto& x : scale) x = float(rng.normal());
      std::vector<float> ch(static_cast<size_t>(n)), one(static_cast<size_t>(n));
      lut_affine_planes_channels(planes.data(), n, bits, levels.data(), base.data(), scale.data(), ch.data());
      lut_affine_planes(planes.data(), n, bits, levels.data(), 0.25f, 1.5f, one.data());
      // Several rows of different codes in one call (at a stride wider than a row) give each
      // row's bits.
      const int rows = 3;
      const size_t in_stride = planes.size() + 5, out_stride = size_t(n) + 3;
      std::vector<uint8_t> many(in_stride * rows), row_codes(static_cast<size_t>(n));
      for (int r = 0; r < rows; ++r) {
        for (auto& c : row_codes) c = uint8_t(rng.next_u64() % (1u << bits));
        pack_planes(row_codes.data(), n, bits, many.data() + r * in_stride);
      }
      const float zeros[rows] = {0.25f, -1.0f, 3.0f}, scales[rows] = {1.5f, 0.5f, -2.0f};
      std::vector<float> ch_rows(out_stride * rows), one_rows(out_stride * rows), expect(static_cast<size_t>(n));
      lut_affine_planes_channels_rows(many.data(), in_stride, rows, n, bits, levels.data(), base.data(), scale.data(),
                                      ch_rows.data(), out_stride);
      lut_affine_planes_rows(many.data(), in_stride, rows, n, bits, levels.data(), zeros, scales, one_rows.data(),
                             out_stride);
      for (int r = 0; r < rows; ++r) {
        const uint8_t* pr = many.data() + r * in_stride;
        lut_affine_planes_channels(pr, n, bits, levels.data(), base.data(), scale.data(), expect.data());
        EXPECT_TRUE(std::equal(expect.begin(), expect.end(), ch_rows.begin() + ptrdiff_t(r * out_stride))) << "row " << r;
        lut_affine_planes(pr, n, bits, levels.data(), zeros[r], scales[r], expect.data());
        EXPECT_TRUE(std::equal(expect.begin(), expect.end(), one_rows.begin() + ptrdiff_t(r * out_stride))) << "row " << r;
      }
      for (int c = 0; c < n; ++c) {
        ASSERT_EQ(plane_code(planes.data(), n, bits, c), codes[size_t(c)]);
        const float l = levels[codes[size_t(c)]];
        EXPECT_EQ(ch[size_t(c)], base[size_t(c)] + scale[size_t(c)] * l) << "bits " << bits << " n " << n << " c " << c;
        EXPECT_EQ(one[size_t(c)], 0.25f + 1.5f * l) << "bits " << bits << " n " << n << " c " << c;
      }
    }
  }
}

// Every target this CPU runs (the AVX2 word builder and mask loads included on an AVX-512 machine).
TEST(Method_kvquant, PlaneLookupsDecodeEveryCode) {
  check_plane_lookups();
  EXPECT_GE(for_each_supported_target(check_plane_lookups), 2);
}

TEST(Method_kvquant, BitsPerElementCountEverything) {
  // d = 256, 3 bits, 1%: S = round(2.56) = 3 slots of fp16 + u8 index; keys add a count byte,
  // values an fp16 scale and zero.
  const Method m = parse_method("kvquant");
  EXPECT_DOUBLE_EQ(m.keys().key_bits(256), (96.0 + 1 + 3 * 3) * 8 / 256);
  EXPECT_DOUBLE_EQ(m.values().value_bits(256), (4.0 + 96 + 3 * 3) * 8 / 256);
  EXPECT_DOUBLE_EQ(parse_method("kvquant:outliers=0").keys().key_bits(128), 3.0);
  EXPECT_DOUBLE_EQ(parse_method("kvquant:bits=2,outliers=0").values().value_bits(128), 2.25);
  EXPECT_EQ(m.sink_tokens(), 1);
  // The residual window is KIVI's: the newest tokens stay fp16, counted by the cache, not here.
  const Method w = parse_method("kvquant:residual=128");
  EXPECT_EQ(w.keys().key_keep(), 128);
  EXPECT_EQ(w.values().value_keep(), 128);
  EXPECT_EQ(m.keys().key_keep(), 0);
  EXPECT_DOUBLE_EQ(w.keys().key_bits(256), m.keys().key_bits(256));
}

TEST(Method_kvquant, RefusesWithoutCalibration) {
  const Method m = parse_method("kvquant");
  EXPECT_TRUE(m.needs_calibration());
  EXPECT_THROW(m.keys().key_codec(CodecContext{128, 0}), Error);
  // A calibration made for another spec is refused.
  const Calibrated c = calibrated("kvquant:bits=4", 64);
  EXPECT_THROW(parse_method("kvquant:bits=3").with_calibration(c.calib), Error);
  // One with the wrong number of levels for the spec (a hostile file) too.
  EXPECT_THROW(parse_method("kvquant:bits=3").keys().key_codec(c.ctx()), Error);
}

// Keys go in after RoPE, are stored before it, and come back rotated to their position: the
// round-trip error is the quantizer's, the same as with no rotation at all.
double key_round_trip(RopeSpec rope, int64_t pos0, int64_t decode_pos0) {
  const int d = 128;
  const Calibrated c = calibrated("kvquant:bits=4,outliers=0", d, rope);
  CodecContext ctx = c.ctx();
  ctx.rope = rope;
  const auto kc = c.method.keys().key_codec(ctx);
  auto pre = make_data(Data::kOutliers, 64, d, 11);
  auto x = pre;
  const RopeTable table(d, rope);
  for (int t = 0; t < 64; ++t) table.rotate(x.data() + size_t(t) * d, pos0 + t, false);
  double num = 0, den = 0;
  for (int b = 0; b < 4; ++b) {
    std::vector<uint8_t> block(kc->block_bytes());
    kc->encode(x.data() + size_t(b) * 16 * d, pos0 + 16 * b, block.data());
    std::vector<float> y(size_t(16) * d);
    kc->decode(block.data(), decode_pos0 + 16 * b, y.data());
    for (size_t i = 0; i < y.size(); ++i) {
      num += std::pow(double(x[size_t(b) * 16 * d + i]) - y[i], 2);
      den += std::pow(double(x[size_t(b) * 16 * d + i]), 2);
    }
  }
  return num / den;
}

TEST(Method_kvquant, PreRopeRoundTrip) {
  const double plain = key_round_trip(RopeSpec{}, 0, 0);
  const double rotated = key_round_trip(neox(), 4000, 4000);
  EXPECT_LT(plain, 0.05);
  EXPECT_NEAR(rotated / plain, 1.0, 0.05);
  // Decoded at other positions, the keys come back turned by other angles.
  EXPECT_GT(key_round_trip(neox(), 4000, 4001), 5 * plain);
}

// The lane codecs (head sizes in whole groups of 32; NeoX pairs in whole groups per half) score
// and accumulate as their reference on every target this CPU runs: both RoPE pairings and none,
// every width, 600 tokens from position 17 (blocks that start in one segment of 256 positions and
// end in the next, three segments), five query rows (a group of four and one alone), with and
// without outliers. The row codecs serve d = 96 under NeoX.
TEST(Method_kvquant, LanesEqualReferenceOnEveryTarget) {
  RopeSpec norm;
  norm.style = RopeSpec::Style::kNorm;
  norm.base = 500000.0f;
  const std::vector<std::pair<RopeSpec, std::vector<int>>> cases{{neox(), {64, 128, 96}}, {norm, {32, 128}}, {RopeSpec{}, {96}}};
  for (const auto& [rope, dims] : cases) {
    for (const int d : dims) {
      for (const char* spec : {"kvquant", "kvquant:bits=2", "kvquant:bits=4,outliers=0.05", "kvquant:outliers=0"}) {
        SCOPED_TRACE(std::string(spec) + " d=" + std::to_string(d) + " style=" + std::to_string(int(rope.style)));
        const Calibrated c = calibrated(spec, d, rope);
        CodecContext ctx = c.ctx();
        ctx.rope = rope;
        const int targets = for_each_supported_target([&] {
          check_fused_equals_reference(c.method, ctx, Data::kOutliers, 77 + uint64_t(d), 600, 5, 1e-5);
        });
        EXPECT_GE(targets, 2);
      }
    }
  }
}

void check_many_rows(RopeSpec rope, int d, const char* spec) {
  SCOPED_TRACE(std::string(spec) + " d=" + std::to_string(d));
  const Calibrated c = calibrated(spec, d, rope);
  CodecContext ctx = c.ctx();
  ctx.rope = std::move(rope);
  const auto kc = c.method.keys().key_codec(ctx);
  const int64_t pos0 = 17;
  const auto kx = make_data(Data::kOutliers, 600, d, 5);
  const Encoded ke = encode_run(*kc, kx, pos0);
  const int n_q = 9;
  const size_t S = kc->query_state_floats();
  const auto q = make_data(Data::kGaussian, size_t(n_q), d, 6);
  std::vector<float> states(size_t(n_q) * S);
  for (int r = 0; r < n_q; ++r) kc->prepare_query(q.data() + size_t(r) * d, states.data() + size_t(r) * S);
  const int targets = for_each_supported_target([&] {
    for (const auto& range : std::vector<std::pair<int64_t, int64_t>>{{0, ke.tokens}, {3, ke.tokens - 5}, {40, 41}}) {
      const int64_t i0 = range.first, i1 = range.second;
      const size_t stride = size_t(ke.tokens) + 2;
      std::vector<float> all(size_t(n_q) * stride, -1.0f), fours(size_t(n_q) * stride, -1.0f);
      kc->scores(states.data(), n_q, ke.bytes.data(), pos0, i0, i1, all.data(), stride);
      for (int r0 = 0; r0 < n_q; r0 += 4) {
        kc->scores(states.data() + size_t(r0) * S, std::min(4, n_q - r0), ke.bytes.data(), pos0, i0, i1,
                   fours.data() + size_t(r0) * stride, stride);
      }
      ASSERT_EQ(std::memcmp(all.data(), fours.data(), all.size() * sizeof(float)), 0) << i0 << ".." << i1;
    }
  });
  EXPECT_GE(targets, 2);
}

// With more than four query rows (prefill) the key kernel decodes each block once and scores every
// group of four rows from it: the same bits as scoring the rows four at a time, on every target,
// both RoPE pairings, with and without outliers, over ranges that start and end inside blocks.
TEST(Method_kvquant, ManyRowsScoreAsFourAtATime) {
  RopeSpec norm;
  norm.style = RopeSpec::Style::kNorm;
  norm.base = 500000.0f;
  for (const char* spec : {"kvquant", "kvquant:bits=2", "kvquant:bits=4,outliers=0.05"}) {
    check_many_rows(neox(), 256, spec);  // Gemma 3's heads: 128 pairs for the outliers' query lookups
    check_many_rows(neox(), 128, spec);
    check_many_rows(neox(), 64, spec);
    check_many_rows(norm, 64, spec);
  }
}

// Dense-and-sparse: the values outside the thresholds come back as their dense decode plus their
// sparse difference, to fp16's precision on that difference (a relative 2^-11), in the lane
// layout (d = 128) and the row layout (d = 100).
// A value's outliers are the channels a stable sort by value puts at its ends (split_token, the
// calibration's form): quantize_value finds them without the sort. Values from a set of 5, so that
// ties are common, and from a normal, at slot counts from 1 to d/2.
TEST(Method_kvquant, ValueOutliersAreTheSortedEnds) {
  Rng rng(23);
  const kvquant::Datatype type({-1.0f, -0.5f, 0.0f, 0.5f, 1.0f});
  for (int d : {2, 3, 8, 64, 128}) {
    for (int S : {1, 2, 3, d / 2}) {
      if (S < 1 || S > d / 2) continue;
      for (int trial = 0; trial < 200; ++trial) {
        std::vector<float> x(static_cast<size_t>(d));
        for (auto& v : x) v = trial % 2 ? float(rng.normal()) : float(int(rng.uniform() * 5) - 2);
        std::vector<int> order;
        const kvquant::TokenSplit sp = kvquant::split_token(x.data(), d, S, &order);
        std::vector<int> want;
        for (int j = 0; j < sp.n_low; ++j) want.push_back(order[size_t(j)]);
        for (int j = 0; j < S - sp.n_low; ++j) want.push_back(order[size_t(d - 1 - j)]);
        std::sort(want.begin(), want.end());
        uint16_t scale = 0, zero = 0;
        std::vector<uint8_t> codes(static_cast<size_t>(d));
        std::vector<kvquant::SparseSlot> slots(static_cast<size_t>(S));
        kvquant::quantize_value(x.data(), d, S, type, &scale, &zero, codes.data(), slots.data());
        EXPECT_EQ(scale, kvquant::to_f16(0.5f * (sp.hi - sp.lo))) << "d " << d << " S " << S << " trial " << trial;
        EXPECT_EQ(zero, kvquant::to_f16(0.5f * (sp.hi + sp.lo))) << "d " << d << " S " << S << " trial " << trial;
        for (int i = 0; i < S; ++i) {
          ASSERT_EQ(slots[size_t(i)].channel, want[size_t(i)]) << "d " << d << " S " << S << " trial " << trial;
        }
      }
    }
  }
}

TEST(Method_kvquant, OutliersComeBackToHalfPrecision) {
  for (const int d : {128, 100}) {
    SCOPED_TRACE(d);
    RopeSpec none;
    const Calibrated c = calibrated("kvquant:bits=2,outliers=0.02", d, none);
    CodecContext ctx = c.ctx();
    ctx.rope = none;
    const auto kc = c.method.keys().key_codec(ctx);
    const auto vc = c.method.values().value_codec(ctx);
    auto x = make_data(Data::kGaussian, 16, d, 12);
    x[5] = 300.0f;       // far outside channel 5's calibrated range
    x[d + 9] = -250.0f;  // token 1, channel 9
    std::vector<uint8_t> kb(kc->block_bytes()), vb(vc->block_bytes());
    kc->encode(x.data(), 0, kb.data());
    vc->encode(x.data(), 0, vb.data());
    std::vector<float> ky(x.size()), vy(x.size());
    kc->decode(kb.data(), 0, ky.data());
    vc->decode(vb.data(), 0, vy.data());
    const float tol = 300.0f / 1024;
    EXPECT_NEAR(ky[5], 300.0f, tol);
    EXPECT_NEAR(ky[size_t(d) + 9], -250.0f, tol);
    EXPECT_NEAR(vy[5], 300.0f, tol);
    EXPECT_NEAR(vy[size_t(d) + 9], -250.0f, tol);
    // And the rest of those tokens is not ruined by them.
    double err = 0, den = 0;
    for (int j = 0; j < d; ++j) {
      if (j == 5) continue;
      err += std::pow(double(vy[size_t(j)]) - x[size_t(j)], 2);
      den += double(x[size_t(j)]) * x[size_t(j)];
    }
    EXPECT_LT(err / den, 0.2);
  }
}

// The paper's dense-and-sparse finding on outlier-heavy data: removing 1% of the values per
// vector lowers the error of the rest.
TEST(Method_kvquant, OutliersLowerTheError) {
  const int d = 128;
  const auto err = [&](const char* spec) {
    const Calibrated c = calibrated(spec, d);
    const auto vc = c.method.values().value_codec(c.ctx());
    const auto x = make_data(Data::kOutliers, 256, d, 21);
    const auto y = decode_run(*vc, encode_run(*vc, x, 0), 0);
    double num = 0, den = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      num += std::pow(double(x[i]) - y[i], 2);
      den += double(x[i]) * x[i];
    }
    return num / den;
  };
  EXPECT_LT(err("kvquant:bits=3,outliers=0.01"), 0.5 * err("kvquant:bits=3,outliers=0"));
}

TEST(Method_kvquant, InCacheAttentionEqualsReference) {
  for (const char* spec : {"kvquant", "kvquant:residual=64"}) {
    SCOPED_TRACE(spec);
    const int d = 64, H = 2;
    const Calibrated c = calibrated(spec, d);
    const LayerConfig cfg(H, d, 0, 0, neox());
    // A two-head layer shares the one-head calibration of layer 0.
    LayerCache lc(c.method, cfg);
    const int n = 300;
    auto k = make_data(Data::kOutliers, size_t(n) * H, d, 31), v = make_data(Data::kGaussian, size_t(n) * H, d, 32);
    lc.append(k.data(), v.data(), 100);
    lc.append(k.data() + size_t(100) * H * d, v.data() + size_t(100) * H * d, n - 100);
    const int QH = 4;
    auto q = make_data(Data::kGaussian, size_t(QH), d, 33);
    const int64_t pos = n - 1;
    std::vector<float> out(q.size()), ref(q.size());
    lc.attend(q.data(), 1, QH, &pos, 0.125f, out.data());
    lc.attend_reference(q.data(), 1, QH, &pos, 0.125f, ref.data());
    for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], ref[i], 1e-4 * (std::fabs(ref[i]) + 1e-2));
  }
}

}  // namespace
}  // namespace vq::kv::testing
