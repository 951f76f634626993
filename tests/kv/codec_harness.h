// Checks every codec must pass, shared by the per-method tests: fused scores and value
// accumulation equal decode-then-dot, extreme inputs, and an encode/decode error band.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "tests/each_target.h"
#include "src/core/rng.h"
#include "veloxquant/error.h"
#include "veloxquant/kv/method.h"

namespace vq::kv::testing {

enum class Data { kGaussian, kOutliers, kZeros, kConstant, kHuge };

inline std::vector<float> make_data(Data kind, size_t rows, int d, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(rows * size_t(d));
  for (size_t i = 0; i < x.size(); ++i) {
    const int c = int(i % size_t(d));
    switch (kind) {
      case Data::kGaussian: x[i] = float(rng.normal()); break;
      case Data::kOutliers: x[i] = float(rng.normal()) * (c % 37 == 3 ? 25.0f : 1.0f) + (c == 5 ? 8.0f : 0.0f); break;
      case Data::kZeros: x[i] = 0.0f; break;
      case Data::kConstant: x[i] = 0.75f; break;
      case Data::kHuge: x[i] = float(rng.normal()) * 6.0e3f; break;  // near fp16's limit
    }
  }
  return x;
}

struct Encoded {
  std::vector<uint8_t> bytes;
  int64_t tokens = 0;
};

template <typename Codec>
Encoded encode_run(const Codec& c, const std::vector<float>& x, int64_t pos0) {
  const int B = c.block_tokens(), d = c.head_dim();
  const int64_t blocks = int64_t(x.size() / size_t(d)) / B;
  Encoded e;
  e.tokens = blocks * B;
  e.bytes.resize(size_t(blocks) * c.block_bytes());
  for (int64_t b = 0; b < blocks; ++b) {
    c.encode(x.data() + size_t(b) * B * d, pos0 + b * B, e.bytes.data() + size_t(b) * c.block_bytes());
  }
  return e;
}

template <typename Codec>
std::vector<float> decode_run(const Codec& c, const Encoded& e, int64_t pos0) {
  const int B = c.block_tokens(), d = c.head_dim();
  std::vector<float> out(size_t(e.tokens) * d);
  for (int64_t b = 0; b < e.tokens / B; ++b) {
    c.decode(e.bytes.data() + size_t(b) * c.block_bytes(), pos0 + b * B, out.data() + size_t(b) * B * d);
  }
  return out;
}

inline double norm(const float* x, int d) {
  double s = 0;
  for (int j = 0; j < d; ++j) s += double(x[j]) * x[j];
  return std::sqrt(s);
}

// The bound of a fused path that holds its operands (q4's queries and weights, KIVI's weights)
// in 16-bit fixed point, each within 1/65024 of its group's or run's largest magnitude:
// sqrt(d) / 65024 of |q| |k| for scores by Cauchy-Schwarz over the per-channel errors, and the
// same relative bound for the accumulation of the tests' Gaussian weights.
inline double fixed_point_tol(int d) { return std::sqrt(double(d)) / 65024.0 + 1e-5; }

// The bound of TurboQuant's lane scores at 2 to 4 bits (turbo_lane_kernels.h), which hold the
// query and the levels in 16-bit fixed point, each within 1/8190 of its largest magnitude: the
// query's share is at most sqrt(d) / 8190 of |q| |k| (Cauchy-Schwarz), the levels' at most
// max|level| / min|level| / 8190 of it (each coordinate of k is at least the smallest level
// times the token's scale). 22 bounds that ratio for the tables used at up to 4 bits (Lloyd-Max
// for a Gaussian at 4 bits: 2.73 / 0.128; RaBitQ's grid: 2^bits - 1). Their sums hold the weights
// (times the scales) within half a unit of at most max(1/524159 of a run's sum of |w|, 1/32767 of
// its largest), far inside the same bound for the tests' weights on tokens of similar norm. The
// kernels themselves are held exactly by Method_turbo.FixedPointScoresAreExactIntegerSums and
// Method_turbo.FixedPointSumsAreExactIntegerSums.
inline double fixed_lane_tol(int d) { return (std::sqrt(double(d)) + 22.0) / 8190.0 + 1e-5; }

// Fused scores and accumulation against decode-then-dot, on a run of about `tokens` tokens,
// over sub-ranges that start and end inside blocks, within rel_tol of |q| |k| (scores) and of
// sum |w| |v| (accumulation): float rounding for most codecs; a codec whose fused paths hold the
// query or the weights in fixed point passes the bound that fixed point implies. acc_rel_tol,
// when given (>= 0), holds the accumulation to its own bound (a codec that quantizes only the
// query); otherwise rel_tol holds both.
// ctx: what the codecs are built for (its head_dim is d). score_slack, when given, adds to each
// score's bound the error a codec's scoring allows by design, from the query row's state (a
// lookup table quantized to bytes: VecInfer).
using ScoreSlack = std::function<double(const KeyCodec&, const float* state)>;
inline void check_fused_equals_reference(const Method& m, const CodecContext& ctx, Data kind, uint64_t seed,
                                         int tokens = 96, int n_q = 5, double rel_tol = 1e-5,
                                         double acc_rel_tol = -1, const ScoreSlack& score_slack = nullptr) {
  const int d = ctx.head_dim;
  SCOPED_TRACE(m.spec() + " d=" + std::to_string(d));
  const auto kc = m.keys().key_codec(ctx);
  const auto vc = m.values().value_codec(ctx);
  const int64_t pos0 = 17;
  const auto kx = make_data(kind, size_t(tokens), d, seed);
  const auto vx = make_data(kind, size_t(tokens), d, seed + 1);
  const Encoded ke = encode_run(*kc, kx, pos0), ve = encode_run(*vc, vx, pos0);
  const auto kd = decode_run(*kc, ke, pos0), vd = decode_run(*vc, ve, pos0);
  for (float v : kd) ASSERT_TRUE(std::isfinite(v));
  for (float v : vd) ASSERT_TRUE(std::isfinite(v));
  const auto q = make_data(Data::kGaussian, size_t(n_q), d, seed + 2);
  std::vector<float> states(size_t(n_q) * kc->query_state_floats());
  for (int r = 0; r < n_q; ++r) kc->prepare_query(q.data() + size_t(r) * d, states.data() + r * kc->query_state_floats());
  {
    // Attention prepares a block of rows at once: each row's state has prepare_query's bits.
    std::vector<float> batch(states.size(), 0.0f);
    Workspace ws;
    kc->prepare_queries(q.data(), size_t(d), n_q, batch.data(), kc->query_state_floats(), ws);
    ASSERT_EQ(std::memcmp(batch.data(), states.data(), states.size() * sizeof(float)), 0) << "prepare_queries";
  }

  ASSERT_GT(ke.tokens, 0) << "no whole key block in the run: raise `tokens`";
  ASSERT_GT(ve.tokens, 0) << "no whole value block in the run: raise `tokens`";
  const int64_t n = ke.tokens;
  for (auto [i0, i1] : std::vector<std::pair<int64_t, int64_t>>{{0, n}, {1, n - 3}, {n / 2, n / 2 + 1}, {5, 5}}) {
    if (i1 < i0 || i1 > n) continue;
    std::vector<float> s(size_t(n_q) * size_t(n + 1), 0.0f);
    kc->scores(states.data(), n_q, ke.bytes.data(), pos0, i0, i1, s.data(), size_t(n + 1));
    for (int r = 0; r < n_q; ++r) {
      for (int64_t i = i0; i < i1; ++i) {
        double ref = 0;
        for (int j = 0; j < d; ++j) ref += double(q[size_t(r) * d + j]) * kd[size_t(i) * d + j];
        const double slack = score_slack ? score_slack(*kc, &states[size_t(r) * kc->query_state_floats()]) : 0.0;
        const double bound = rel_tol * norm(&q[size_t(r) * d], d) * norm(&kd[size_t(i) * d], d) + slack + 1e-30;
        ASSERT_LE(std::fabs(s[size_t(r) * (n + 1) + (i - i0)] - ref), bound) << "score r=" << r << " i=" << i;
      }
    }
  }
  const int64_t nv = ve.tokens;
  for (auto [i0, i1] : std::vector<std::pair<int64_t, int64_t>>{{0, nv}, {2, nv - 1}}) {
    const auto w = make_data(Data::kGaussian, size_t(n_q), int(nv), seed + 3);
    std::vector<float> acc(size_t(n_q) * vc->accum_floats(), 0.0f), out(size_t(n_q) * d);
    vc->accumulate(w.data() + i0, size_t(nv), n_q, ve.bytes.data(), pos0, i0, i1, acc.data());
    vc->finalize(acc.data(), n_q, out.data());
    for (int r = 0; r < n_q; ++r) {
      // All rows at once give each row the bits of finalizing it alone.
      std::vector<float> one(static_cast<size_t>(d));
      vc->finalize(acc.data() + size_t(r) * vc->accum_floats(), 1, one.data());
      ASSERT_EQ(std::memcmp(one.data(), out.data() + size_t(r) * d, size_t(d) * sizeof(float)), 0) << "finalize r=" << r;
    }
    for (int r = 0; r < n_q; ++r) {
      double bound = 0;
      std::vector<double> ref(size_t(d), 0.0);
      for (int64_t i = i0; i < i1; ++i) {
        const double wi = w[size_t(r) * nv + i];
        for (int j = 0; j < d; ++j) ref[j] += wi * vd[size_t(i) * d + j];
        bound += std::fabs(wi) * norm(&vd[size_t(i) * d], d);
      }
      double err = 0;
      for (int j = 0; j < d; ++j) err += std::pow(out[size_t(r) * d + j] - ref[j], 2);
      ASSERT_LE(std::sqrt(err), (acc_rel_tol >= 0 ? acc_rel_tol : rel_tol) * bound + 1e-30) << "accumulate r=" << r;
    }
  }
}

inline void check_fused_equals_reference(const std::string& spec, int d, Data kind, uint64_t seed,
                                         int tokens = 96, int n_q = 5, double rel_tol = 1e-5,
                                         double acc_rel_tol = -1) {
  check_fused_equals_reference(parse_method(spec), CodecContext{d, 3}, kind, seed, tokens, n_q, rel_tol,
                               acc_rel_tol);
}

// A block whose header a crafted saved cache has damaged (damage(block, is_key) edits the bytes
// of one encoded key block, then of one value block): decoding, scoring and accumulating read nothing out of
// range (the sanitizer runs watch) and the fused paths still equal the decode (accumulation within
// acc_tol of the sum of |w v|: 1e-4 for float kernels, more for the fixed-point ones).
template <typename Damage>
void check_damaged_blocks(const std::string& spec, int d, Damage damage, double acc_tol = 1e-4) {
  SCOPED_TRACE(spec + " damaged, d=" + std::to_string(d));
  const Method m = parse_method(spec);
  const CodecContext ctx{d, 0};
  const auto kc = m.keys().key_codec(ctx);
  const auto vc = m.values().value_codec(ctx);
  const int n_q = 3;
  const auto kx = make_data(Data::kOutliers, size_t(kc->block_tokens()), d, 21);
  const auto vx = make_data(Data::kOutliers, size_t(vc->block_tokens()), d, 22);
  Encoded ke = encode_run(*kc, kx, 0), ve = encode_run(*vc, vx, 0);
  damage(ke.bytes.data(), true);
  damage(ve.bytes.data(), false);
  const auto kd = decode_run(*kc, ke, 0), vd = decode_run(*vc, ve, 0);
  const auto q = make_data(Data::kGaussian, size_t(n_q), d, 23);
  std::vector<float> states(size_t(n_q) * kc->query_state_floats()), s(size_t(n_q) * size_t(ke.tokens));
  for (int r = 0; r < n_q; ++r) kc->prepare_query(q.data() + size_t(r) * d, states.data() + r * kc->query_state_floats());
  kc->scores(states.data(), n_q, ke.bytes.data(), 0, 0, ke.tokens, s.data(), size_t(ke.tokens));
  for (int r = 0; r < n_q; ++r) {
    for (int64_t i = 0; i < ke.tokens; ++i) {
      double ref = 0;
      for (int j = 0; j < d; ++j) ref += double(q[size_t(r) * d + j]) * kd[size_t(i) * d + j];
      EXPECT_NEAR(s[size_t(r) * ke.tokens + i], ref, 1e-4 * (1 + norm(&q[size_t(r) * d], d) * norm(&kd[size_t(i) * d], d)));
    }
  }
  const auto w = make_data(Data::kGaussian, size_t(n_q), int(ve.tokens), 24);
  std::vector<float> acc(size_t(n_q) * vc->accum_floats(), 0.0f), out(size_t(n_q) * d);
  vc->accumulate(w.data(), size_t(ve.tokens), n_q, ve.bytes.data(), 0, 0, ve.tokens, acc.data());
  vc->finalize(acc.data(), n_q, out.data());
  for (int r = 0; r < n_q; ++r) {
    for (int j = 0; j < d; ++j) {
      double ref = 0, bound = 0;
      for (int64_t i = 0; i < ve.tokens; ++i) {
        ref += double(w[size_t(r) * ve.tokens + i]) * vd[size_t(i) * d + j];
        bound += std::fabs(w[size_t(r) * ve.tokens + i] * vd[size_t(i) * d + j]);
      }
      EXPECT_NEAR(out[size_t(r) * d + j], ref, acc_tol * (1 + bound));
    }
  }
}

// Relative reconstruction error ||x - decode(encode(x))||^2 / ||x||^2 over Gaussian tokens.
inline double relative_mse(const std::string& spec, int d, bool keys, Data kind = Data::kGaussian) {
  const Method m = parse_method(spec);
  const CodecContext ctx{d, 0};
  const auto x = make_data(kind, 256, d, 99);
  std::vector<float> y;
  if (keys) {
    const auto c = m.keys().key_codec(ctx);
    y = decode_run(*c, encode_run(*c, x, 0), 0);
  } else {
    const auto c = m.values().value_codec(ctx);
    y = decode_run(*c, encode_run(*c, x, 0), 0);
  }
  double num = 0, den = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    num += std::pow(double(x[i]) - y[i], 2);
    den += double(x[i]) * x[i];
  }
  return num / den;
}

// The bytes a codec writes per block agree with the method's bits-per-element formula.
inline void check_block_bytes_match_formula(const Method& m, const CodecContext& ctx) {
  const int d = ctx.head_dim;
  const auto kc = m.keys().key_codec(ctx);
  const auto vc = m.values().value_codec(ctx);
  EXPECT_DOUBLE_EQ(double(kc->block_bytes()) * 8 / (double(kc->block_tokens()) * d), m.keys().key_bits(d));
  EXPECT_DOUBLE_EQ(double(vc->block_bytes()) * 8 / (double(vc->block_tokens()) * d), m.values().value_bits(d));
}

inline void check_block_bytes_match_formula(const std::string& spec, int d) {
  check_block_bytes_match_formula(parse_method(spec), CodecContext{d, 0});
}

// A codec that encodes tokens on their own writes, token by token into a zeroed block, exactly
// the bytes its whole-block encode writes (the stream relies on it).
inline void check_single_token_encode(const Method& m, const CodecContext& ctx) {
  const int d = ctx.head_dim;
  const std::string spec = m.spec();
  const auto kc = m.keys().key_codec(ctx);
  const auto vc = m.values().value_codec(ctx);
  const auto check = [&](const auto& c, uint64_t seed) {
    if (!c.encodes_single_tokens()) return;
    const int B = c.block_tokens();
    const auto x = make_data(Data::kOutliers, size_t(B), d, seed);
    std::vector<uint8_t> whole(c.block_bytes()), slots(c.block_bytes(), 0);
    c.encode(x.data(), 32, whole.data());
    for (int t = 0; t < B; ++t) c.encode_token(x.data() + size_t(t) * d, 32 + t, t, slots.data());
    EXPECT_EQ(whole, slots) << spec << " d=" << d;
    // And in runs of several tokens (a prompt's tokens reach the codec so).
    std::vector<uint8_t> runs(c.block_bytes(), 0);
    const int cut = std::max(1, B / 3);
    c.encode_tokens(x.data(), 32, 0, cut, runs.data());
    if (cut < B) c.encode_tokens(x.data() + size_t(cut) * d, 32 + cut, cut, B - cut, runs.data());
    EXPECT_EQ(whole, runs) << spec << " d=" << d << " (runs)";
  };
  check(*kc, 5);
  check(*vc, 6);
}

inline void check_single_token_encode(const std::string& spec, int d) {
  check_single_token_encode(parse_method(spec), CodecContext{d, 0});
}

inline void check_all(const std::string& spec, const std::vector<int>& dims, int tokens = 96,
                      double rel_tol = 1e-5, double acc_rel_tol = -1) {
  for (int d : dims) {
    for (Data kind : {Data::kGaussian, Data::kOutliers, Data::kZeros, Data::kConstant, Data::kHuge}) {
      check_fused_equals_reference(spec, d, kind, 1000 + uint64_t(d) + uint64_t(kind), tokens, 5, rel_tol,
                                   acc_rel_tol);
    }
    check_block_bytes_match_formula(spec, d);
    check_single_token_encode(spec, d);
  }
}

// The prepared states of the n_q rows of q (d floats each) for kc, one after another.
inline std::vector<float> prepare_queries(const KeyCodec& kc, const std::vector<float>& q, int n_q) {
  const size_t qs = kc.query_state_floats();
  std::vector<float> states(size_t(n_q) * qs);
  for (int r = 0; r < n_q; ++r) kc.prepare_query(&q[size_t(r) * kc.head_dim()], &states[size_t(r) * qs]);
  return states;
}

// kc's scores of the n_q prepared states against tokens [i0, i1) of the run e, once on every
// target this CPU runs (for_each_supported_target): each target's scores (rows of i1 - i0) go to
// check(scores), and every target must give the first one's bits. Returns how many targets ran.
template <typename Check>
int scores_on_every_target(const KeyCodec& kc, const std::vector<float>& states, int n_q, const Encoded& e,
                           int64_t i0, int64_t i1, Check check) {
  std::vector<float> first;
  return for_each_supported_target([&] {
    std::vector<float> s(size_t(n_q) * size_t(i1 - i0), -1.0f);
    kc.scores(states.data(), n_q, e.bytes.data(), 0, i0, i1, s.data(), size_t(i1 - i0));
    check(s);
    if (first.empty()) {
      first = s;
    } else {
      EXPECT_EQ(std::memcmp(first.data(), s.data(), s.size() * 4), 0) << "bits differ from the first target";
    }
  });
}

// A rotated spec's head dims: powers of two take the Hadamard rotation, others a dense random
// rotation up to RandomRotation::kMaxDense (1024); beyond it the dimension is refused.
inline void check_rotation_dims(const std::string& spec) {
  const Method m = parse_method(spec);
  EXPECT_NO_THROW(m.keys().key_codec(CodecContext{96, 0})) << spec;
  EXPECT_NO_THROW(m.values().value_codec(CodecContext{96, 0})) << spec;
  EXPECT_NO_THROW(m.keys().key_codec(CodecContext{2048, 0})) << spec;
  EXPECT_THROW(m.keys().key_codec(CodecContext{1056, 0}), Error) << spec;
}

}  // namespace vq::kv::testing
