// VecInfer: fused lookup-table scores (byte tables, within the bound their rounding allows) and
// centroid-weight accumulation equal the plain reference under RoPE, with the same bits on every
// SIMD target; the encoder's register-resident search picks the centroid a brute-force search
// picks (ties to the first); bits per element and block bytes agree; calibration survives the
// file; the codec refuses to run uncalibrated.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "src/core/rng.h"
#include "src/core/threads.h"
#include "src/kv/calib/calibrate.h"
#include "src/kv/rope_table.h"
#include "src/kv/kernels/codebook_kernels.h"
#include "tests/kv/calibrated_fixture.h"
#include "tests/kv/codec_harness.h"
#include "veloxquant/error.h"
#include "veloxquant/kv/cache.h"
#include "veloxquant/kv/calibration.h"

namespace vq::kv::testing {
namespace {

Calibrated calibrated(const std::string& spec, int d) { return calibrated_on_synthetic(spec, d, 1024); }

// The error VecInfer's byte tables allow by design: each entry is off by at most step / 2, so a
// score by n_sub * step / 2; and float rounding of the score's last multiply and add.
double byte_table_slack(const KeyCodec& kc, const float* state) {
  const double n_sub = double(kc.query_state_floats() - kLutHeaderFloats) * 4 / kLutCentroids;
  const double step = lut_u8_step(state);
  return 0.5 * n_sub * step + 1e-6 * (std::fabs(lut_u8_bias(state)) + 255.0 * n_sub * step);
}

TEST(Method_vecinfer, FusedEqualsReference) {
  for (const char* spec : {"vecinfer", "vecinfer:ksub=2,vsub=4", "vecinfer:ksub=8,vsub=16,residual=16"}) {
    check_calibrated_codec(spec, {64, 128, 256}, 2000, 1024, byte_table_slack);
  }
}

// The byte of token t's centroid in sub-vector s (blocks of 64 tokens, indices [s][64]).
uint8_t index_of(const Encoded& e, size_t block_bytes, int64_t t, int s) {
  return e.bytes[size_t(t / kLutBlockTokens) * block_bytes + size_t(s) * kLutBlockTokens + size_t(t % kLutBlockTokens)];
}

// A token's score is bias + step * (the sum of its table bytes), to the bit, on every target (the
// AVX-512 VBMI lookups, AVX2's shuffles and the loop of the others), over a range that starts and
// ends inside a block of 64 and crosses two block boundaries. ksub=1 at d = 512 gives 512
// sub-vectors: the 16-bit byte sums are widened every 256.
TEST(Method_vecinfer, ByteTableScoresIdenticalOnEveryTarget) {
  const bool chosen = lut_u8_scores_uses_vpermb();
  for (const bool vpermb : {false, true}) {
    lut_u8_scores_use_vpermb(vpermb);  // both forms of the VBMI lookups, on a CPU that has them
    for (const char* spec : {"vecinfer", "vecinfer:ksub=2,vsub=4", "vecinfer:ksub=1,vsub=8"}) {
      for (int d : std::string(spec).find("ksub=1") != std::string::npos ? std::vector<int>{512} : std::vector<int>{64, 256}) {
        SCOPED_TRACE(std::string(spec) + " d " + std::to_string(d) + (vpermb ? " vpermb" : " vpermi2b"));
        const Calibrated c = calibrated(spec, d);
        const auto kc = c.method.keys().key_codec(c.ctx());
        const int n_q = 5, n_sub = int((kc->query_state_floats() - kLutHeaderFloats) * 4 / kLutCentroids);
        const int64_t i0 = 7, i1 = 201;
        const Encoded e = encode_run(*kc, make_data(Data::kOutliers, 256, d, 30), 0);
        const std::vector<float> states = prepare_queries(*kc, make_data(Data::kOutliers, n_q, d, 31), n_q);
        const int tried = scores_on_every_target(*kc, states, n_q, e, i0, i1, [&](const std::vector<float>& s) {
          for (int r = 0; r < n_q; ++r) {
            const float* st = &states[size_t(r) * kc->query_state_floats()];
            for (int64_t t = i0; t < i1; ++t) {
              uint32_t sum = 0;
              for (int q = 0; q < n_sub; ++q) sum += lut_u8_tables(st)[size_t(q) * kLutCentroids + index_of(e, kc->block_bytes(), t, q)];
              const float want = lut_u8_bias(st) + lut_u8_step(st) * float(sum);
              ASSERT_EQ(s[size_t(r) * (i1 - i0) + size_t(t - i0)], want) << "query " << r << " token " << t;
            }
          }
        });
        EXPECT_GE(tried, 2);
      }
    }
  }
  lut_u8_scores_use_vpermb(chosen);
}

// Tables of 255s (and 254s) at 512 sub-vectors: every 16-bit sum of bytes the kernels keep
// (AVX-512's and AVX2's) would pass 2^16 without a widening every 256 sub-vectors. Each target
// must give the exact sums.
TEST(Method_vecinfer, ByteTableScoresOfFullTablesOnEveryTarget) {
  const int n_sub = 512, n_q = 3;
  const size_t sf = lut_u8_state_floats(n_sub), bb = size_t(n_sub) * kLutBlockTokens;
  std::vector<float> states(sf * n_q, 0.0f);
  for (int r = 0; r < n_q; ++r) {
    float* st = &states[sf * r];
    st[0] = float(r);  // bias
    st[1] = 1.0f;      // step
    uint8_t* tab = reinterpret_cast<uint8_t*>(st + kLutHeaderFloats);
    for (size_t i = 0; i < size_t(n_sub) * kLutCentroids; ++i) tab[i] = uint8_t(255 - (i + r) % 2);
  }
  std::vector<uint8_t> blocks(2 * bb);
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = uint8_t(i * 37 + i / 64);
  const int64_t i0 = 3, i1 = 2 * kLutBlockTokens - 5;
  std::vector<float> first;
  const int tried = for_each_supported_target([&] {
    std::vector<float> out(size_t(n_q) * size_t(i1 - i0), -1.0f);
    lut_u8_scores(states.data(), sf, n_q, n_sub, blocks.data(), bb, i0, i1, out.data(), size_t(i1 - i0));
    for (int r = 0; r < n_q; ++r) {
      const uint8_t* tab = reinterpret_cast<const uint8_t*>(&states[sf * r] + kLutHeaderFloats);
      for (int64_t t = i0; t < i1; ++t) {
        uint32_t sum = 0;
        for (int s = 0; s < n_sub; ++s) {
          sum += tab[size_t(s) * kLutCentroids +
                     blocks[size_t(t / kLutBlockTokens) * bb + size_t(s) * kLutBlockTokens + size_t(t % kLutBlockTokens)]];
        }
        ASSERT_EQ(out[size_t(r) * (i1 - i0) + size_t(t - i0)], float(r) + float(sum)) << "row " << r << " token " << t;
      }
    }
  });
  EXPECT_GE(tried, 2);
}

// A query row's byte tables, to the bit against scalar loops of lut_u8_prepare's arithmetic: the
// float table T[s][c] = y_s0 * c_0 + y_s1 * c_1 + ... (multiplies and adds apart, in that order),
// each sub-vector's smallest entry lo_s, step = the widest range / 255, each byte round((T - lo_s)
// * (255 / range)) to even and clamped to [0, 255], bias = the sum of the lo_s in double; for
// sub-vector lengths the kernel unrolls (2, 4, 8) and one it does not (3), on every target.
TEST(Method_vecinfer, PreparedByteTablesExactOnEveryTarget) {
  Rng rng(12);
  for (int sub : {2, 3, 4, 8}) {
    const int n_sub = 6;
    std::vector<float> ct(size_t(n_sub) * sub * kLutCentroids), y(size_t(n_sub) * sub);
    for (float& x : ct) x = float(rng.normal());
    for (float& x : y) x = float(rng.normal());
    std::vector<float> table(size_t(n_sub) * kLutCentroids);
    std::vector<float> lo(static_cast<size_t>(n_sub));
    float range = 0;
    double bias = 0;
    for (int s = 0; s < n_sub; ++s) {
      lo[size_t(s)] = std::numeric_limits<float>::infinity();
      float hi = -lo[size_t(s)];
      for (int c = 0; c < kLutCentroids; ++c) {
        const float* cs = &ct[size_t(s) * sub * kLutCentroids];
        float dot = y[size_t(s) * sub] * cs[c];
        for (int j = 1; j < sub; ++j) dot = dot + y[size_t(s) * sub + j] * cs[size_t(j) * kLutCentroids + c];
        table[size_t(s) * kLutCentroids + c] = dot;
        lo[size_t(s)] = std::min(lo[size_t(s)], dot);
        hi = std::max(hi, dot);
      }
      range = std::max(range, hi - lo[size_t(s)]);
      bias += lo[size_t(s)];
    }
    const float inv = range > 0 ? 255.0f / range : 0.0f;
    std::vector<uint8_t> want(table.size());
    for (size_t i = 0; i < table.size(); ++i) {
      const float x = std::nearbyint((table[i] - lo[i / kLutCentroids]) * inv);
      want[i] = uint8_t(std::clamp(x, 0.0f, 255.0f));
    }
    const int tried = for_each_supported_target([&] {
      std::vector<float> state(lut_u8_state_floats(n_sub), -1.0f);
      Workspace ws;
      lut_u8_prepare(ct.data(), n_sub, sub, y.data(), state.data(), ws);
      EXPECT_EQ(std::memcmp(lut_u8_tables(state.data()), want.data(), want.size()), 0) << "sub " << sub;
      EXPECT_EQ(lut_u8_bias(state.data()), float(bias)) << "sub " << sub;
      EXPECT_EQ(lut_u8_step(state.data()), range / 255.0f) << "sub " << sub;
    });
    EXPECT_GE(tried, 2);
  }
}

// A codec's accumulation over tokens [i0, mid) (one call) and then [mid, i1) (another), for 5
// query rows (a group of four and one alone), finalized: within float rounding of the sum of
// weight times decoded value in double, and the same bits on every target.
void check_value_accumulation(const std::string& spec, int64_t i0, int64_t mid, int64_t i1) {
  const int d = 128, n_q = 5;
  const Calibrated c = calibrated(spec, d);
  const auto vc = c.method.values().value_codec(c.ctx());
  const int64_t n = i1 - i0, tokens = (i1 + kLutBlockTokens - 1) / kLutBlockTokens * kLutBlockTokens;
  const Encoded e = encode_run(*vc, make_data(Data::kOutliers, int(tokens), d, 40), 0);
  std::vector<float> decoded(size_t(tokens) * d);
  for (int64_t b = 0; b < tokens / kLutBlockTokens; ++b) {
    vc->decode(e.bytes.data() + size_t(b) * vc->block_bytes(), b * kLutBlockTokens,
               decoded.data() + size_t(b) * kLutBlockTokens * d);
  }
  const auto w = make_data(Data::kGaussian, n_q, int(n), 41);
  std::vector<float> first;
  const int tried = for_each_supported_target([&] {
    std::vector<float> acc(size_t(n_q) * vc->accum_floats(), 0.0f), out(size_t(n_q) * d);
    vc->accumulate(w.data(), size_t(n), n_q, e.bytes.data(), 0, i0, mid, acc.data());
    vc->accumulate(w.data() + (mid - i0), size_t(n), n_q, e.bytes.data(), 0, mid, i1, acc.data());
    vc->finalize(acc.data(), n_q, out.data());
    for (int r = 0; r < n_q; ++r) {
      for (int j = 0; j < d; ++j) {
        double ref = 0, mag = 0;
        for (int64_t t = i0; t < i1; ++t) {
          const double x = double(w[size_t(r) * n + size_t(t - i0)]) * decoded[size_t(t) * d + size_t(j)];
          ref += x;
          mag += std::fabs(x);
        }
        ASSERT_NEAR(out[size_t(r) * d + size_t(j)], ref, 2e-6 * mag + 1e-9) << "row " << r << " coordinate " << j;
      }
    }
    if (first.empty()) {
      first = acc;
    } else {
      EXPECT_EQ(std::memcmp(first.data(), acc.data(), acc.size() * 4), 0) << "bits differ from the first target";
    }
  });
  EXPECT_GE(tried, 2);
}

// Values: a run long enough for the per-centroid sums (longer than their pass of kLutWeightRun
// tokens, starting and ending inside a block) and then a short one (decoded values), for 16, 4
// and 2 sub-vectors (the sums' groups of eight, of four, and the rest).
TEST(Method_vecinfer, ValueAccumulationOnEveryTarget) {
  for (const char* spec : {"vecinfer", "vecinfer:vsub=32", "vecinfer:vsub=64"}) {
    SCOPED_TRACE(spec);
    check_value_accumulation(spec, 9, kLutWeightRun + 100, kLutWeightRun + 300);
    check_value_accumulation(spec, 70, 90, kLutSumsMinTokens + 90);  // short, then just long enough
  }
}

// lut_centroid_accumulate to the bit against scalar loops of its stated arithmetic: a long run
// adds each token's weight to its centroid's sum in token order, then adds the even-c and the
// odd-c partial sums of weight times centroid (each in c order, fused multiply-adds) to the
// accumulator; a short run
// adds weight times centroid token by token. Sub-vector widths that take 16-, 8-, 4- and 1-lane
// columns, row counts around the kernel's four, the same bits on every target.
TEST(Method_vecinfer, CentroidAccumulateExactOnEveryTarget) {
  Rng rng(9);
  constexpr int B = kLutBlockTokens;
  for (int sub : {1, 3, 4, 8, 12, 16, 32}) {
    const int n_sub = 2, d = n_sub * sub;
    std::vector<float> book(size_t(n_sub) * kLutCentroids * sub);
    for (float& x : book) x = float(rng.normal());
    const int64_t tokens = 640;
    const size_t bb = size_t(n_sub) * B;
    std::vector<uint8_t> blocks(size_t(tokens / B) * bb);
    for (auto& x : blocks) x = uint8_t(rng.next_u64());
    const auto idx = [&](int64_t t, int s) { return blocks[size_t(t / B) * bb + size_t(s) * B + size_t(t % B)]; };
    for (int n_q : {1, 4, 5}) {
      for (const auto& [i0, i1] : {std::pair<int64_t, int64_t>{3, 3 + kLutSumsMinTokens}, {5, 200}}) {
        const int64_t n = i1 - i0;
        const size_t acc_stride = size_t(d) + 3;
        std::vector<float> w(size_t(n_q) * size_t(n)), start(size_t(n_q) * acc_stride);
        for (float& x : w) x = float(rng.uniform());
        for (float& x : start) x = float(rng.normal());
        std::vector<float> expect = start;
        for (int r = 0; r < n_q; ++r) {
          float* e = expect.data() + size_t(r) * acc_stride;
          const float* wr = w.data() + size_t(r) * size_t(n);
          if (n >= kLutSumsMinTokens) {
            for (int s = 0; s < n_sub; ++s) {
              std::vector<float> sums(kLutCentroids, 0.0f);
              for (int64_t t = i0; t < i1; ++t) sums[idx(t, s)] += wr[t - i0];
              for (int j = 0; j < sub; ++j) {
                float even = 0, odd = 0;
                for (int c = 0; c < kLutCentroids; ++c) {
                  float& part = c % 2 ? odd : even;
                  part = std::fma(sums[size_t(c)], book[(size_t(s) * kLutCentroids + c) * sub + j], part);
                }
                e[s * sub + j] += even + odd;
              }
            }
          } else {
            for (int64_t t = i0; t < i1; ++t) {
              for (int s = 0; s < n_sub; ++s) {
                for (int j = 0; j < sub; ++j) {
                  e[s * sub + j] += wr[t - i0] * book[(size_t(s) * kLutCentroids + idx(t, s)) * sub + j];
                }
              }
            }
          }
        }
        const int tried = for_each_supported_target([&] {
          std::vector<float> acc = start;
          lut_centroid_accumulate(w.data(), size_t(n), n_q, n_sub, sub, book.data(), blocks.data(), bb, i0, i1,
                                  acc.data(), acc_stride);
          EXPECT_EQ(std::memcmp(acc.data(), expect.data(), acc.size() * 4), 0)
              << "sub " << sub << ", " << n_q << " rows, tokens " << i0 << " to " << i1;
        });
        EXPECT_GE(tried, 2);
      }
    }
  }
}

// Attention over three position chunks of a decode step (each work item multiplies its centroid
// sums through the codebook, then the chunks merge): the fused output stays near the reference
// (decoded keys and values, softmax in double), and is the same at one and two threads. A small
// score scale keeps the byte tables' score rounding from moving the weights (at scale 0.3 it
// alone gave errors up to 4.5e-2); a chunk lost or counted twice would move the output by about
// its own size.
TEST(Method_vecinfer, ChunkedDecodeMergesItems) {
  const int d = 128, T = 9000, q_heads = 4;
  const Calibrated c = calibrated("vecinfer:residual=16", d);
  LayerCache cache(c.method, LayerConfig(1, d, 0, 0, neox()));
  const auto k = make_data(Data::kOutliers, T, d, 50), v = make_data(Data::kGaussian, T, d, 51);
  cache.append(k.data(), v.data(), T);
  const auto q = make_data(Data::kGaussian, q_heads, d, 52);
  const int64_t pos = T - 1;
  std::vector<float> one(q.size()), two(q.size()), ref(q.size());
  set_num_threads(1);
  cache.attend(q.data(), 1, q_heads, &pos, 0.02f, one.data());
  set_num_threads(2);
  cache.attend(q.data(), 1, q_heads, &pos, 0.02f, two.data());
  cache.attend_reference(q.data(), 1, q_heads, &pos, 0.02f, ref.data());
  EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * 4), 0);
  for (int h = 0; h < q_heads; ++h) {
    double num = 0, den = 0;
    for (int j = 0; j < d; ++j) {
      num += std::pow(double(one[size_t(h) * d + j]) - ref[size_t(h) * d + j], 2);
      den += std::pow(double(ref[size_t(h) * d + j]), 2);
    }
    EXPECT_LT(std::sqrt(num / den), 2e-3) << "query head " << h;  // measured 2.7e-4 to 5.2e-4
  }
}

TEST(Method_vecinfer, BitsPerElementAndRefusals) {
  EXPECT_DOUBLE_EQ(parse_method("vecinfer").bits_per_element(128), 0.5 * (2.0 + 1.0));
  EXPECT_DOUBLE_EQ(parse_method("vecinfer:ksub=2,vsub=4").bits_per_element(256), 3.0);
  EXPECT_THROW(parse_method("vecinfer:kbits=4"), Error);
  EXPECT_THROW(parse_method("vecinfer").keys().key_codec(CodecContext{128, 0}), Error);  // uncalibrated
  EXPECT_THROW(parse_method("vecinfer:ksub=3").keys().key_codec(CodecContext{128, 0}), Error);
}

// Against a brute-force search in double precision: the chosen centroid is at the minimum
// distance (up to float rounding of |c|^2 - 2 x.c), and of equal centroids the first is chosen.
TEST(Method_vecinfer, EncoderPicksTheNearestCentroid) {
  Rng rng(5);
  for (int sub : {1, 2, 4, 8, 16}) {
    const int k = 256;
    std::vector<float> c(size_t(k) * sub), ct(c.size()), norms(static_cast<size_t>(k));
    for (float& x : c) x = float(rng.normal());
    for (int i = 0; i < 8; ++i) std::copy_n(c.data() + size_t(200 + i) * sub, sub, c.data() + size_t(40 + i) * sub);
    for (int i = 0; i < k; ++i) {
      double nn = 0;
      for (int j = 0; j < sub; ++j) {
        ct[size_t(j) * k + i] = c[size_t(i) * sub + j];
        nn += double(c[size_t(i) * sub + j]) * c[size_t(i) * sub + j];
      }
      norms[size_t(i)] = float(nn);
    }
    int exact = 0;
    for (int trial = 0; trial < 2000; ++trial) {
      std::vector<float> x(static_cast<size_t>(sub));
      // Every tenth query sits on a duplicated centroid: the first copy must win.
      const int on = trial % 10 == 0 ? 200 + (trial / 10) % 8 : -1;
      for (int j = 0; j < sub; ++j) x[size_t(j)] = on >= 0 ? c[size_t(on) * sub + j] : float(1.5 * rng.normal());
      double best = std::numeric_limits<double>::infinity();
      int best_i = -1;
      std::vector<double> dist(static_cast<size_t>(k));
      for (int i = 0; i < k; ++i) {
        double dd = 0;
        for (int j = 0; j < sub; ++j) dd += std::pow(double(x[size_t(j)]) - c[size_t(i) * sub + j], 2);
        dist[size_t(i)] = dd;
        if (dd < best) best = dd, best_i = i;
      }
      const int got = nearest_centroid(ct.data(), norms.data(), k, sub, x.data());
      ASSERT_GE(got, 0);
      ASSERT_LT(got, k);
      EXPECT_LE(dist[size_t(got)], best + 1e-5 * (1.0 + norms[size_t(best_i)])) << "sub " << sub << " trial " << trial;
      if (on >= 0) {
        EXPECT_EQ(got, on - 160) << "sub " << sub << ": of two equal centroids the first is chosen";
      }
      exact += got == best_i;
    }
    EXPECT_GE(exact, 1990) << "sub " << sub;  // ties aside, the same index
  }
}

TEST(Method_vecinfer, CalibrationSurvivesTheFile) {
  const Calibrated c = calibrated("vecinfer", 64);
  const Calibration back = parse_calibration(serialize_calibration(*c.calib), "test");
  EXPECT_EQ(back.layers[0].key_codebook, c.calib->layers[0].key_codebook);
  EXPECT_EQ(back.layers[0].value_codebook, c.calib->layers[0].value_codebook);
  EXPECT_EQ(back.layers[0].key_smooth, c.calib->layers[0].key_smooth);
  EXPECT_EQ(c.calib->layers[0].key_codebook.size(), size_t(64) * 256);
  // RoPE pairs (NEOX: i, i + d/2) share a smoothing divisor.
  for (int i = 0; i < 32; ++i) EXPECT_EQ(c.calib->layers[0].key_smooth[size_t(i)], c.calib->layers[0].key_smooth[size_t(i) + 32]);
}

}  // namespace
}  // namespace vq::kv::testing
