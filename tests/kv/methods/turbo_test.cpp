// TurboQuant-MSE: fused paths equal the plain reference; the Lloyd-Max solver's levels give, on
// random unit vectors pushed through the whole codec (rotation included), the distortion the
// solver predicts and the paper reports; bits per element count the norm.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "src/core/fp16.h"
#include "src/core/rng.h"
#include "src/kv/calib/lloyd_max.h"
#include "src/kv/methods/turbo/turbo_lane_kernels.h"
#include "src/kv/methods/turbo/turbo_lanes.h"
#include "src/kv/methods/turbo/turbo_sign_lanes.h"
#include "tests/kv/codec_harness.h"
#include "veloxquant/error.h"

namespace vq::kv::testing {
namespace {

TEST(Method_turbo, FusedEqualsReference) {
  // Lane parts at 2 to 4 bits score and sum in fixed point (fixed_lane_tol); one bit in float.
  check_all("turbo:bits=1", {64, 128, 256}, 64);
  for (const char* spec : {"turbo", "turbo:bits=2", "turbo:bits=4,seed=9", "k=turbo:bits=3,v=turbo:bits=2"}) {
    check_all(spec, {64, 128, 256}, 64, fixed_lane_tol(256));
  }
  // Head dims that are not powers of two take the dense random rotation (80: keys in float).
  for (const char* spec : {"turbo", "turbo:bits=4,norm=inner"}) check_all(spec, {80, 96}, 64, fixed_lane_tol(96));
}

// Blocks keep tokens in the vector lanes (turbo_lanes.h) when head_dim is a multiple of 32; the
// scalar target reads the level table with a gather instead of a register permute, and AVX2
// blocks its registers differently from AVX-512: every target this CPU runs.
TEST(Method_turbo, EveryTargetMatchesReference) {
  const int tried = for_each_supported_target([] {
    check_all("turbo:bits=1", {64}, 64);
    for (const char* spec : {"turbo:bits=2", "turbo:bits=3", "turbo:bits=4"}) check_all(spec, {64}, 64, fixed_lane_tol(64));
    // 1 bit scores through per-nibble query tables up to head_dim 512, per channel above.
    check_all("turbo:bits=1", {1024}, 32);
  });
  EXPECT_GE(tried, 2);
}

// The nibble-table scores (1 bit) give the same bits on every target (they add table entries, no
// multiply-add): several queries (a pass of four and a remainder) over a range that starts and
// ends inside a block.
TEST(Method_turbo, TableScoresIdenticalOnEveryTarget) {
  for (const char* spec : {"turbo:bits=1", "turbo:bits=1,norm=length,seed=3"}) {
    SCOPED_TRACE(spec);
    const int d = 128, n_q = 7, n = 100;
    const int64_t i0 = 5, i1 = 91;
    const auto kc = parse_method(spec).keys().key_codec(CodecContext{d, 1});
    const auto q = make_data(Data::kOutliers, n_q, d, 21);
    const Encoded e = encode_run(*kc, make_data(Data::kOutliers, n, d, 22), 0);
    const int tried = scores_on_every_target(*kc, prepare_queries(*kc, q, n_q), n_q, e, i0, i1, [](const auto&) {});
    EXPECT_GE(tried, 2);
  }
}

// One-bit values keep a 16-bit plane of token bits per channel (turbo_sign_lanes.h), keys keep
// tokens in lanes: the same quantizer behind both, so the same vectors decode to the same bits,
// in the same number of bytes, and bit t of channel c's plane is token t's code there.
TEST(Method_turbo, OneBitValuePlanesHoldTheKeyLanesCodes) {
  for (int d : {32, 128, 1024}) {
    SCOPED_TRACE("d " + std::to_string(d));
    ASSERT_TRUE(sign_lanes::apply(d, 1));
    const auto kc = make_turbo_key_codec(sphere_rows(d, 1));
    const auto vc = make_turbo_value_codec(sphere_rows(d, 1));
    ASSERT_EQ(kc->block_tokens(), 16);
    ASSERT_EQ(vc->block_tokens(), 16);
    ASSERT_EQ(kc->block_bytes(), vc->block_bytes());
    const auto x = make_data(Data::kOutliers, 16, d, uint64_t(d));
    std::vector<uint8_t> kb(kc->block_bytes()), vb(vc->block_bytes(), 0xA5);  // encode overwrites every bit
    kc->encode(x.data(), 0, kb.data());
    vc->encode(x.data(), 0, vb.data());
    std::vector<float> kx(x.size()), vx(x.size());
    kc->decode(kb.data(), 0, kx.data());
    vc->decode(vb.data(), 0, vx.data());
    ASSERT_EQ(0, std::memcmp(kx.data(), vx.data(), kx.size() * 4));
    EXPECT_EQ(0, std::memcmp(kb.data(), vb.data(), 32)) << "the 16 fp16 scales come first";
    for (int t = 0; t < 16; ++t) {
      for (int c = 0; c < d; ++c) {
        uint16_t plane;
        std::memcpy(&plane, vb.data() + 32 + 2 * c, 2);
        ASSERT_EQ((plane >> t) & 1, vx[size_t(t) * d + c] > 0 ? 1 : 0) << "token " << t << ", channel " << c;
      }
    }
  }
  EXPECT_FALSE(sign_lanes::apply(128, 2));
  EXPECT_FALSE(sign_lanes::apply(80, 1));
}

// Bytes between two inaccessible pages, against the upper one (at_end) or the lower one: a read
// past their end, or before their start, faults, instrumented or not.
class FencedBytes {
 public:
  FencedBytes(size_t bytes, bool at_end) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    span_ = ((bytes + page - 1) / page + 2) * page;
    void* p = mmap(nullptr, span_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    base_ = static_cast<uint8_t*>(p);
    EXPECT_EQ(mprotect(base_, page, PROT_NONE), 0);
    EXPECT_EQ(mprotect(base_ + span_ - page, page, PROT_NONE), 0);
    data_ = at_end ? base_ + span_ - page - bytes : base_ + page;
  }
  ~FencedBytes() { munmap(base_, span_); }
  FencedBytes(const FencedBytes&) = delete;
  FencedBytes& operator=(const FencedBytes&) = delete;
  uint8_t* data() { return data_; }

 private:
  uint8_t* base_ = nullptr;
  uint8_t* data_ = nullptr;
  size_t span_ = 0;
};

// The sanitizer builds compile the lane kernels without instrumentation (src/CMakeLists.txt says
// why), so their reads are fenced here by the MMU instead: every sub-range of three blocks, at
// every bit width, for the four-row and the one-row kernels, with the blocks' end on a fence
// (and, in a second pass, their start). Prefetches past the end never fault; loads do.
TEST(Method_turbo, LaneKernelsReadOnlyTheirBlocks) {
  for (int bits = 1; bits <= 4; ++bits) {
    for (int d : {64, 128}) {
      SCOPED_TRACE("bits " + std::to_string(bits) + ", d " + std::to_string(d));
      const Method m = parse_method("turbo:bits=" + std::to_string(bits));
      const auto kc = m.keys().key_codec(CodecContext{d, 0});
      const auto vc = m.values().value_codec(CodecContext{d, 0});
      const int B = kc->block_tokens(), n_blocks = 3, n = B * n_blocks, n_q = 5;
      const std::vector<float> x = make_data(Data::kGaussian, size_t(n), d, uint64_t(40 + bits));
      const Encoded ke = encode_run(*kc, x, 0), ve = encode_run(*vc, x, 0);
      std::vector<float> states(size_t(n_q) * kc->query_state_floats());
      for (int r = 0; r < n_q; ++r) kc->prepare_query(x.data() + size_t(r) * d, states.data() + size_t(r) * kc->query_state_floats());
      std::vector<float> scores(size_t(n_q) * n), acc(size_t(n_q) * vc->accum_floats());
      for (bool at_end : {true, false}) {
        FencedBytes kb(ke.bytes.size(), at_end), vb(ve.bytes.size(), at_end);
        uint8_t* kp = kb.data();
        uint8_t* vp = vb.data();
        std::copy(ke.bytes.begin(), ke.bytes.end(), kp);
        std::copy(ve.bytes.begin(), ve.bytes.end(), vp);
        for (int i0 : {0, 1, B - 1, B, B + 1}) {
          for (int i1 : {i0 + 1, 2 * B - 1, 2 * B, n - 1, n}) {
            if (i1 <= i0) continue;
            kc->scores(states.data(), n_q, kp, 0, i0, i1, scores.data(), size_t(n));
            std::fill(acc.begin(), acc.end(), 0.0f);
            vc->accumulate(scores.data(), size_t(n), n_q, vp, 0, i0, i1, acc.data());
          }
        }
      }
    }
  }
}

TEST(Method_turbo, BitsPerElementCountTheNorm) {
  EXPECT_DOUBLE_EQ(parse_method("turbo").bits_per_element(128), 3.125);
  EXPECT_DOUBLE_EQ(parse_method("turbo:bits=1").bits_per_element(256), 1.0625);
  check_rotation_dims("turbo");
  EXPECT_THROW(parse_method("turbo").keys().key_codec(CodecContext{2, 0}), Error);
}

// The paper (section 3.1) gives D_mse = 0.36, 0.117, 0.03, 0.009 for b = 1..4. The exact
// Lloyd-Max quantizer of the d = 128 coordinate density gives 0.3609, 0.1160, 0.0340, 0.0093:
// the paper's "0.03" is 0.034 rounded to one significant digit (so is the Gaussian limit,
// 0.0345); b = 3 is checked at that precision, the others within 10%.
TEST(Method_turbo, DistortionMatchesTheSolverAndThePaper) {
  const int d = 128, n = 2000;
  const double paper[] = {0.36, 0.117, 0.030, 0.009};
  for (int b = 1; b <= 4; ++b) {
    const Method m = parse_method("turbo:bits=" + std::to_string(b));
    const auto kc = m.keys().key_codec(CodecContext{d, 0});
    Rng rng(uint64_t(100 + b));
    std::vector<float> x(size_t(16) * d), y(x.size());
    std::vector<uint8_t> block(kc->block_bytes());
    double sum = 0;
    for (int v = 0; v < n; v += 16) {
      for (int t = 0; t < 16; ++t) {
        double ss = 0;
        for (int j = 0; j < d; ++j) ss += std::pow(x[size_t(t) * d + j] = float(rng.normal()), 2);
        for (int j = 0; j < d; ++j) x[size_t(t) * d + j] = float(x[size_t(t) * d + j] / std::sqrt(ss));
      }
      kc->encode(x.data(), 0, block.data());
      kc->decode(block.data(), 0, y.data());
      for (size_t i = 0; i < x.size(); ++i) sum += std::pow(double(x[i]) - y[i], 2);
    }
    const double measured = sum / (n / 16 * 16);
    const double predicted = lloyd_max_sphere(d, b).vector_mse(d);
    SCOPED_TRACE("bits " + std::to_string(b) + ": measured " + std::to_string(measured));
    EXPECT_NEAR(measured / predicted, 1.0, 0.05);
    if (b == 3) {
      EXPECT_NEAR(measured, paper[b - 1], 0.005);  // 0.03 to one significant digit
    } else {
      EXPECT_NEAR(measured / paper[b - 1], 1.0, 0.10);
    }
  }
}

// norm=length stores ||x|| / ||c||, so the reconstruction keeps x's length; norm=inner stores
// ||x|| / <u, c>, so <x, x_hat> = ||x||^2; the paper's norm=paper shrinks both by about (1 - D).
// Exact up to the fp16 rounding of the stored scale (2^-11 relative).
TEST(Method_turbo, NormCorrections) {
  const int d = 96;  // the dense rotation: the corrections hold whatever the rotation
  const char* names[] = {"paper", "length", "inner"};
  for (int mode = 0; mode <= 2; ++mode) {
    const auto kc = parse_method(std::string("turbo:bits=2,norm=") + names[mode]).keys().key_codec(CodecContext{d, 0});
    Rng rng(uint64_t(40 + mode));
    std::vector<float> x(size_t(16) * d), y(x.size());
    for (auto& v : x) v = float(rng.normal()) * 3.0f;
    std::vector<uint8_t> block(kc->block_bytes());
    kc->encode(x.data(), 0, block.data());
    kc->decode(block.data(), 0, y.data());
    double shrink = 0;
    for (int t = 0; t < 16; ++t) {
      double xx = 0, yy = 0, xy = 0;
      for (int j = 0; j < d; ++j) {
        const double a = x[size_t(t) * d + j], b = y[size_t(t) * d + j];
        xx += a * a;
        yy += b * b;
        xy += a * b;
      }
      if (mode == 1) {
        EXPECT_NEAR(std::sqrt(yy / xx), 1.0, 1e-3) << t;
      } else if (mode == 2) {
        EXPECT_NEAR(xy / xx, 1.0, 1e-3) << t;
      }
      shrink += xy / xx / 16;
    }
    if (mode == 0) {
      EXPECT_NEAR(shrink, 1.0 - lloyd_max_sphere(d, 2).vector_mse(d), 0.02);
    }
  }
  EXPECT_THROW(parse_method("turbo:norm=3"), Error);
  EXPECT_THROW(parse_method("turbo:norm=unit"), Error);
  // The numbers of specs written before the choice had names still parse, to the named form.
  EXPECT_EQ(parse_method("turbo:bits=2,norm=2").spec(), "turbo:bits=2,norm=inner");
  EXPECT_EQ(parse_method("turbo:norm=0").spec(), "turbo");
}

// Fractional settings (outliers=N): per group of tokens the N channels of largest norm at one
// bit more, each channel set by its own instance (turbo_split.cpp).
TEST(Method_turbo, OutlierSplitFusedEqualsReference) {
  for (const char* spec : {"turbo:bits=2,outliers=64", "turbo:bits=3,outliers=64,group=16,seed=4",
                           "k=turbo:bits=1,outliers=64,v=turbo:bits=2,norm=length,outliers=32", "turbo:bits=2,outliers=48,pick=first"}) {
    check_all(spec, {128}, 96);
  }
  check_all("turbo:bits=2,outliers=128,group=16", {256}, 64);
  check_all("turbo:bits=2,outliers=40,group=16", {80}, 64);  // two dense rotations (40 and 40)
  check_all("turbo:bits=1,outliers=32", {128}, 64);          // 32 by Hadamard, 96 dense
}

// Calls with more query rows than tokens in a group (prefill) decode the group to channels once
// and score and accumulate it with the float kernels instead of rotating every row: held to the
// reference, with one group's many rows and a damaged-mask-free run across groups.
TEST(Method_turbo, OutlierSplitManyRowsEqualsReference) {
  for (const char* spec : {"turbo:bits=2,outliers=64", "k=turbo:bits=1,outliers=64,v=turbo:bits=2,norm=length,outliers=32"}) {
    for (Data kind : {Data::kGaussian, Data::kOutliers, Data::kHuge}) {
      check_fused_equals_reference(spec, 128, kind, 77 + uint64_t(kind), 96, 40);
    }
  }
  check_fused_equals_reference("turbo:bits=2,outliers=40,group=16", 80, Data::kGaussian, 5, 64, 20);
}

// Rows move between channels and the two parts by compress and expand on AVX-512, by a walk over
// the channels elsewhere and past the last whole 16 channels (head_dim 72): every target.
TEST(Method_turbo, OutlierSplitEveryTargetMatchesReference) {
  const int tried = for_each_supported_target([] {
    check_all("turbo:bits=2,outliers=64", {128}, 64);
    check_all("turbo:bits=2,outliers=36,group=16", {72}, 48);
  });
  EXPECT_GE(tried, 2);
}

TEST(Method_turbo, OutlierSplitBitsCountMaskAndBothNorms) {
  // 2 bits + 64 of 128 channels at one more, two fp16 norms per token, a 128-bit mask per 32 tokens.
  EXPECT_DOUBLE_EQ(parse_method("turbo:bits=2,outliers=64").bits_per_element(128), 2.5 + 32.0 / 128 + 1.0 / 32);
  EXPECT_DOUBLE_EQ(parse_method("turbo:bits=3,outliers=128,group=64").bits_per_element(256), 3.5 + 32.0 / 256 + 1.0 / 64);
  EXPECT_DOUBLE_EQ(parse_method("turbo:bits=2,outliers=32").bits_per_element(128), 2.25 + 32.0 / 128 + 1.0 / 32);
  for (const char* spec : {"turbo:bits=4,outliers=64", "turbo:outliers=2", "turbo:outliers=125", "turbo:outliers=128"}) {
    EXPECT_THROW(parse_method(spec).keys().key_codec(CodecContext{128, 0}), Error) << spec;
    EXPECT_THROW(parse_method(spec).values().value_codec(CodecContext{128, 0}), Error) << spec;
  }
  EXPECT_THROW(parse_method("turbo:outliers=-1"), Error);
  EXPECT_THROW(parse_method("turbo:outliers=8,group=0"), Error);
  // Each part keeps blocks of 16 tokens, so a group is a whole number of them.
  for (const char* spec : {"turbo:outliers=64,group=8", "turbo:outliers=64,group=24"}) {
    EXPECT_THROW(parse_method(spec).keys().key_codec(CodecContext{128, 0}), Error) << spec;
  }
}

// Pieces (channels=N, turbo_pieces.cpp): each N channels of the head coded as a vector of their
// own, as llama.cpp's turbo types code a head of 256 in two blocks of 128.
TEST(Method_turbo, PiecesFusedEqualsReference) {
  for (const char* spec : {"turbo:bits=3,channels=128,norm=length", "turbo:bits=2,channels=64,seed=5", "turbo:bits=4,channels=32"}) {
    check_all(spec, {256}, 64, fixed_lane_tol(256));
  }
  // One bit: keys score through nibble tables, values keep per-channel token planes.
  check_all("turbo:bits=1,channels=64", {128}, 64);
  check_all("k=turbo:bits=3,channels=64,v=turbo:bits=2,norm=inner,channels=32", {128}, 64, fixed_lane_tol(128));
  check_all("turbo:bits=3,channels=96", {192}, 48, fixed_lane_tol(192));  // pieces of 96 take the dense rotation
}

// One-bit key parts score through nibble tables; add_scores adds those scores too.
TEST(Method_turbo, LanePartAddsOneBitScores) {
  const int tried = for_each_supported_target([] {
    const int d = 64, n = 48;
    const TurboLanePart keys(d, 1, {-0.5f, 0.5f}, false);
    Rng rng(3);
    std::vector<uint8_t> mem(keys.bytes() * 3), codes(static_cast<size_t>(d));
    for (int t = 0; t < n; ++t) {
      for (auto& c : codes) c = uint8_t(rng.next_u64() & 1);
      keys.put(codes.data(), f32_to_f16(float(0.5 + 0.01 * t)), t % 16, mem.data() + size_t(t / 16) * keys.bytes());
    }
    std::vector<float> q(size_t(5) * d), state(5 * keys.query_state_floats());
    for (auto& v : q) v = float(rng.normal());
    for (int r = 0; r < 5; ++r) keys.prepare_query(q.data() + size_t(r) * d, state.data() + size_t(r) * keys.query_state_floats());
    const int64_t i0 = 5, i1 = 43;
    std::vector<float> out(size_t(5) * (i1 - i0)), added(out.size(), -2.0f);
    keys.scores(state.data(), keys.query_state_floats(), 5, mem.data(), keys.bytes(), i0, i1, out.data(), size_t(i1 - i0));
    keys.add_scores(state.data(), keys.query_state_floats(), 5, mem.data(), keys.bytes(), i0, i1, added.data(),
                    size_t(i1 - i0));
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(added[i], -2.0f + out[i]) << "score " << i;
  });
  EXPECT_GE(tried, 2);
}

// `blocks` blocks of a lane part filled with random codes (of `levels` levels, from rng) and the
// fp16 scales 0.5 + step * t, with the codes and scales kept for the checks.
struct FilledPart {
  std::vector<uint8_t> mem, codes;
  std::vector<float> scale;
};
FilledPart fill_part(const TurboLanePart& part, int d, int blocks, size_t levels, double step, Rng& rng) {
  const int n = blocks * 16;
  FilledPart f{std::vector<uint8_t>(part.bytes() * blocks), std::vector<uint8_t>(size_t(n) * d),
               std::vector<float>(static_cast<size_t>(n))};
  for (int t = 0; t < n; ++t) {
    for (int c = 0; c < d; ++c) f.codes[size_t(t) * d + c] = uint8_t(rng.next_u64() % levels);
    f.scale[size_t(t)] = f16_to_f32(f32_to_f16(float(0.5 + step * t)));
    part.put(f.codes.data() + size_t(t) * d, f32_to_f16(f.scale[size_t(t)]), t % 16,
             f.mem.data() + size_t(t / 16) * part.bytes());
  }
  return f;
}

// Keys at 2 to 4 bits score in 16-bit fixed point (turbo_lane_kernels.h): the state holds the
// query's pairs as documented, and every target's score is exactly the integer sum of each run of
// 128 channels, converted to float and added in order, times the row's unit and the token's
// scale: the same bits on every target. Head sizes with one run, a partial last run (160) and
// several (288); five query rows (a pass of four and one alone) over a range inside blocks.
TEST(Method_turbo, FixedPointScoresAreExactIntegerSums) {
  const int tried = for_each_supported_target([] {
    for (int d : {32, 64, 128, 160, 288}) {
      for (int bits = 2; bits <= 4; ++bits) {
        SCOPED_TRACE("d " + std::to_string(d) + ", bits " + std::to_string(bits));
        Rng rng(uint64_t(d * 10 + bits));
        std::vector<float> levels(size_t(1) << bits);
        for (auto& x : levels) x = float(rng.normal());
        const TurboLanePart keys(d, bits, levels, false);
        ASSERT_EQ(keys.query_state_floats(), size_t(d / 2 + 1));
        const int blocks = 3, n_q = 5;
        const auto [mem, codes, scale] = fill_part(keys, d, blocks, levels.size(), 0.01, rng);
        std::vector<float> q(size_t(n_q) * d), state(n_q * keys.query_state_floats());
        for (auto& v : q) v = float(rng.normal());
        q[3] = 40.0f;  // one loud channel in row 0
        const size_t S = keys.query_state_floats();
        for (int r = 0; r < n_q; ++r) keys.prepare_query(q.data() + size_t(r) * d, state.data() + size_t(r) * S);
        float top_level = 0;
        for (float l : levels) top_level = std::max(top_level, std::fabs(l));
        const float level_unit = top_level / 4095.0f;
        const int64_t i0 = 3, i1 = 45;
        std::vector<float> out(size_t(n_q) * (i1 - i0));
        keys.scores(state.data(), S, n_q, mem.data(), keys.bytes(), i0, i1, out.data(), size_t(i1 - i0));
        for (int r = 0; r < n_q; ++r) {
          const float* qr = q.data() + size_t(r) * d;
          float top = 0;
          for (int c = 0; c < d; ++c) top = std::max(top, std::fabs(qr[c]));
          std::vector<int32_t> qi(static_cast<size_t>(d));
          for (int c = 0; c < d; ++c) qi[size_t(c)] = int32_t(std::lrint(qr[c] * (4095.0f / top)));
          const float* st = state.data() + size_t(r) * S;
          for (int g = 0; g < d / 32; ++g) {
            for (int p = 0; p < 16; ++p) {
              uint32_t word;
              std::memcpy(&word, st + g * 16 + p, 4);
              ASSERT_EQ(int16_t(word & 0xFFFF), qi[size_t(g * 32 + turbo_lanes::pair_lo(bits, p))]) << "pair " << p;
              ASSERT_EQ(int16_t(word >> 16), qi[size_t(g * 32 + turbo_lanes::pair_hi(bits, p))]) << "pair " << p;
            }
          }
          const float unit = st[d / 2];
          ASSERT_EQ(unit, top / 4095.0f * level_unit);
          for (int64_t t = i0; t < i1; ++t) {
            float sum = 0;
            double exact = 0, bound = 0;
            for (int c0 = 0; c0 < d; c0 += 128) {
              int64_t run = 0;
              for (int c = c0; c < std::min(d, c0 + 128); ++c) {
                const int code = codes[size_t(t) * d + c];
                run += int64_t(qi[size_t(c)]) * std::lrint(levels[size_t(code)] / level_unit);
                exact += double(qr[c]) * levels[size_t(code)];
                bound += (double(top) * std::fabs(levels[size_t(code)]) + std::fabs(qr[c]) * top_level) / 8190.0;
              }
              ASSERT_LT(std::llabs(run), int64_t(1) << 31);
              sum += float(int32_t(run));
            }
            const float want = sum * unit * scale[size_t(t)];
            const float got = out[size_t(r) * (i1 - i0) + size_t(t - i0)];
            ASSERT_EQ(got, want) << "row " << r << ", token " << t;
            // Against the float score: within half a unit of each operand, plus float rounding.
            ASSERT_NEAR(got, exact * scale[size_t(t)], (bound * 1.001 + 1e-6 * std::fabs(exact)) * scale[size_t(t)])
                << "row " << r << ", token " << t;
          }
        }
      }
    }
  });
  EXPECT_GE(tried, 2);
}

// Values at 2 to 4 bits sum in fixed point: per run of 256 tokens a row's weights (times the
// tokens' scales) in units of max(max |W| / kFixedWeight, an integer upper bound of sum |W| /
// kFixedWeightSum), each channel's sum over the run exact in integers, converted and added to acc
// in float run by run: the same bits on every target. 21 blocks (a whole run and one of 5 blocks,
// whose last block pairs with nothing), a range that starts and ends inside blocks, five rows.
TEST(Method_turbo, FixedPointSumsAreExactIntegerSums) {
  const int tried = for_each_supported_target([] {
    for (int d : {32, 128}) {
      for (int bits = 2; bits <= 4; ++bits) {
        SCOPED_TRACE("d " + std::to_string(d) + ", bits " + std::to_string(bits));
        Rng rng(uint64_t(d * 10 + bits + 5));
        std::vector<float> levels(size_t(1) << bits);
        for (auto& x : levels) x = float(rng.normal());
        const TurboLanePart values(d, bits, levels, true);
        const int blocks = 21, n_q = 5;
        const auto [mem, codes, scale] = fill_part(values, d, blocks, levels.size(), 0.003, rng);
        const int64_t i0 = 5, i1 = 330;
        std::vector<float> w(size_t(n_q) * (i1 - i0));
        for (auto& v : w) v = float(rng.normal());
        w[7] = 30.0f;  // one heavy weight in row 0
        std::vector<float> acc(size_t(n_q) * (d + 3), 0.5f);
        values.accumulate(w.data(), size_t(i1 - i0), n_q, mem.data(), values.bytes(), i0, i1, acc.data(), size_t(d + 3));
        float top_level = 0;
        for (float l : levels) top_level = std::max(top_level, std::fabs(l));
        const float level_unit = top_level / 4095.0f;
        for (int r = 0; r < n_q; ++r) {
          for (int c = 0; c < d; ++c) {
            float want = 0.5f;
            double exact = 0.5, bound = 0;
            for (int b0 = 0; b0 < blocks; b0 += 16) {
              const int b1 = std::min(blocks, b0 + 16);
              std::vector<float> W;
              float top = 0;
              for (int t = b0 * 16; t < b1 * 16; ++t) {
                W.push_back(t >= i0 && t < i1 ? w[size_t(r) * (i1 - i0) + size_t(t - i0)] * scale[size_t(t)] : 0.0f);
                top = std::max(top, std::fabs(W.back()));
              }
              const float to_count = 1048576.0f / top;
              int64_t count = 0;
              for (float x : W) count += int64_t(std::ceil(std::fabs(x) * to_count)) + 1;
              const float upper = float(int32_t(count)) * (top / 1048576.0f);
              const float wu = std::max(top / float(turbo_lanes::kFixedWeight), upper / float(turbo_lanes::kFixedWeightSum));
              const float to_fixed = 1.0f / wu;
              int64_t run = 0;
              for (int t = b0 * 16; t < b1 * 16; ++t) {
                const float Wt = W[size_t(t - b0 * 16)];
                const int code = codes[size_t(t) * d + c];
                run += int64_t(std::lrint(Wt * to_fixed)) * std::lrint(levels[size_t(code)] / level_unit);
                exact += double(Wt) * levels[size_t(code)];
                bound += (double(wu) * std::fabs(levels[size_t(code)]) + std::fabs(Wt) * top_level) / 8190.0;
              }
              ASSERT_LT(std::llabs(run), int64_t(1) << 31);
              want += float(int32_t(run)) * (wu * level_unit);
            }
            const float got = acc[size_t(r) * (d + 3) + c];
            ASSERT_EQ(got, want) << "row " << r << ", channel " << c;
            ASSERT_NEAR(got, exact, bound * 1.001 + 1e-5 * std::fabs(exact)) << "row " << r << ", channel " << c;
          }
          for (int c = d; c < d + 3; ++c) ASSERT_EQ(acc[size_t(r) * (d + 3) + c], 0.5f) << "written past the part";
        }
      }
    }
  });
  EXPECT_GE(tried, 2);
}

// A lane part whose size is not a multiple of 32 keeps its tail as bytes (lane_words.h): every
// code reads back, a token takes 2 + ceil(bits d / 8) bytes, and the fused scores and sums equal
// the decoded tokens' on every target, at each tail length and 2 to 4 bits.
TEST(Method_turbo, LanePartTailsOnEveryTarget) {
  const int tried = for_each_supported_target([] {
    for (int d : {1, 7, 8, 20, 45, 63, 100}) {
      for (int bits = 2; bits <= 4; ++bits) {
        SCOPED_TRACE("d " + std::to_string(d) + ", bits " + std::to_string(bits));
        Rng rng(uint64_t(d * 10 + bits));
        std::vector<float> levels(size_t(1) << bits);
        for (auto& x : levels) x = float(rng.normal());
        const TurboLanePart keys(d, bits, levels, false), values(d, bits, levels, true);
        ASSERT_EQ(keys.bytes(), size_t(16) * (2 + (size_t(bits) * d + 7) / 8));
        const int blocks = 3, n = blocks * 16;
        std::vector<uint8_t> mem(keys.bytes() * blocks);
        std::vector<uint8_t> codes(size_t(n) * d);
        for (int t = 0; t < n; ++t) {
          for (int c = 0; c < d; ++c) codes[size_t(t) * d + c] = uint8_t(rng.next_u64() % levels.size());
          const float scale = float(0.5 + 0.01 * t);
          keys.put(codes.data() + size_t(t) * d, f32_to_f16(scale), t % 16, mem.data() + size_t(t / 16) * keys.bytes());
        }
        std::vector<float> x(size_t(n) * d);
        for (int b = 0; b < blocks; ++b) keys.decode(mem.data() + size_t(b) * keys.bytes(), x.data() + size_t(b) * 16 * d);
        for (int t = 0; t < n; ++t) {
          for (int c = 0; c < d; ++c) ASSERT_EQ(keys.code(mem.data() + size_t(t / 16) * keys.bytes(), t % 16, c), codes[size_t(t) * d + c]);
        }
        // Scores of two query rows over [3, 41), against the decoded tokens.
        const int64_t i0 = 3, i1 = 41;
        std::vector<float> q(size_t(2) * d), state(2 * keys.query_state_floats());
        for (auto& v : q) v = float(rng.normal());
        for (int r = 0; r < 2; ++r) keys.prepare_query(q.data() + size_t(r) * d, state.data() + size_t(r) * keys.query_state_floats());
        std::vector<float> out(size_t(2) * (i1 - i0));
        keys.scores(state.data(), keys.query_state_floats(), 2, mem.data(), keys.bytes(), i0, i1, out.data(), size_t(i1 - i0));
        // add_scores adds the same scores to what is there, as out + score.
        std::vector<float> added(out.size(), 1.5f);
        keys.add_scores(state.data(), keys.query_state_floats(), 2, mem.data(), keys.bytes(), i0, i1, added.data(),
                        size_t(i1 - i0));
        for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(added[i], 1.5f + out[i]) << "score " << i;
        // Sums of five weight rows (four in the kernels' quads, one alone), against the same.
        std::vector<float> w(size_t(5) * (i1 - i0)), acc(size_t(5) * (d + 3), 0.0f);
        for (auto& v : w) v = float(rng.uniform());
        values.accumulate(w.data(), size_t(i1 - i0), 5, mem.data(), keys.bytes(), i0, i1, acc.data(), size_t(d + 3));
        for (int r = 0; r < 5; ++r) {
          for (int c = 0; c < d; ++c) {
            double ref = 0, mag = 0;
            for (int64_t t = i0; t < i1; ++t) {
              ref += double(w[size_t(r) * (i1 - i0) + size_t(t - i0)]) * x[size_t(t) * d + c];
              mag += std::fabs(double(w[size_t(r) * (i1 - i0) + size_t(t - i0)]) * x[size_t(t) * d + c]);
            }
            ASSERT_NEAR(acc[size_t(r) * (d + 3) + c], ref, 1e-5 * mag + 1e-6) << "row " << r << ", channel " << c;
          }
          for (int c = d; c < d + 3; ++c) ASSERT_EQ(acc[size_t(r) * (d + 3) + c], 0.0f) << "written past the part";
        }
        for (int r = 0; r < 2; ++r) {
          for (int64_t t = i0; t < i1; ++t) {
            double ref = 0, mag = 0;
            for (int c = 0; c < d; ++c) {
              ref += double(q[size_t(r) * d + c]) * x[size_t(t) * d + c];
              mag += std::fabs(double(q[size_t(r) * d + c]) * x[size_t(t) * d + c]);
            }
            ASSERT_NEAR(out[size_t(r) * (i1 - i0) + size_t(t - i0)], ref, 1e-5 * mag + 1e-6) << "row " << r << ", token " << t;
          }
        }
      }
    }
  });
  EXPECT_GE(tried, 2);
}

TEST(Method_turbo, PiecesEveryTargetMatchesReference) {
  const int tried = for_each_supported_target([] {
    check_all("turbo:bits=3,channels=128,norm=length", {256}, 48, fixed_lane_tol(256));
    check_all("turbo:bits=1,channels=32", {64}, 48);
  });
  EXPECT_GE(tried, 2);
}

TEST(Method_turbo, PiecesCountAScalePerPiece) {
  // 3 bits and two fp16 scales per token of 256: llama.cpp's turbo3 on Gemma 3's heads.
  EXPECT_DOUBLE_EQ(parse_method("turbo:bits=3,channels=128").bits_per_element(256), 3.125);
  EXPECT_DOUBLE_EQ(parse_method("turbo:bits=2,channels=32").bits_per_element(128), 2.5);
  const auto kc = parse_method("turbo:bits=3,channels=128").keys().key_codec(CodecContext{256, 0});
  const auto vc = parse_method("turbo:bits=3,channels=128").values().value_codec(CodecContext{256, 0});
  EXPECT_EQ(kc->block_bytes(), size_t(16 * 2 * (2 + 3 * 128 / 8)));
  EXPECT_EQ(vc->block_bytes(), kc->block_bytes());
  // As many channels as the head has is the whole head: the paper's codec, the same bytes.
  const auto whole = parse_method("turbo:bits=3,channels=128").keys().key_codec(CodecContext{128, 0});
  const auto paper = parse_method("turbo:bits=3").keys().key_codec(CodecContext{128, 0});
  const auto x = make_data(Data::kOutliers, 16, 128, 3);
  std::vector<uint8_t> a(whole->block_bytes()), b(paper->block_bytes());
  ASSERT_EQ(a.size(), b.size());
  whole->encode(x.data(), 0, a.data());
  paper->encode(x.data(), 0, b.data());
  EXPECT_EQ(a, b);
  for (const char* spec : {"turbo:channels=48", "turbo:channels=100", "turbo:channels=512"}) {
    EXPECT_THROW(parse_method(spec).keys().key_codec(CodecContext{256, 0}), Error) << spec;
    EXPECT_THROW(parse_method(spec).values().value_codec(CodecContext{256, 0}), Error) << spec;
  }
  EXPECT_THROW(parse_method("turbo:bits=2,channels=64,outliers=64"), Error);
  EXPECT_THROW(parse_method("turbo:channels=-32"), Error);
}

// What a scale per piece buys: when one half of the head is loud and the other quiet, the whole
// head's one scale spends its levels on the loud half and leaves the quiet half coarse; with a
// scale per half, the quiet half's relative error is that of a vector of its own.
TEST(Method_turbo, PiecesKeepAQuietHalfFine) {
  const int d = 256, n = 256;
  Rng rng(41);
  std::vector<float> x(size_t(n) * d);
  for (int t = 0; t < n; ++t) {
    for (int c = 0; c < d; ++c) x[size_t(t) * d + c] = float(rng.normal()) * (c < 128 ? 8.0f : 1.0f);
  }
  const auto quiet_error = [&](const char* spec) {
    const auto kc = parse_method(spec).keys().key_codec(CodecContext{d, 0});
    std::vector<uint8_t> block(kc->block_bytes());
    std::vector<float> y(size_t(16) * d);
    double err = 0, ref = 0;
    for (int b = 0; b < n / 16; ++b) {
      const float* xb = x.data() + size_t(b) * 16 * d;
      kc->encode(xb, 0, block.data());
      kc->decode(block.data(), 0, y.data());
      for (int t = 0; t < 16; ++t) {
        for (int c = 128; c < d; ++c) {
          const double e = double(y[size_t(t) * d + c]) - xb[size_t(t) * d + c];
          err += e * e;
          ref += double(xb[size_t(t) * d + c]) * xb[size_t(t) * d + c];
        }
      }
    }
    return err / ref;
  };
  const double whole = quiet_error("turbo:bits=3"), pieces = quiet_error("turbo:bits=3,channels=128");
  // TurboQuant-MSE at 3 bits: about 0.034 of a vector's energy; the whole head's error, spread
  // evenly, is about 65 times the quiet half's energy share times that.
  EXPECT_LT(pieces, 0.05);
  EXPECT_GT(whole, 10 * pieces);
}

// The split picks each group's loudest channels (the mask at the head of the block), and its
// error lies between the uniform widths it mixes.
TEST(Method_turbo, OutlierSplitGivesTheLoudChannelsTheExtraBit) {
  const int d = 128, G = 32, n = 32 * G;
  Rng rng(77);
  std::vector<float> x(size_t(n) * d);
  for (int g = 0; g < n / G; ++g) {
    const int loud0 = (g * 13) % 96;  // a different run of 32 loud channels per group
    for (int t = 0; t < G; ++t) {
      for (int c = 0; c < d; ++c) {
        const bool loud = c >= loud0 && c < loud0 + 32;
        x[(size_t(g) * G + t) * d + c] = float(rng.normal()) * (loud ? 6.0f : 1.0f);
      }
    }
  }
  const auto mse = [&](const std::string& spec, std::vector<uint8_t>* first_block) {
    const auto kc = parse_method(spec).keys().key_codec(CodecContext{d, 0});
    const int B = kc->block_tokens();
    std::vector<uint8_t> block(kc->block_bytes());
    std::vector<float> y(size_t(B) * d);
    double err = 0, ref = 0;
    for (int b = 0; b < n / B; ++b) {
      const float* xb = x.data() + size_t(b) * B * d;
      kc->encode(xb, 0, block.data());
      if (b == 0 && first_block) *first_block = block;
      kc->decode(block.data(), 0, y.data());
      for (size_t i = 0; i < y.size(); ++i) {
        err += std::pow(double(xb[i]) - y[i], 2);
        ref += double(xb[i]) * xb[i];
      }
    }
    return err / ref;
  };
  std::vector<uint8_t> block;
  const double split = mse("turbo:bits=2,outliers=32", &block);
  for (int c = 0; c < d; ++c) EXPECT_EQ((block[size_t(c / 8)] >> (c % 8)) & 1, c < 32 ? 1 : 0) << c;  // group 0: 0..31
  const double two = mse("turbo:bits=2", nullptr), three = mse("turbo:bits=3", nullptr);
  std::printf("relative squared error: turbo 2 bits %.5f, 2 bits + 32 outlier channels at 3 %.5f, 3 bits %.5f\n", two,
              split, three);
  EXPECT_LT(split, two);
  EXPECT_GT(split, three);
  // The ablation with the same bits but the first 32 channels: the loud runs move from group to
  // group, so most of them get the low width.
  const double first = mse("turbo:bits=2,outliers=32,pick=first", nullptr);
  std::printf("the same split with the first 32 channels instead of the loudest: %.5f\n", first);
  EXPECT_GT(first, 1.5 * split);
}

// A mask with too few or too many channels marked (a crafted saved cache) is read safely.
TEST(Method_turbo, OutlierSplitSurvivesADamagedMask) {
  for (uint8_t fill : {uint8_t(0x00), uint8_t(0xFF), uint8_t(0x81)}) {
    check_damaged_blocks("turbo:bits=2,outliers=64", 128, [fill](uint8_t* block, bool) { std::fill_n(block, 16, fill); });
    check_damaged_blocks("turbo:bits=2,outliers=40", 80, [fill](uint8_t* block, bool) { std::fill_n(block, 10, fill); });
  }
}

TEST(LloydMax, LevelsAreSymmetricAndOptimal) {
  const LloydMax& q = lloyd_max_sphere(128, 2);
  ASSERT_EQ(q.levels.size(), 4u);
  EXPECT_NEAR(q.levels[0], -q.levels[3], 1e-6);
  // In units of the coordinate's standard deviation (1/sqrt(d)), close to the Gaussian
  // Lloyd-Max levels +-0.4528, +-1.5104.
  EXPECT_NEAR(q.levels[3] * std::sqrt(128.0), 1.5104, 0.01);
  EXPECT_NEAR(q.levels[2] * std::sqrt(128.0), 0.4528, 0.005);
}

}  // namespace
}  // namespace vq::kv::testing
